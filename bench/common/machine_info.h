// What a benchmark prints about the machine it ran on, so that figures can be compared.
#pragma once

#include <string>

namespace ntp::bench {

// "CPU model name, N cores, M GiB RAM" read from /proc (best effort).
std::string machine_description();

}  // namespace ntp::bench
