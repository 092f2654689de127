// Golden tests of the event engine on cases with exact answers (failures from replayed traces).
#include "sim/engine.h"

#include <gtest/gtest.h>

#include <cmath>
#include <sstream>

#include "power/power_model.h"
#include "sim_test_util.h"

namespace ntp::sim {
namespace {

constexpr int kDrop = 0, kSpares = 1, kCkpt = 2, kNtp = 3, kNtpPw = 4, kLive = 5;

// A trace with one row per (hours, gpu, repair_hours, blast).
struct Row {
  double hours;
  int gpu;
  double repair_hours;
  int blast = 1;
};
std::string trace(const std::vector<Row>& rows, const std::string& name) {
  std::ostringstream os;
  os << "hours,gpu,kind,repair_hours,blast\n";
  for (const Row& r : rows)
    os << r.hours << ',' << r.gpu << ",hardware," << r.repair_hours << ',' << r.blast << '\n';
  return testing::write_temp(name, os.str());
}

TrialResult run(const SimConfig& c, bool series = false) {
  Result<Simulator> s = Simulator::create(c);
  NTP_CHECK_MSG(s.ok(), s.status().to_string());
  return s->run_trial(0, series);
}

TEST(Engine, ZeroFailureRateLosesNothingUnderEveryPolicy) {
  SimConfig c = testing::small_config(2);
  const TrialResult r = run(c);
  ASSERT_EQ(r.policies.size(), 6u);
  const double seconds = c.run.days * 86400.0;
  for (const PolicyOutcome& o : r.policies) {
    EXPECT_DOUBLE_EQ(o.throughput_loss, 0.0);
    EXPECT_NEAR(o.goodput, 1.0, 1e-12);
    EXPECT_EQ(o.restarts, 0);
    EXPECT_EQ(o.pauses, 0);
    EXPECT_EQ(o.spares_needed, 0);
    EXPECT_NEAR(o.energy_mwh, 64 * 700.0 * seconds / 3.6e9, 1e-9);
    EXPECT_NEAR(o.energy_per_work, 1.0, 1e-12);
  }
  EXPECT_EQ(r.failures, 0);
}

// k failures in k distinct domains (pp = 1: a domain is a replica) under DP-DROP lose exactly k
// replicas for as long as they stay failed.
TEST(Engine, DpDropLosesExactlyTheFailedDomainsReplicas) {
  for (int k = 1; k <= 5; ++k) {
    std::vector<Row> rows;
    for (int i = 0; i < k; ++i) rows.push_back({0.0, 4 * (3 * i) + i % 4, 1000.0});
    SimConfig c = testing::small_config(
        1, {"failures.trace=\"" + trace(rows, "drop" + std::to_string(k) + ".csv") + "\""});
    const TrialResult r = run(c);
    EXPECT_NEAR(r.policies[kDrop].throughput_loss, k / 16.0, 1e-12) << k;
    // SPARES(2) restores two of them.
    EXPECT_NEAR(r.policies[kSpares].throughput_loss, std::max(0, k - 2) / 16.0, 1e-12) << k;
    EXPECT_EQ(r.policies[kDrop].spares_needed, k);
    EXPECT_DOUBLE_EQ(r.policies[kCkpt].throughput_loss, 0.0);
  }
}

// With PP the unit DP-DROP loses is the pipeline replica: failures in two stages of one replica
// cost one replica, failures in two replicas cost two.
TEST(Engine, DpDropUnitIsThePipelineReplicaUnderPp) {
  // pp = 2: replica r = TP groups {2r, 2r+1} = GPUs [8r, 8r + 8).
  SimConfig same = testing::small_config(
      2, {"failures.trace=\"" + trace({{0, 1, 1000}, {0, 5, 1000}}, "pp_same.csv") + "\""});
  EXPECT_NEAR(run(same).policies[kDrop].throughput_loss, 1.0 / 8, 1e-12);
  SimConfig two = testing::small_config(
      2, {"failures.trace=\"" + trace({{0, 1, 1000}, {0, 9, 1000}}, "pp_two.csv") + "\""});
  EXPECT_NEAR(run(two).policies[kDrop].throughput_loss, 2.0 / 8, 1e-12);
}

// A domain holding two TP groups: spares are whole domains, each replacing two failed groups.
TEST(Engine, SparesCountWholeDomainsOfSeveralGroups) {
  // domain_size 8, tp 4: groups 0-15, domains of two groups; failed groups 0, 2, 4 (GPUs 0, 8, 16).
  SimConfig c = testing::small_config(
      1, {"parallel.domain_size=8",
          "failures.trace=\"" + trace({{0, 0, 1000}, {0, 8, 1000}, {0, 16, 1000}}, "dom2.csv") +
              "\""});
  const TrialResult r = run(c);
  EXPECT_EQ(r.policies[kDrop].spares_needed, 2);  // 3 groups -> 2 domains of 2 groups
  // SPARES(2) = 2 domains = 4 spare groups: every failed replica is restored.
  EXPECT_DOUBLE_EQ(r.policies[kSpares].throughput_loss, 0.0);
  EXPECT_NEAR(r.policies[kDrop].throughput_loss, 3.0 / 16, 1e-12);
}

// NTP keeps each degraded replica at the speed of its reduced degree; NTP-PW boosts it back.
TEST(Engine, NtpLosesOnlyTheDegradedFraction) {
  std::vector<Row> rows = {{0, 0, 1000}, {0, 8, 1000}, {0, 20, 1000}};
  SimConfig c = testing::small_config(1, {"failures.trace=\"" + trace(rows, "ntp.csv") + "\""});
  const Workload w(c);
  const double s3 = w.speed(3);
  ASSERT_LT(s3, 1.0);
  const TrialResult r = run(c);
  EXPECT_NEAR(r.policies[kNtp].throughput_loss, 3 * (1 - s3) / 16.0, 1e-12);
  EXPECT_NEAR(r.policies[kLive].throughput_loss, 3 * (1 - s3) / 16.0, 1e-12);
  const power::PowerModel m;
  const double boosted = std::min(1.0, s3 * m.throughput(1.3));
  EXPECT_NEAR(r.policies[kNtpPw].throughput_loss, 3 * (1 - boosted) / 16.0, 1e-9);
  EXPECT_EQ(r.policies[kNtp].spares_needed, static_cast<int>(std::ceil(3 * (1 - s3) - 1e-9)));
  // Without headroom NTP-PW is plain NTP.
  SimConfig flat = c;
  flat.power.headroom = 0.0;
  EXPECT_NEAR(run(flat).policies[kNtpPw].throughput_loss, 3 * (1 - s3) / 16.0, 1e-12);
}

// A failure taking a whole domain's GPUs below min_degree stops that replica under NTP too.
TEST(Engine, NtpDropsAReplicaBelowTheMinimumDegree) {
  SimConfig c = testing::small_config(
      1, {"failures.trace=\"" + trace({{0, 4, 1000, 4}}, "blast.csv") + "\""});
  const TrialResult r = run(c);
  EXPECT_NEAR(r.policies[kNtp].throughput_loss, 1.0 / 16, 1e-12);
  EXPECT_NEAR(r.policies[kDrop].throughput_loss, 1.0 / 16, 1e-12);
}

// CKPT-RESTART: full capacity, but down for restart + replacement and the work since the last
// checkpoint (every tau = sqrt(2 x write x MTBF) of up time) is lost.
TEST(Engine, CheckpointRestartPaysRestartReplacementAndLostWork) {
  const double fail_h = 7.3;
  SimConfig c = testing::small_config(
      1, {"failures.trace=\"" + trace({{fail_h, 3, 1000}}, "ckpt.csv") + "\""});
  Result<Simulator> sim = Simulator::create(c);
  ASSERT_TRUE(sim.ok());
  const double T = 2 * 86400.0, write = 30.0;
  const double tau = std::sqrt(2.0 * write * T);  // one failure over the trace: MTBF = T
  EXPECT_NEAR(sim->checkpoint_interval_s(), tau, 1e-9);
  const double eff = tau / (tau + write);
  const double down = 10 * 60.0 + 3600.0;
  const double lost = std::fmod(fail_h * 3600.0, tau);
  const TrialResult r = sim->run_trial(0, false);
  EXPECT_NEAR(r.policies[kCkpt].goodput, (T - down - lost) * eff / T, 1e-12);
  EXPECT_NEAR(r.policies[kCkpt].down_hours, down / 3600.0, 1e-12);
  EXPECT_EQ(r.policies[kCkpt].restarts, 1);
  // DP-DROP restarts without waiting for hardware and then runs one replica short.
  const double drop =
      ((fail_h * 3600.0 - lost) * 16 + (T - fail_h * 3600.0 - 600.0) * 15) * eff / (16 * T);
  EXPECT_NEAR(r.policies[kDrop].goodput, drop, 1e-12);
  // NTP-LIVE: down only for the live recovery, nothing lost.
  EXPECT_NEAR(r.policies[kLive].down_hours, 20.0 / 3600.0, 1e-12);
  EXPECT_EQ(r.policies[kLive].restarts, 0);
}

// NTP-PW-LIVE = NTP-PW's capacity with NTP-LIVE's transients.
TEST(Engine, NtpPwLiveCombinesBoostAndLiveRecovery) {
  SimConfig c = testing::small_config(
      1, {"failures.trace=\"" + trace({{3, 0, 5}, {4, 9, 100}}, "pwlive.csv") + "\"",
          "sim.policies=[\"NTP-PW\", \"NTP-LIVE\", \"NTP-PW-LIVE\"]"});
  const TrialResult r = run(c);
  ASSERT_EQ(r.policies.size(), 3u);
  EXPECT_NEAR(r.policies[2].throughput_loss, r.policies[0].throughput_loss, 1e-12);
  EXPECT_NEAR(r.policies[2].down_hours, r.policies[1].down_hours, 1e-12);
  EXPECT_NEAR(r.policies[2].down_hours, 3 * 20.0 / 3600.0, 1e-12);  // 2 failures, 1 repair
  EXPECT_EQ(r.policies[2].restarts, 0);
  EXPECT_GT(r.policies[2].goodput, r.policies[0].goodput);
  EXPECT_GE(r.policies[2].goodput, r.policies[1].goodput);
}

TEST(Engine, RepairRestoresExactlyTheGpusAFailureTookDown) {
  // GPU 0 fails at 1 h until 11 h; a tray failure at 2 h takes GPUs 1-3 (GPU 0 already down)
  // until 3 h. At 3.5 h only GPU 0 is down, at 11.5 h nothing is.
  SimConfig c = testing::small_config(
      1, {"failures.trace=\"" + trace({{1, 0, 10}, {2, 2, 1, 4}}, "overlap.csv") + "\"",
          "sim.sample_hours=0.5"});
  const TrialResult r = run(c, true);
  auto failed_at = [&](double h) {
    for (const SeriesPoint& p : r.series) {
      if (std::abs(p.hours - h) < 1e-9) return p.failed_gpus;
    }
    return std::int64_t{-1};
  };
  EXPECT_EQ(failed_at(0.5), 0);
  EXPECT_EQ(failed_at(1.5), 1);
  EXPECT_EQ(failed_at(2.5), 4);
  EXPECT_EQ(failed_at(3.5), 1);
  EXPECT_EQ(failed_at(11.5), 0);
  EXPECT_EQ(r.series.size(), 96u);  // 2 days every half hour
}

TEST(Engine, EnergyCountsActiveAndIdleGpus) {
  // No restarts or checkpoints: 2 domains dropped for the whole run under DP-DROP.
  SimConfig c = testing::small_config(
      1, {"failures.trace=\"" + trace({{0, 0, 1000}, {0, 4, 1000}}, "energy.csv") + "\"",
          "recovery.restart_minutes=0", "recovery.checkpoint_write_seconds=0"});
  const TrialResult r = run(c);
  const double T = 2 * 86400.0;
  const double watts = 700.0 * (14 * 4 + 0.25 * 2 * 3);  // 14 running domains, 6 idle survivors
  EXPECT_NEAR(r.policies[kDrop].energy_mwh, watts * T / 3.6e9, 1e-9);
  EXPECT_NEAR(r.policies[kDrop].goodput, 14.0 / 16, 1e-12);
}

TEST(Engine, FixedBatchPausesWhenSparesRunOut) {
  const std::string t = trace({{5, 0, 10}, {5, 4, 10}, {5, 8, 10}}, "fixed.csv");
  SimConfig c = testing::small_config(
      1, {"failures.trace=\"" + t + "\"", "sim.fixed_batch=true", "sim.spares=0",
          "recovery.restart_minutes=0", "recovery.checkpoint_write_seconds=0"});
  TrialResult r = run(c);
  // DP-DROP needs 3 spares: paused for the 10 h the failures last.
  EXPECT_EQ(r.policies[kDrop].pauses, 1);
  EXPECT_NEAR(r.policies[kDrop].paused_hours, 10.0, 1e-9);
  EXPECT_NEAR(r.policies[kDrop].goodput, 38.0 / 48, 1e-12);
  // SPARES(2) is still one short; CKPT-RESTART never pauses.
  EXPECT_EQ(r.policies[kSpares].pauses, 1);
  EXPECT_EQ(r.policies[kCkpt].pauses, 0);
  // With three spares nobody pauses and the batch stays whole; only CKPT-RESTART (1 h hardware
  // replacement) and NTP-LIVE (20 s per failure and per repair) lose time.
  c.run.spares = 3;
  r = run(c);
  const double T = 2 * 86400.0;
  for (int i : {kDrop, kSpares, kNtp, kNtpPw}) {
    EXPECT_EQ(r.policies[i].pauses, 0);
    EXPECT_NEAR(r.policies[i].goodput, 1.0, 1e-12);
  }
  EXPECT_NEAR(r.policies[kCkpt].goodput, 1.0 - 3600.0 / T, 1e-12);
  // DP-DROP's energy: during the 10 h, 13 running domains and the 3 spare domains at TDP and the
  // 9 survivors of the dropped domains idle; all 64 GPUs at TDP otherwise.
  const double fail_s = 10 * 3600.0;
  const double joules = 700.0 * 64 * (T - fail_s) + 700.0 * (13 * 4 + 3 * 4 + 0.25 * 9) * fail_s;
  EXPECT_NEAR(r.policies[kDrop].energy_mwh, joules / 3.6e9, 1e-9);
  EXPECT_NEAR(r.policies[kLive].goodput, 1.0 - 6 * 20.0 / T, 1e-12);
}

TEST(Engine, DeterministicPerSeedAndTrial) {
  SimConfig c = testing::small_config(
      2, {"failures.rate_per_gpu_day=0.05", "failures.warm_start=true", "sim.days=10"});
  Result<Simulator> sim = Simulator::create(c);
  ASSERT_TRUE(sim.ok());
  const TrialResult a = sim->run_trial(0, false), b = sim->run_trial(0, false);
  const TrialResult other = sim->run_trial(1, false);
  ASSERT_GT(a.failures, 0);
  EXPECT_EQ(a.events, b.events);
  for (std::size_t i = 0; i < a.policies.size(); ++i) {
    EXPECT_EQ(a.policies[i].goodput, b.policies[i].goodput);
    EXPECT_EQ(a.policies[i].energy_mwh, b.policies[i].energy_mwh);
  }
  EXPECT_NE(a.policies[kDrop].goodput, other.policies[kDrop].goodput);
}

// The time series partitions the work: its mean over the run is the trial's goodput.
TEST(Engine, SeriesIntegratesToGoodput) {
  SimConfig c =
      testing::small_config(2, {"failures.rate_per_gpu_day=0.05", "failures.warm_start=true",
                                "sim.days=10", "sim.sample_hours=2"});
  const TrialResult r = run(c, true);
  ASSERT_EQ(r.series.size(), 120u);
  ASSERT_GT(r.failures, 0);
  for (std::size_t i = 0; i < r.policies.size(); ++i) {
    double sum = 0;
    for (const SeriesPoint& p : r.series) sum += p.capacity[i];
    EXPECT_NEAR(sum / 120.0, r.policies[i].goodput, 1e-9) << i;
  }
}

// Statistical check of the failure process: mean failures over many trials match
// gpus x rate x days, and the time-average of failed GPUs matches Little's law.
TEST(Engine, FailureProcessMatchesRateAndLittlesLaw) {
  SimConfig c =
      testing::small_config(1, {"failures.rate_per_gpu_day=0.02", "failures.hardware_fraction=1.0",
                                "failures.hardware_repair_hours=24", "failures.warm_start=true",
                                "sim.days=50", "sim.trials=40"});
  Result<Simulator> sim = Simulator::create(c);
  ASSERT_TRUE(sim.ok());
  double failures = 0, failed = 0;
  for (int t = 0; t < c.run.trials; ++t) {
    const TrialResult r = sim->run_trial(t, false);
    failures += static_cast<double>(r.failures);
    failed += r.mean_failed_gpus;
  }
  failures /= c.run.trials;
  failed /= c.run.trials;
  // Healthy GPUs fail at rate 0.02/day; with q down, the rate is (1 - q) x 64 x 0.02 per day and
  // q = lambda R / (1 + lambda R) with R = 1 day: q = 0.0196.
  const double q = 0.02 / 1.02;
  EXPECT_NEAR(failures, (1 - q) * 64 * 0.02 * 50, 0.1 * 64 * 0.02 * 50);
  EXPECT_NEAR(failed, 64 * q, 0.15 * 64 * q);
}

}  // namespace
}  // namespace ntp::sim
