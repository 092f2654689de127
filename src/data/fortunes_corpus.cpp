#include "data/fortunes_corpus.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

namespace ntp::data {

Result<std::string> load_fortunes_text(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    return not_found(
        dir + " does not exist; install Debian's `fortunes` package (apt-get install fortunes)");
  }
  std::vector<fs::path> files;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    if (e.is_symlink() || !e.is_regular_file()) continue;
    const std::string name = e.path().filename().string();
    if (e.path().extension() == ".dat" || name == "art" || name == "ascii-art") continue;
    files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  std::string text;
  for (const fs::path& p : files) {
    std::ifstream in(p);
    std::string line;
    while (std::getline(in, line)) {
      text += line == "%" ? "" : line;
      text += '\n';
    }
  }
  if (text.empty()) return not_found("no fortune text under " + dir + "; install `fortunes`");
  return text;
}

}  // namespace ntp::data
