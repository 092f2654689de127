// ntp_prepare_corpus OUT_DIR [FORTUNES_DIR]
// Tokenizes the fortunes corpus (data/fortunes_corpus.h) with the byte tokenizer and writes
// OUT_DIR/fortunes_train.bin (first 90% of tokens) and OUT_DIR/fortunes_val.bin (last 10%) in the
// llm.c .bin format. Exit code 2 with one line on stderr for bad input.
#include <cstdio>
#include <filesystem>
#include <span>
#include <string>

#include "data/byte_tokenizer.h"
#include "data/fortunes_corpus.h"
#include "data/token_file.h"

int main(int argc, char** argv) {
  if (argc < 2 || argc > 3) {
    std::fprintf(stderr, "usage: ntp_prepare_corpus OUT_DIR [FORTUNES_DIR]\n");
    return 2;
  }
  const std::string out_dir = argv[1];
  const std::string src = argc == 3 ? argv[2] : ntp::data::kDefaultFortunesDir;
  auto text = ntp::data::load_fortunes_text(src);
  if (!text.ok()) {
    std::fprintf(stderr, "ntp_prepare_corpus: %s\n", text.status().message().c_str());
    return 2;
  }
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  const std::vector<uint16_t> tokens = ntp::data::encode_bytes(*text);
  const size_t split = tokens.size() / 10 * 9;
  const std::span<const uint16_t> all(tokens);
  for (const auto& [name, part] : {std::pair{"fortunes_train.bin", all.first(split)},
                                   std::pair{"fortunes_val.bin", all.subspan(split)}}) {
    const std::string path = out_dir + "/" + name;
    const ntp::Status s = ntp::data::write_token_file(path, part);
    if (!s.ok()) {
      std::fprintf(stderr, "ntp_prepare_corpus: %s\n", s.message().c_str());
      return 1;
    }
    std::printf("%s: %zu tokens\n", path.c_str(), part.size());
  }
  return 0;
}
