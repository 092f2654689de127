#include "train/speed_estimator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/rng.h"

namespace ntp::train {
namespace {

// A job of `replicas` replicas of `degree` ranks; rank r belongs to replica r / degree.
std::vector<int> replicas_of(int replicas, int degree) {
  std::vector<int> out;
  for (int d = 0; d < replicas; ++d) out.insert(out.end(), static_cast<std::size_t>(degree), d);
  return out;
}

// One simulated step: rank r needs work[r] / speed[r] seconds (one unit of work per second at
// speed 1), times a Gaussian jitter 1 + sigma N(0, 1), floored at 0.2 so a time stays positive
// (at sigma = 0.2 that is a 4-sigma event, about once per 30,000 samples).
std::vector<double> step_seconds(Rng& rng, const std::vector<double>& work,
                                 const std::vector<double>& speed, double sigma) {
  std::vector<double> out(work.size());
  for (std::size_t r = 0; r < work.size(); ++r) {
    out[r] = work[r] / speed[r] * std::max(0.2, 1.0 + sigma * rng.normal());
  }
  return out;
}

SpeedEstimator make(std::vector<int> replicas, SpeedEstimatorOptions options = {}) {
  auto e = SpeedEstimator::create(std::move(replicas), options);
  EXPECT_TRUE(e.ok()) << e.status().to_string();
  return std::move(e).value();
}

TEST(SpeedEstimator, NoiseOfTwentyPercentNeverProposesARebalance) {
  for (const double sigma : {0.1, 0.2}) {
    Rng rng(2019);
    SpeedEstimator estimator = make(replicas_of(2, 8));
    const std::vector<double> work(16, 10.0), speed(16, 1.0);
    for (int step = 0; step < 1000; ++step) {
      auto verdict = estimator.observe(step_seconds(rng, work, speed, sigma), work);
      ASSERT_TRUE(verdict.ok());
      ASSERT_EQ(verdict->proposal, SpeedProposal::kNone) << "sigma " << sigma << " step " << step;
      ASSERT_TRUE(verdict->too_slow.empty()) << "step " << step;
    }
    EXPECT_FALSE(estimator.weighted());
  }
}

// The work split a re-formation with these speeds would give each replica's ranks: proportional
// to speed (the layout algebra does this in whole units; the estimator only sees the work).
std::vector<double> split_work(const std::vector<double>& speeds, int degree, double per_rank) {
  std::vector<double> work(speeds.size());
  for (std::size_t begin = 0; begin < speeds.size(); begin += static_cast<std::size_t>(degree)) {
    double sum = 0.0;
    for (int k = 0; k < degree; ++k) sum += speeds[begin + static_cast<std::size_t>(k)];
    for (int k = 0; k < degree; ++k) {
      const std::size_t r = begin + static_cast<std::size_t>(k);
      work[r] = per_rank * degree * speeds[r] / sum;
    }
  }
  return work;
}

struct Proposal {
  int step;
  SpeedVerdict verdict;
};

// Runs `steps` steps of a 2 x 8 job whose rank 3 runs at speed_of(step), applying every proposal
// to the work split from the next step on; returns the proposals.
template <typename SpeedOf>
std::vector<Proposal> run_job(SpeedEstimatorOptions options, double sigma, int steps,
                              SpeedOf speed_of) {
  Rng rng(77);
  SpeedEstimator estimator = make(replicas_of(2, 8), options);
  std::vector<double> work(16, 10.0);
  std::vector<Proposal> out;
  for (int step = 0; step < steps; ++step) {
    std::vector<double> speed(16, 1.0);
    speed[3] = speed_of(step);
    auto verdict = estimator.observe(step_seconds(rng, work, speed, sigma), work);
    EXPECT_TRUE(verdict.ok());
    if (verdict->proposal == SpeedProposal::kNone) continue;
    work = split_work(verdict->proposal == SpeedProposal::kRebalance ? verdict->speeds
                                                                     : std::vector<double>(16, 1.0),
                      8, 10.0);
    out.push_back({step, *verdict});
  }
  return out;
}

TEST(SpeedEstimator, AStepToHalfSpeedIsProposedWithinWindowPlusKAndRecoveryEqualizes) {
  for (const auto& [window, consecutive] : {std::pair{8, 3}, {4, 1}, {16, 5}}) {
    SCOPED_TRACE("W=" + std::to_string(window) + " K=" + std::to_string(consecutive));
    SpeedEstimatorOptions options;
    options.window = window;
    options.consecutive = consecutive;
    // 3% jitter: the median of the >= W/2 + 1 post-change steps then has a standard error of about
    // 1.25 x 3% / sqrt(5) = 1.7% of the speed, so 5% is three standard errors.
    const auto proposals =
        run_job(options, 0.03, 600, [](int step) { return step >= 200 && step < 400 ? 0.5 : 1.0; });
    ASSERT_EQ(proposals.size(), 2u);
    const Proposal& slow = proposals[0];
    EXPECT_EQ(slow.verdict.proposal, SpeedProposal::kRebalance);
    EXPECT_GE(slow.step, 200);
    EXPECT_LT(slow.step, 200 + window + consecutive);
    EXPECT_NEAR(slow.verdict.speeds[3], 0.5, 0.05 * 0.5);
    for (int r = 0; r < 16; ++r) {
      if (r != 3) {
        EXPECT_EQ(slow.verdict.speeds[static_cast<std::size_t>(r)], 1.0) << "rank " << r;
      }
    }
    // Speed-weighted, rank 3's 0.5 of the work of its peers: 80 / 7.5 = 10.67 against 20 s.
    EXPECT_LT(slow.verdict.weighted_seconds, 0.6 * slow.verdict.equal_seconds);
    const Proposal& back = proposals[1];
    EXPECT_EQ(back.verdict.proposal, SpeedProposal::kEqualize);
    EXPECT_GE(back.step, 400);
    EXPECT_LT(back.step, 400 + window + consecutive);
    for (double s : back.verdict.speeds) EXPECT_EQ(s, 1.0);
  }
}

// Ski rental: a move waits until what it would have saved pays for the re-formation. Jitter free,
// so every figure follows by hand: rank 3 at 0.5 takes 20 s where its peers take 10; weighted,
// its replica's 80 units of work over weights 7.5 take 10.67 s, a saving of 9.33 s an evaluation.
// A re-formation of 85 s then needs 10 evaluations in a row (84 s after 9), not K = 3. A slowdown
// of 8 steps gives 7 evaluations (the window median stays 0.5 while 5 of its 8 steps are slow):
// 65 s, which moves units at a cost of 0 and not at 85. Back at full speed, the weighted layout
// loses 0.67 s a step (10.67 against 10), and going back waits until that adds up to 85 s too.
TEST(SpeedEstimator, AMoveWaitsUntilTheTimeItWouldHaveSavedPaysForTheReformation) {
  auto slow_between = [](int from, int to) {
    return [from, to](int step) { return step >= from && step < to ? 0.5 : 1.0; };
  };
  SpeedEstimatorOptions free_moves, costly_moves;
  costly_moves.reform_cost_s = 85.0;
  const auto free_run = run_job(free_moves, 0.0, 600, slow_between(200, 400));
  const auto costly_run = run_job(costly_moves, 0.0, 600, slow_between(200, 400));
  ASSERT_EQ(free_run.size(), 2u);
  ASSERT_EQ(costly_run.size(), 2u);
  EXPECT_EQ(costly_run[0].verdict.proposal, SpeedProposal::kRebalance);
  EXPECT_EQ(costly_run[0].step - free_run[0].step, 10 - 3);
  // Proposed at the first evaluation whose running sum reached the cost: less one evaluation's
  // saving, it had not.
  for (const Proposal& p : costly_run) {
    const double per_evaluation =
        p.verdict.current_seconds - (p.verdict.proposal == SpeedProposal::kRebalance
                                         ? p.verdict.weighted_seconds
                                         : p.verdict.equal_seconds);
    EXPECT_GE(p.verdict.saved_seconds, 85.0);
    EXPECT_LT(p.verdict.saved_seconds - per_evaluation, 85.0);
  }
  EXPECT_NEAR(costly_run[0].verdict.saved_seconds, 10 * (20.0 - 80.0 / 7.5), 1e-9);
  EXPECT_EQ(costly_run[1].verdict.proposal, SpeedProposal::kEqualize);
  // 85 / 0.667 = 127.5: 128 evaluations where a free move took 3.
  EXPECT_EQ(costly_run[1].step - free_run[1].step, 128 - 3);

  EXPECT_EQ(run_job(free_moves, 0.0, 600, slow_between(200, 208)).size(), 2u);
  EXPECT_TRUE(run_job(costly_moves, 0.0, 600, slow_between(200, 208)).empty());
}

TEST(SpeedEstimator, UnderTwentyPercentNoiseAHalfSpeedRankIsStillFoundAndKept) {
  // At 20% jitter the window median's standard error is ~9%, close to the 5 x se a rank must be
  // off to count as slowed: detection takes longer than W + K (at most 29 steps over 200 seeds of
  // this scenario, hence the bound of 40) and the speed is rougher. Going back to equal weights
  // before the recovery happened in 1 of those 200 seeds, not in this one.
  const auto proposals =
      run_job({}, 0.2, 700, [](int step) { return step >= 100 && step < 500 ? 0.5 : 1.0; });
  ASSERT_GE(proposals.size(), 2u);
  EXPECT_EQ(proposals.front().verdict.proposal, SpeedProposal::kRebalance);
  EXPECT_LT(proposals.front().step, 100 + 40);
  EXPECT_EQ(proposals.back().verdict.proposal, SpeedProposal::kEqualize);
  EXPECT_GE(proposals.back().step, 500);
  for (const Proposal& p : proposals) {
    if (p.step < 500) {
      EXPECT_EQ(p.verdict.proposal, SpeedProposal::kRebalance) << p.step;
    }
  }
}

TEST(SpeedEstimator, ASlowRankThatBoundsNothingIsNotWorthMovingUnits) {
  // Replica 0 has 8 ranks of 10 s work, the degraded replica 1 has 4 ranks of 20 s: the job waits
  // for replica 1, so a rank of replica 0 at 0.6 (16.7 s) costs nothing and nothing is proposed.
  Rng rng(5);
  std::vector<int> replicas = replicas_of(1, 8);
  replicas.insert(replicas.end(), 4, 1);
  SpeedEstimator estimator = make(replicas);
  std::vector<double> work(12, 10.0), speed(12, 1.0);
  for (int r = 8; r < 12; ++r) work[static_cast<std::size_t>(r)] = 20.0;
  speed[2] = 0.6;
  for (int step = 0; step < 200; ++step) {
    auto verdict = estimator.observe(step_seconds(rng, work, speed, 0.03), work);
    ASSERT_TRUE(verdict.ok());
    ASSERT_EQ(verdict->proposal, SpeedProposal::kNone) << "step " << step;
    if (step > 20) {
      EXPECT_NEAR(verdict->speeds[2], 0.6, 0.05 * 0.6);  // measured, just not worth acting on
    }
  }
}

TEST(SpeedEstimator, ARankBelowDropBelowIsReportedTooSlow) {
  Rng rng(9);
  SpeedEstimatorOptions options;  // drop_below 0.3, K = 3
  SpeedEstimator estimator = make(replicas_of(2, 8), options);
  const std::vector<double> work(16, 10.0);
  std::vector<double> speed(16, 1.0);
  speed[5] = 0.5;  // slow, but not too slow
  speed[12] = 0.2;
  int first_report = -1;
  for (int step = 0; step < 100; ++step) {
    auto verdict = estimator.observe(step_seconds(rng, work, speed, 0.05), work);
    ASSERT_TRUE(verdict.ok());
    if (!verdict->too_slow.empty()) {
      EXPECT_EQ(verdict->too_slow, std::vector<int>{12});
      if (first_report < 0) first_report = step;
    }
  }
  // The first full window (step W - 1) plus K - 1 more evaluations.
  EXPECT_EQ(first_report, options.window - 1 + options.consecutive - 1);
}

TEST(SpeedEstimator, RepeatedRunsGiveTheSameVerdicts) {
  auto run = [] {
    std::vector<double> trace;
    const auto proposals = run_job({}, 0.1, 300, [](int step) { return step >= 100 ? 0.4 : 1.0; });
    for (const Proposal& p : proposals) {
      trace.push_back(p.step);
      trace.insert(trace.end(), p.verdict.speeds.begin(), p.verdict.speeds.end());
    }
    return trace;
  };
  EXPECT_EQ(run(), run());
}

TEST(SpeedEstimator, BadParametersAndInputsAreRejected) {
  auto bad_options = [](SpeedEstimatorOptions o, const std::string& needle) {
    auto e = SpeedEstimator::create(replicas_of(1, 4), o);
    ASSERT_FALSE(e.ok());
    EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(e.status().message().find(needle), std::string::npos) << e.status().message();
  };
  const double nan = std::numeric_limits<double>::quiet_NaN();
  bad_options({.window = 2}, "speed window 2");
  bad_options({.consecutive = 0}, "speed consecutive 0");
  bad_options({.threshold = 0.0}, "speed threshold");
  bad_options({.threshold = 1.0}, "speed threshold");
  bad_options({.threshold = nan}, "speed threshold");
  bad_options({.drop_below = 0.0}, "speed drop_below");
  bad_options({.drop_below = 1.5}, "speed drop_below");
  bad_options({.significance = -1.0}, "speed significance");
  bad_options({.reform_cost_s = -1.0}, "speed reform_cost_s");
  bad_options({.reform_cost_s = nan}, "speed reform_cost_s");
  EXPECT_FALSE(SpeedEstimator::create({}).ok());
  EXPECT_FALSE(SpeedEstimator::create({0, -1}).ok());

  SpeedEstimator estimator = make(replicas_of(1, 2));
  EXPECT_FALSE(estimator.observe(std::vector<double>{1.0}, std::vector<double>{1.0, 1.0}).ok());
  for (double bad : {0.0, -1.0, nan, std::numeric_limits<double>::infinity()}) {
    auto seconds = estimator.observe(std::vector<double>{1.0, bad}, std::vector<double>{1, 1});
    ASSERT_FALSE(seconds.ok());
    EXPECT_NE(seconds.status().message().find("rank 1"), std::string::npos);
    EXPECT_FALSE(
        estimator.observe(std::vector<double>{1.0, 1.0}, std::vector<double>{bad, 1}).ok());
  }
}

}  // namespace
}  // namespace ntp::train

