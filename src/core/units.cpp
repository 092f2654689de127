#include "core/units.h"

#include <cmath>
#include <cstdio>

namespace ntp {

std::string format_bytes(double bytes) {
  static constexpr const char* kPrefixes[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int prefix = 0;
  double value = bytes;
  while (std::fabs(value) >= 1024.0 && prefix < 5) {
    value /= 1024.0;
    ++prefix;
  }
  char buffer[64];
  if (prefix == 0) {
    std::snprintf(buffer, sizeof(buffer), "%.0f B", value);
  } else {
    std::snprintf(buffer, sizeof(buffer), "%.2f %s", value, kPrefixes[prefix]);
  }
  return buffer;
}

std::string format_seconds(double seconds) {
  char buffer[64];
  const double a = std::fabs(seconds);
  if (a < 1e-3) {
    std::snprintf(buffer, sizeof(buffer), "%.0f us", seconds * 1e6);
  } else if (a < 1.0) {
    std::snprintf(buffer, sizeof(buffer), "%.1f ms", seconds * 1e3);
  } else if (a < 3600.0) {
    std::snprintf(buffer, sizeof(buffer), "%.2f s", seconds);
  } else if (a < 86400.0) {
    std::snprintf(buffer, sizeof(buffer), "%.2f h", seconds / 3600.0);
  } else {
    std::snprintf(buffer, sizeof(buffer), "%.2f d", seconds / 86400.0);
  }
  return buffer;
}

}  // namespace ntp
