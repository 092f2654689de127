#include "sim_test_util.h"

#include <gtest/gtest.h>

#include <fstream>

namespace ntp::sim::testing {

SimConfig small_config(int pp, const std::vector<std::string>& overrides) {
  const std::string toml = R"toml(
[model]
layers = 4
hidden = 256
heads = 8
ffn_multiplier = 4.0
sequence = 128
global_batch_tokens = 65536
[parallel]
tp = 4
pp = )toml" + std::to_string(pp) +
                           R"toml(
domain_size = 4
min_degree = 2
degree_multiple = 1
dp_overlap = 1.0
tp_overlap = 0.0
[system]
gpus = 64
hbm_gb = 80
scale_up_gbytes_per_s = 1e9
scale_out_gbits_per_s = 1e9
tdp_watts = 700
idle_power_fraction = 0.25
[failures]
rate_per_gpu_day = 0.0
warm_start = false
[recovery]
restart_minutes = 10
checkpoint_write_seconds = 30
replace_hours = 1
live_recovery_seconds = 20
[sim]
days = 2
trials = 1
seed = 7
policies = ["DP-DROP", "SPARES(2)", "CKPT-RESTART", "NTP", "NTP-PW", "NTP-LIVE"]
)toml";
  Result<SimConfig> c = parse_config(toml, overrides, ::testing::TempDir());
  NTP_CHECK_MSG(c.ok(), c.status().to_string());
  return *c;
}

std::string write_temp(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

}  // namespace ntp::sim::testing
