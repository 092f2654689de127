#include "machine_info.h"

#include <fstream>
#include <thread>

namespace ntp::bench {

std::string cpu_model() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  }
  return "unknown CPU";
}

std::string machine_description() {
  long mem_kib = 0;
  std::ifstream meminfo("/proc/meminfo");
  for (std::string line; std::getline(meminfo, line);) {
    if (line.rfind("MemTotal:", 0) == 0) {
      mem_kib = std::stol(line.substr(9));
      break;
    }
  }
  return cpu_model() + ", " + std::to_string(std::thread::hardware_concurrency()) + " cores, " +
         std::to_string(mem_kib / (1024 * 1024)) + " GiB RAM";
}

}  // namespace ntp::bench