namespace ntp::train {
namespace {

// Predictions when replicas' batch shares follow their pace: a 3 x 4 job, rank 5 at 0.5, jitter
// free, so every figure follows from the work model by hand (12 ranks of 10 work each, total 120,
// at one unit of work per second). Equal layout: rank 5 takes 10 / 0.5 = 20 s. Weighted (every
// rank's share w / sum w of the total: 120 x w / 11.5): 120 / 11.5 = 10.43 s for all. Without
// share_by_pace the weighted layout only spreads replica 1's 40 over its weights 3.5:
// 40 / 3.5 = 11.43 s.
TEST(SpeedEstimator, ShareByPacePredictsTheWholeJobSpreadByWeight) {
  std::vector<double> speed(12, 1.0);
  speed[5] = 0.5;
  const std::vector<double> work(12, 10.0);
  for (const bool share : {false, true}) {
    SpeedEstimatorOptions options;
    options.share_by_pace = share;
    SpeedEstimator estimator = make(replicas_of(3, 4), options);
    Rng rng(5);
    SpeedVerdict last;
    for (int step = 0; step < options.window; ++step) {
      auto verdict = estimator.observe(step_seconds(rng, work, speed, 0.0), work);
      ASSERT_TRUE(verdict.ok());
      last = *verdict;
    }
    ASSERT_EQ(last.speeds.size(), 12u);
    EXPECT_DOUBLE_EQ(last.speeds[5], 0.5);
    EXPECT_NEAR(last.equal_seconds, 20.0, 1e-9);
    EXPECT_NEAR(last.weighted_seconds, share ? 120.0 / 11.5 : 40.0 / 3.5, 1e-9) << share;
  }
}

}  // namespace
}  // namespace ntp::train

