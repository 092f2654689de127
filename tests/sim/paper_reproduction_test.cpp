// The NTP paper's headline numbers, reproduced with the shipped configs and a few trials.
// Tolerances are the issue's: DP-DROP 9-15%, NTP <= 3%, NTP-PW < 1% of throughput at the top of
// the failed-fraction axis; spare domains for pause-free training 90 / 16 / 0 within 25%.
// docs/sim-paper-comparison.md explains both readings of the axis and has the sensitivity table
// whose ranges the tests below check: the claims must hold over each calibrated knob's range, not
// only at the shipped point, and the model's own margin decides NTP-PW's zero-spare result.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "power/power_model.h"
#include "sim/config.h"
#include "sim/report.h"
#include "sim/snapshot.h"
#include "sim/workload.h"

namespace ntp::sim {
namespace {

constexpr int kDrop = 0, kNtp = 3, kNtpPw = 4;
constexpr double kDomainP = 4e-3;   // domain reading: 1 - (1 - p)^32 = 12%
constexpr double kReplicaP = 5e-4;  // replica reading: 1 - (1 - p)^256 = 12%

SimConfig paper(const std::string& name, const std::vector<std::string>& overrides = {}) {
  Result<SimConfig> c =
      load_config(std::string(NTP_SOURCE_DIR) + "/configs/sim/" + name, overrides);
  NTP_CHECK_MSG(c.ok(), c.status().to_string());
  return *c;
}

// The domain reading of the axis (PP 1: every NVL32 domain is a DP replica) with `overrides`.
SimConfig domain_reading(std::vector<std::string> overrides = {}) {
  overrides.insert(overrides.begin(), {"parallel.pp=1", "sim.trials=8"});
  return paper("paper-b200-nvl32.toml", overrides);
}

// How far the +30% power boost overshoots what a TP28 domain needs to keep pace:
// speed(TP28) x throughput(1 + headroom) - 1. NTP-PW needs no spare exactly when this is >= 0.
double boost_margin(const SimConfig& c) {
  const Workload workload(c);
  const double speed = workload.speed(workload.degree_after_failures(1));
  return speed * power::PowerModel().throughput(1.0 + c.power.headroom) - 1.0;
}

// DP-DROP's loss is 1 - (1 - p)^unit by construction: the axis points were chosen to make it 12%
// (kDomainP, kReplicaP), so it is no evidence for the model. What can fail: the simulated drop
// must match that formula (the placement and the drop accounting), and NTP must lose exactly
// (1 - speed(TP28)) of each hit unit (the degree and speed model), which puts it under 3%.
void expect_loss_structure(const SimConfig& c, double p, int unit_gpus) {
  const SnapshotResult r = snapshot(c, p);
  const double hit = 1.0 - std::pow(1.0 - p, unit_gpus);
  EXPECT_NEAR(r.loss[kDrop], hit, 3 * r.loss_ci[kDrop] + 0.003) << "placement/drop accounting";
  const Workload workload(c);
  const double slowdown = 1.0 - workload.speed(workload.degree_after_failures(1));
  // (Within 2%: a unit with several failed GPUs can drop below TP28.)
  EXPECT_NEAR(r.loss[kNtp], r.loss[kDrop] * slowdown, 0.02 * r.loss[kDrop] * slowdown)
      << "NTP loses 1 - speed(TP28) = " << slowdown << " of each hit unit";
  // The paper's claims: NTP <= ~3%, NTP-PW < 1%.
  EXPECT_LE(r.loss[kNtp], 0.03);
  EXPECT_LT(r.loss[kNtpPw], 0.01);
  EXPECT_EQ(r.loss[kNtpPw] == 0.0, boost_margin(c) >= 0) << "the boost margin decides NTP-PW";
}

TEST(PaperReproduction, LossCurveDomainReading) {
  expect_loss_structure(domain_reading(), kDomainP, 32);
}

TEST(PaperReproduction, LossCurveReplicaReading) {
  expect_loss_structure(paper("paper-b200-nvl32.toml", {"sim.trials=8"}), kReplicaP, 256);
}

// NTP-PW's 0 spares rests on a margin of 0.0007 in speed (0.86593 against 1/throughput(1.3) =
// 0.86527). The model, not a fixed point, must decide it: on each side of the edge the simulated
// spare need follows the sign of the margin.
TEST(PaperReproduction, NtpPwNeedsNoSparesExactlyWhenTheBoostCoversTheSlowdown) {
  const SimConfig shipped = domain_reading();
  EXPECT_GT(boost_margin(shipped), 0.0);
  EXPECT_LT(boost_margin(shipped), 0.002) << "docs/sim-paper-comparison.md calls this a knife edge";
  for (const char* knob :
       {"system.efficiency=0.45", "system.efficiency=0.43", "model.ffn_unit_columns=256",
        "parallel.tp_overlap=0.05", "power.headroom=0.29", "power.headroom=0.35"}) {
    const SimConfig c = domain_reading({knob});
    const SnapshotResult r = snapshot(c, kDomainP);
    EXPECT_EQ(r.spare_domains[kNtpPw] == 0.0, boost_margin(c) >= 0.0)
        << knob << ": margin " << boost_margin(c) << ", spares " << r.spare_domains[kNtpPw];
  }
}

// The sensitivity table of docs/sim-paper-comparison.md: at both ends of each calibrated knob's
// range the loss claims hold and NTP-PW needs no spare; just outside, NTP-PW needs one.
TEST(PaperReproduction, ClaimsHoldOverTheDocumentedKnobRanges) {
  struct Range {
    std::string key;
    std::vector<std::string> inside, outside;
  };
  const std::vector<Range> ranges = {
      {"system.efficiency", {"0.435", "0.58"}, {"0.43", "0.6"}},
      {"model.ffn_unit_columns", {"1", "16"}, {"32", "256"}},
      {"parallel.tp_overlap", {"0", "0.03"}, {"0.05"}},
      {"parallel.dp_overlap", {"0.7", "1"}, {"0.65"}},
  };
  for (const Range& range : ranges) {
    for (const std::string& v : range.inside) {
      const SnapshotResult r = snapshot(domain_reading({range.key + "=" + v}), kDomainP);
      EXPECT_LE(r.loss[kNtp], 0.03) << range.key << "=" << v;
      EXPECT_LT(r.loss[kNtpPw], 0.01) << range.key << "=" << v;
      EXPECT_EQ(r.spare_domains[kNtpPw], 0.0) << range.key << "=" << v;
    }
    for (const std::string& v : range.outside) {
      const SnapshotResult r = snapshot(domain_reading({range.key + "=" + v}), kDomainP);
      EXPECT_GT(r.spare_domains[kNtpPw], 0.0) << range.key << "=" << v << " should flip NTP-PW";
    }
  }
}

TEST(PaperReproduction, SpareDomainsForPauseFreeTraining) {
  Result<Simulator> sim =
      Simulator::create(paper("paper-b200-nvl32-spares.toml", {"sim.trials=4"}));
  ASSERT_TRUE(sim.ok());
  const Summary s = run_monte_carlo(*sim, false);
  EXPECT_NEAR(s.policies[kDrop].spares_needed.mean, 90, 0.25 * 90);
  EXPECT_NEAR(s.policies[kNtp].spares_needed.mean, 16, 0.25 * 16);
  EXPECT_EQ(s.policies[kNtpPw].spares_needed.max, 0);
  // NTP replaces a hit domain's missing fraction, not the domain: its spares are DP-DROP's
  // times (1 - speed(TP28)), give or take the max over time (a property of the model, not of the
  // calibration).
  const Workload workload(paper("paper-b200-nvl32-spares.toml"));
  const double slowdown = 1.0 - workload.speed(workload.degree_after_failures(1));
  EXPECT_NEAR(s.policies[kNtp].spares_needed.mean, s.policies[kDrop].spares_needed.mean * slowdown,
              0.1 * s.policies[kNtp].spares_needed.mean);
}

}  // namespace
}  // namespace ntp::sim
