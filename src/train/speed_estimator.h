// SpeedEstimator: measured per-rank speeds, and when they are worth a speed-weighted layout.
//
// Fed once per step with every world rank's compute seconds (forward + backward) and the work it
// did (e.g. the units it owns, weighted by their cost), it estimates each rank's speed and proposes
// re-forming with speed-weighted layouts (shard/weighted_layout.h, ClusterSpec::speeds) only when
// that clearly pays, so that noise never moves units. Pure: no clock, no I/O, no communicator; the
// trainer gathers the timings (every rank must feed identical inputs to reach identical verdicts).
//
// Work model: affine. A rank's seconds at full speed are fixed + per_work x work (the fixed part:
// what it does whatever units it holds, e.g. norms, optimizer steps of replicated tensors, launch
// overheads), and a rank at speed v takes 1 / v of that. The fixed fraction F (fixed over a
// full-speed rank of mean work) is fitted across ranks in every step whose ranks hold different
// work (Theil-Sen: the median of the pairwise slopes, then the median intercept, so that a slowed
// rank among them does not bend the line), and the window's value is the median of the steps that
// had such spread, else the last value seen; until the first is seen it is 0 (pure proportional
// work: with equal work everywhere F cannot be told from speed, and does not change any verdict).
//
// Estimate. A rank's relative rate in a step is its predicted full-speed seconds over its measured
// seconds, normalized by the median over the job in the same step (which cancels jitter every rank
// shares); with F = 0 that is its work / seconds over the job's median. Its raw speed is the
// median of its relative rates over the last `window` steps; the noise scale is the median absolute
// deviation from 1 of all relative rates in the window (pooled over ranks, so it is known well even
// from a short window), giving a standard error se of one rank's window median.
//
// Capacity. A rank at speed v does, in the time a full-speed rank of mean work takes, work of
// (v - F) / (1 - F) of that mean: its fixed part is slowed too and comes first. This capacity is
// the rank's weight in a speed-weighted layout (ClusterSpec::speeds); with F = 0 it is its speed.
//
// Hysteresis, per rank: a rank counts as slowed (its effective speed is its raw speed) once the raw
// speed is more than `significance` standard errors below 1 (a rank measured faster is healthy),
// both by the pooled noise and by its own window's spread (a window that straddles a speed change
// is not trusted); it counts as full speed again (effective speed exactly 1.0) once within
// significance / 2 standard errors of 1.
//
// Decision. Step compute time is predicted for a layout that splits each replica's work in
// proportion to weights w (equal: w = 1) as max over ranks of (fixed + per_work x work share) /
// effective speed; with `share_by_pace` the replicas' shares follow their weights too, so a
// rank's share of the whole job's work is w / (sum of all weights). With equal layouts, a
// rebalance is proposed when the speed-weighted split beats the equal one by more
// than `threshold`; with weighted layouts, going back to equal weights is proposed once the equal
// split is within `threshold` of the weighted one, and a re-weighting once the adopted weights are
// beaten by more than `threshold` and some rank moved significantly from its adopted speed. Each
// needs `consecutive` evaluations in a row, and the re-formation must have paid for itself in
// hindsight (ski rental): the predicted step seconds the proposal would have saved, summed over
// the evaluations in a row, must reach `reform_cost_s`, what a re-formation costs the job. A
// slowdown that ends before then (a loaded host's scheduler favouring some workers for a dozen
// steps) moves nothing, and one that lasts costs at most the re-formation twice over before it
// is answered. A proposal is taken as applied from the next step on.
// A slowed rank whose raw speed stays below `drop_below` for `consecutive` steps is reported too
// slow, to be treated as failed. Membership changes need a new estimator.
#pragma once

#include <cstdint>
#include <deque>
#include <span>
#include <vector>

#include "core/status.h"

