// Rebalancer: the leader's side of speed-weighted layouts (issue 19). Fed with every step's
// per-rank figures (the all-reduced vector every rank of the job holds alike), it measures each
// rank's compute speed with a SpeedEstimator (train/speed_estimator.h: window medians, hysteresis,
// a predicted gain that must beat a threshold) and says when the job should re-form with new
// per-slot speeds (ClusterSpec::speeds): then a slow rank owns fewer units, and only units whose
// owner's count changed move. The leader decides alone and tells the others at the next step
// boundary (one broadcast), so that every member re-forms with the same speeds.
//
// A rank's work in a step is the parameters of the units it holds (every space's units times
// their parameters per unit) times its replica's samples: a matmul's time is proportional to both.
// Its compute time is its forward + backward less the time it waited on its peers.
#pragma once

#include <optional>
#include <vector>

#include "core/status.h"
#include "shard/cluster_layout.h"
#include "train/batch_split.h"
#include "train/speed_estimator.h"

namespace ntp::train {

// What a rebalance re-forms with: speeds[domain][slot] (empty: equal speeds again), and what the
// estimator saw (per world rank of the job that measured it). With `drop` non-empty the job
// re-forms without those slots instead (global ranks, ascending: too slow to keep, treated as
// failed), whatever `speeds` say.
struct RebalanceTarget {
  std::vector<std::vector<double>> speeds;
  std::vector<double> raw_speeds;
  std::vector<int> drop;
  // What the move would have saved in the evaluations before it (SpeedVerdict::saved_seconds)
  // and the re-formation cost it had to reach (SpeedEstimatorOptions::reform_cost_s).
  double saved_s = 0.0;
  double reform_cost_s = 0.0;
};

class Rebalancer {
 public:
  // For a job laid out as `layout` with `batches`; a new one after every membership change.
  // `drop_too_slow`: a rank the estimator reports too slow (SpeedEstimatorOptions::drop_below)
  // is a target of its own (RebalanceTarget::drop); else too slow is only a slow speed.
  static Result<Rebalancer> create(const shard::ClusterLayout& layout,
                                   const std::vector<ReplicaBatch>& batches,
                                   SpeedEstimatorOptions options = {}, bool drop_too_slow = false);
  // The same members re-formed with a new weighted layout: their work changes, not their history.
  void relayout(const shard::ClusterLayout& layout, const std::vector<ReplicaBatch>& batches);

  // What a re-formation costs the job now (SpeedEstimatorOptions::reform_cost_s).
  void set_reform_cost(double seconds) { estimator_.set_reform_cost(seconds); }
  double reform_cost() const { return estimator_.reform_cost(); }

  // One step: compute_seconds[world rank]. A target when the job should re-form.
  Result<std::optional<RebalanceTarget>> observe(const std::vector<double>& compute_seconds);

 private:
  Rebalancer(SpeedEstimator estimator, shard::ClusterSpec spec, bool drop_too_slow);

  SpeedEstimator estimator_;
  shard::ClusterSpec spec_;
  std::vector<shard::SlotRef> slots_;  // [world rank]
  std::vector<double> work_;           // [world rank]
  bool drop_too_slow_ = false;
};

}  // namespace ntp::train
