#include "bench_flags.h"

#include <cstdio>
#include <cstdlib>

namespace ntp::bench {

void for_each_flag(
    const std::string& program, int argc, char** argv,
    const std::function<void(const std::string& flag, const std::string& value)>& take) {
  for (int i = 1; i < argc; i += 2) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) {
      flag_error(program, flag + ": missing value (see the usage at the top of the source)");
    }
    take(flag, argv[i + 1]);
  }
}

void flag_error(const std::string& program, const std::string& message) {
  std::fprintf(stderr, "%s: %s\n", program.c_str(), message.c_str());
  std::exit(2);
}

long whole_number(const std::string& program, const std::string& flag, const std::string& text,
                  long low, long high) {
  char* end = nullptr;
  const long v = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || v < low || v > high) {
    flag_error(program, flag + " '" + text + "': give a whole number in [" + std::to_string(low) +
                            ", " + std::to_string(high) + "]");
  }
  return v;
}

double seconds_number(const std::string& program, const std::string& flag, const std::string& text,
                      double low, double high) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !(v >= low && v <= high)) {
    flag_error(program, flag + " '" + text + "': give seconds in [" + std::to_string(low) + ", " +
                            std::to_string(high) + "]");
  }
  return v;
}

std::vector<int> number_list(const std::string& program, const std::string& flag,
                             const std::string& text, long low, long high) {
  std::vector<int> out;
  for (size_t begin = 0;;) {
    const size_t comma = text.find(',', begin);
    out.push_back(static_cast<int>(
        whole_number(program, flag, text.substr(begin, comma - begin), low, high)));
    if (comma == std::string::npos) return out;
    begin = comma + 1;
  }
}

void NumberListFlag::take(const std::string& program, const std::string& flag,
                          const std::string& text, long low, long high) {
  if (!given_) values_.clear();
  given_ = true;
  const std::vector<int> more = number_list(program, flag, text, low, high);
  values_.insert(values_.end(), more.begin(), more.end());
}

std::string command_line(const std::string& program, int argc, char** argv) {
  std::string command = program;
  for (int i = 1; i < argc; ++i) command += std::string(" ") + argv[i];
  return command;
}

}  // namespace ntp::bench
