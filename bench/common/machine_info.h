// What a benchmark prints about the machine it ran on, so that figures can be compared.
#pragma once

#include <string>

namespace ntp::bench {

// The CPU's model name from /proc/cpuinfo, or "unknown CPU".
std::string cpu_model();

// "CPU model, N cores, M GiB RAM" (best effort, from /proc).
std::string machine_description();

}  // namespace ntp::bench