namespace ntp::train {
namespace {

// A job of a TP 8 and a degraded TP 7 replica (the same work over 7 ranks: 11.43 each, 14% more
// than 10) whose ranks take (fixed + per_work x work) / speed seconds, with F = fixed over a
// full-speed rank of the mean work: fixed = F w and per_work = 1 - F at the mean work w. Rank 3
// (of the TP 8 replica) runs at speed_of(step); every proposal's weights split each replica's work
// from the next step on (units in proportion to weight, as the layout algebra does).
template <typename SpeedOf>
std::vector<Proposal> run_affine_job(double fixed_fraction, double sigma, int steps,
                                     SpeedOf speed_of) {
  Rng rng(41);
  std::vector<int> replicas = replicas_of(1, 8);
  replicas.insert(replicas.end(), 7, 1);
  SpeedEstimator estimator = make(replicas);
  auto split = [](const std::vector<double>& weights) {
    std::vector<double> work(15);
    for (const auto& [begin, end] : {std::pair{0, 8}, {8, 15}}) {
      double sum = 0.0;
      for (int r = begin; r < end; ++r) sum += weights[static_cast<std::size_t>(r)];
      for (int r = begin; r < end; ++r) {
        work[static_cast<std::size_t>(r)] = 80.0 * weights[static_cast<std::size_t>(r)] / sum;
      }
    }
    return work;
  };
  std::vector<double> work = split(std::vector<double>(15, 1.0));
  const double mean_work = 160.0 / 15.0;
  std::vector<Proposal> out;
  for (int step = 0; step < steps; ++step) {
    std::vector<double> seconds(15);
    for (std::size_t r = 0; r < 15; ++r) {
      const double speed = r == 3 ? speed_of(step) : 1.0;
      seconds[r] = (mean_work * fixed_fraction + (1.0 - fixed_fraction) * work[r]) / speed *
                   std::max(0.2, 1.0 + sigma * rng.normal());
    }
    auto verdict = estimator.observe(seconds, work);
    EXPECT_TRUE(verdict.ok());
    if (verdict->proposal == SpeedProposal::kNone) continue;
    work = split(verdict->proposal == SpeedProposal::kRebalance ? verdict->speeds
                                                                : std::vector<double>(15, 1.0));
    out.push_back({step, *verdict});
  }
  return out;
}

// With a fixed part F = 0.3, a rank at half speed can do (0.5 - 0.3) / 0.7 = 0.286 of a full
// rank's work in a healthy step's time, not 0.5. The two replicas' healthy ranks hold different
// work, so F is fitted before the slowdown, and the first rebalance already weights rank 3 at
// its capacity: exactly one rebalance, then one return to equal weights after the recovery. (The
// proportional model would weight it 0.5, then find it, still paying its whole fixed part,
// slower after the move, and move again.)
TEST(SpeedEstimator, AFixedPartIsFittedAcrossRanksAndASlowRankIsWeightedByItsCapacityOnce) {
  const auto proposals =
      run_affine_job(0.3, 0.02, 400, [](int step) { return step >= 50 && step < 300 ? 0.5 : 1.0; });
  ASSERT_EQ(proposals.size(), 2u);
  const SpeedVerdict& slow = proposals[0].verdict;
  EXPECT_EQ(slow.proposal, SpeedProposal::kRebalance);
  EXPECT_LT(proposals[0].step, 50 + 8 + 3);
  // F from two levels 1.43 work apart, each a median of 7 ranks at 2% jitter: the slope's standard
  // error is ~10%, the window median's of 8 steps ~4%, so F is within 0.03 (2.5 errors).
  EXPECT_NEAR(slow.fixed_fraction, 0.3, 0.03);
  // Capacity (v - F) / (1 - F) moves 1.2x as fast as F: 0.286 +- 0.04, and v itself +- 5%.
  EXPECT_NEAR(slow.speeds[3], 0.2 / 0.7, 0.05);
  for (std::size_t r = 0; r < 15; ++r) {
    if (r != 3) {
      EXPECT_EQ(slow.speeds[r], 1.0) << "rank " << r;
    }
  }
  EXPECT_EQ(proposals[1].verdict.proposal, SpeedProposal::kEqualize);
  EXPECT_GE(proposals[1].step, 300);
  EXPECT_LT(proposals[1].step, 300 + 8 + 3);
}

// Replicas of different degrees (TP 8 and TP 4: twice the work per rank) on healthy devices with a
// fixed part of 0.4: a rank of the smaller replica takes 1.6x, not 2x, the time of the others.
// F is fitted at 0.4 and no rank is read as slowed, so nothing is proposed.
TEST(SpeedEstimator, ADegradedReplicaOfHealthyRanksWithAFixedPartIsNotReadAsFast) {
  Rng rng(12);
  std::vector<int> replicas = replicas_of(1, 8);
  replicas.insert(replicas.end(), 4, 1);
  SpeedEstimator estimator = make(replicas);
  std::vector<double> work(12, 10.0);
  for (int r = 8; r < 12; ++r) work[static_cast<std::size_t>(r)] = 20.0;
  const double mean_work = (80.0 + 80.0) / 12.0;
  const double fixed = 0.4 / 0.6 * mean_work;  // F = fixed / (fixed + mean_work) at per_work 1
  for (int step = 0; step < 300; ++step) {
    std::vector<double> seconds(12);
    for (std::size_t r = 0; r < 12; ++r) {
      seconds[r] = (fixed + work[r]) * std::max(0.2, 1.0 + 0.03 * rng.normal());
    }
    auto verdict = estimator.observe(seconds, work);
    ASSERT_TRUE(verdict.ok());
    ASSERT_EQ(verdict->proposal, SpeedProposal::kNone) << "step " << step;
    if (step >= 7) {
      EXPECT_NEAR(verdict->fixed_fraction, 0.4, 0.04) << "step " << step;
      for (double s : verdict->speeds) ASSERT_EQ(s, 1.0) << "step " << step;
    }
  }
}

}  // namespace
}  // namespace ntp::train