namespace ntp::train {

struct SpeedEstimatorOptions {
  int window = 8;             // W: steps whose median is a rank's speed; >= 3
  int consecutive = 3;        // K: evaluations in a row before a proposal (or a too-slow report)
  double threshold = 0.10;    // predicted step-time gain a rebalance must beat, in (0, 1)
  double drop_below = 0.3;    // a slowed rank slower than this is too slow (see above)
  double significance = 5.0;  // standard errors from 1 before a rank counts as slowed
  // The batch policy gives each replica a share in proportion to its pace (scale, boost): then
  // a layout's predicted time spreads the whole job's work by weight, not each replica's alone.
  bool share_by_pace = false;
  // Seconds a re-formation costs the job (agreement, rebuild, reshard), >= 0; 0: no such wait.
  double reform_cost_s = 0.0;
};

// kInvalidArgument naming the bad option, its value and the accepted range.
Status validate_speed_estimator_options(const SpeedEstimatorOptions& options);

enum class SpeedProposal {
  kNone,
  kRebalance,  // re-form with ClusterSpec::speeds = SpeedVerdict::speeds
  kEqualize,   // re-form with equal speeds (no ClusterSpec::speeds)
};

const char* speed_proposal_name(SpeedProposal proposal);

struct SpeedVerdict {
  SpeedProposal proposal = SpeedProposal::kNone;
  // Per world rank; empty until `window` steps were seen.
  std::vector<double> speeds;      // effective capacities, the layout's weights: exactly 1.0 where
                                   // indistinguishable from full speed
  std::vector<double> raw_speeds;  // window medians of the relative rates
  double fixed_fraction = 0.0;     // F, the window's fitted fixed part (0 until seen)
  std::vector<int> too_slow;       // world ranks, ascending
  // Predicted step compute seconds (the slowest rank of the job) with the weights in use, with a
  // speed-weighted split and with an equal split; 0 until `window` steps were seen.
  double current_seconds = 0.0;
  double weighted_seconds = 0.0;
  double equal_seconds = 0.0;
  // Predicted step seconds the candidate proposal would have saved, summed over its evaluations
  // in a row (0 without a candidate); a proposal needs SpeedEstimatorOptions::reform_cost_s.
  double saved_seconds = 0.0;
};

class SpeedEstimator {
 public:
  // replica_of_rank[world rank] = the replica (domain) it belongs to; a replica's ranks share its
  // work. kInvalidArgument for bad options, no ranks or a negative replica id.
  static Result<SpeedEstimator> create(std::vector<int> replica_of_rank,
                                       SpeedEstimatorOptions options = {});

  // One step: compute_seconds[r] and work[r] for every world rank r, all finite and > 0.
  Result<SpeedVerdict> observe(std::span<const double> compute_seconds,
                               std::span<const double> work);

  // The weights now in use: all 1.0 unless a rebalance was proposed (and not undone since).
  const std::vector<double>& adopted_speeds() const { return adopted_; }
  // What a re-formation costs now (>= 0, finite; else ignored): a job measures its own.
  void set_reform_cost(double seconds);
  double reform_cost() const { return options_.reform_cost_s; }
  bool weighted() const { return weighted_; }

 private:
  SpeedEstimator(std::vector<int> replica_of_rank, SpeedEstimatorOptions options);
  // Predicted step seconds when each replica's work is split in proportion to `weights` and rank r
  // runs at speeds[r] of `rate` work per second, F = `fixed_fraction` of a mean rank's step fixed.
  double predict(std::span<const double> weights, std::span<const double> speeds,
                 std::span<const double> work, double rate, double fixed_fraction) const;
  // The window's F: the median of its steps' fits; when none of them could show it, the last F
  // seen (a property of the model and the devices, which a re-layout does not change), else 0.
  double window_fixed_fraction();

  SpeedEstimatorOptions options_;
  std::vector<int> replica_of_rank_;
  int replicas_ = 0;
  std::deque<std::vector<double>> relative_;  // last `window` steps' relative rates [step][rank]
  std::deque<double> job_rate_;               // the same steps' median rates (work per second)
  std::deque<double> fixed_fraction_;         // the same steps' fitted F; NaN: equal work
  double known_fixed_fraction_ = 0.0;
  std::vector<bool> slowed_;  // per rank, the hysteresis state
  std::vector<int> below_;    // per rank, evaluations in a row under drop_below
  std::vector<double> adopted_;
  bool weighted_ = false;
  SpeedProposal candidate_ = SpeedProposal::kNone;
  int streak_ = 0;
  double saved_ = 0.0;  // the candidate's predicted saving over its streak
};

}  // namespace ntp::train
