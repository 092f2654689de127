#include "machine_info.h"

#include <cstdio>
#include <fstream>
#include <thread>

#include "bench_flags.h"

#ifdef NTP_BENCH_HAS_KERNELS
#include "kernels/cpu/blas_select.h"
#endif

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
         std::to_string(mem_kib / (1024 * 1024)) + " GiB RAM" + compute_description();
}

std::string compute_description() {
#ifdef NTP_BENCH_HAS_KERNELS
  return "; " + kernels::cpu::blas_description();
#else
  return "";
#endif
}

void print_command_and_machine(const std::string& program, int argc, char** argv) {
  std::fprintf(stderr, "# %s\n# machine: %s\n", command_line(program, argc, argv).c_str(),
               machine_description().c_str());
}

}  // namespace ntp::bench