namespace ntp::train {
namespace {

// A rank measured faster than the job's median is a healthy one (full speed is what the median
// rank does): a CPU host's scheduler favours some workers for a while, and a healthy {4,3,2} job
// re-formed when one such rank, at 1.29, was weighted 2.06. Nor is it ever too slow.
TEST(SpeedEstimator, ARankMeasuredFasterThanTheMedianIsHealthy) {
  Rng rng(3);
  SpeedEstimator estimator = make(replicas_of(2, 4));
  const std::vector<double> work(8, 10.0);
  std::vector<double> speed(8, 1.0);
  speed[6] = 1.3;
  for (int step = 0; step < 200; ++step) {
    auto verdict = estimator.observe(step_seconds(rng, work, speed, 0.02), work);
    ASSERT_TRUE(verdict.ok());
    ASSERT_EQ(verdict->proposal, SpeedProposal::kNone) << "step " << step;
    ASSERT_TRUE(verdict->too_slow.empty()) << "step " << step;
    if (step >= 7) {
      EXPECT_NEAR(verdict->raw_speeds[6], 1.3, 0.05 * 1.3);  // measured as it is
      for (double s : verdict->speeds) ASSERT_EQ(s, 1.0) << "step " << step;
    }
  }
}

}  // namespace
}  // namespace ntp::train
