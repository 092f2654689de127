// Small configurations for exact-answer simulator tests.
#pragma once

#include <string>
#include <vector>

#include "sim/config.h"

namespace ntp::sim::testing {

// A 64-GPU cluster: TP 4 in 4-GPU domains, PP `pp`, a tiny model that fits anywhere, links so
// fast that communication is free (the DP reduction stays hidden at any degree), no failures.
// `overrides` are section.key=value strings, as `ntp sim --set` takes them.
SimConfig small_config(int pp = 1, const std::vector<std::string>& overrides = {});

// Writes `text` to a fresh file under the test temp dir and returns its path.
std::string write_temp(const std::string& name, const std::string& text);

}  // namespace ntp::sim::testing
