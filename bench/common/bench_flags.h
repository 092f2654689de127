// Flag values of the benches' own command lines: a bad one ends the bench with exit code 2 and
// one stderr line "<program>: <flag> '<value>': <what to give>".
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace ntp::bench {

// Calls take(flag, value) for each "--flag value" pair of argv[1..], in order; a flag without a
// value ends the bench.
void for_each_flag(
    const std::string& program, int argc, char** argv,
    const std::function<void(const std::string& flag, const std::string& value)>& take);

// "<program> <argv[1]> <argv[2]> ...": the command a bench prints so its figures can be reproduced.
std::string command_line(const std::string& program, int argc, char** argv);

[[noreturn]] void flag_error(const std::string& program, const std::string& message);

// A whole number in [low, high].
long whole_number(const std::string& program, const std::string& flag, const std::string& text,
                  long low, long high);

// Seconds (a decimal number) in [low, high].
double seconds_number(const std::string& program, const std::string& flag, const std::string& text,
                      double low, double high);

// Comma-separated whole numbers, each in [low, high].
std::vector<int> number_list(const std::string& program, const std::string& flag,
                             const std::string& text, long low, long high);

// The values of a repeatable list flag (--members N[,N...]) in `values`: its first use replaces
// what `values` held (the default), each later use adds to it.
class NumberListFlag {
 public:
  explicit NumberListFlag(std::vector<int>& values) : values_(values) {}
  // One use: number_list's numbers of `text`.
  void take(const std::string& program, const std::string& flag, const std::string& text, long low,
            long high);

 private:
  std::vector<int>& values_;
  bool given_ = false;
};

}  // namespace ntp::bench
