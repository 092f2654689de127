// TrainReport: what the job's leader (world rank 0) tells people and machines.
//
//   stdout        a start-up block (cluster, layout, batch split, model, BLAS), one progress line
//                 per step, eval lines and a summary;
//   metrics file  JSON lines: {"type":"start",...}, one {"type":"step",...} per step with loss,
//                 lr, grad_norm, tokens/s and each replica's forward+backward, exposed sync-wait
//                 and optimizer seconds (the slowest rank of the replica), {"type":"eval",...},
//                 {"type":"summary",...}. Schema in docs/train.md.
#pragma once

#include <array>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "core/status.h"
#include "power/boost_planner.h"
#include "shard/cluster_layout.h"
#include "train/batch_split.h"
#include "train/rebalancer.h"
#include "train/train_config.h"

namespace ntp::train {

struct StepFigures {
  int64_t step = 0;
  double loss = 0.0;
  float lr = 0.0f;
  double grad_norm = 0.0;
  float clip = 1.0f;
  double step_s = 0.0;
  double tokens_per_s = 0.0;
};

// One live reconfiguration (a failure survived, or repairs admitted), as the new leader saw it.
struct RecoveryEvent {
  std::string cause;         // the error that surfaced, or "repair"
  int epoch = 0;             // membership epoch after it
  int64_t step = 0;          // the committed step the job continues from
  bool rolled_back = false;  // a step that only some survivors applied was taken back
  std::vector<int> old_degrees, degrees;
  // detect_s: from the start of the failed step to the error surfacing here (0 for repairs);
  // total_s: from then to the re-formed job (agreement + rebuild + reshard).
  // reshard_s: the slowest rank's.
  double detect_s = 0, agree_s = 0, rebuild_s = 0, reshard_s = 0, total_s = 0;
  int64_t reshard_bytes = 0;               // moved between slots, the whole job
  int64_t reshard_busiest_rank_bytes = 0;  // received by the rank that received most
  // Where the state came from: "live" (survivors and DP peers), or "checkpoint" when no live copy
  // existed (ZeRO-1 moments of a lost rank); then checkpoint_step is the step it was saved at.
  std::string state_from = "live";
  int64_t checkpoint_step = -1;
  int64_t steps_redone = 0;  // committed steps the job computes again (work lost)
};

// What every rank reports per step: forward+backward, sync wait and optimizer seconds, the share
// of its sync that overlapped backward, the bytes it moved for the sync (fold + DP buffers), its
// compute seconds (forward+backward less its waits on peers: what its own speed decides), and its
// model's routed load peak (model::Model::routed_load_peak over its micro-batches; 0: no router).
inline constexpr size_t kRankFigures = 7;
inline constexpr size_t kComputeFigure = 5;
inline constexpr size_t kRoutedLoadFigure = 6;
using RankFigures = std::array<double, kRankFigures>;

class TrainReport {
 public:
  // Creates the output folder and the metrics file and prints the start-up block.
  // `append`: continue an existing metrics file (a resumed run, a new leader after a failure).
  static Result<TrainReport> open(const TrainConfig& config, const shard::ClusterLayout& layout,
                                  const std::vector<ReplicaBatch>& batches, std::FILE* out,
                                  bool append);

  // `ranks`: kRankFigures values per world rank (RankFigures).
  void step(const StepFigures& figures, const std::vector<double>& ranks);
  void eval(int64_t step, double loss);
  void resumed(int64_t step, const std::string& dir);
  // The run starts at step 0 from the weights in `dir` (--init-from).
  void initialized(const std::string& dir);
  // A power setting for a replica at `degree` running at `speed` of a healthy one.
  void power(int domain, int degree, double speed, const power::BoostPlan& plan);
  // Logs the event and switches to the new layout.
  void recovery(const RecoveryEvent& event, const shard::ClusterLayout& layout,
                const std::vector<ReplicaBatch>& batches);
  // A re-formation with the same members onto speed-weighted shares (`event.cause` "rebalance"):
  // the slots' speeds and every replica's units before and after; switches to `after`.
  // `why`: the leader's proposal (its raw speeds per world rank, empty when unknown, and what
  // the move saved against the re-formation cost it had to reach).
  void rebalanced(const RecoveryEvent& event, const shard::ClusterLayout& before,
                  const shard::ClusterLayout& after, const std::vector<ReplicaBatch>& batches,
                  const RebalanceTarget& why);
  void checkpoint(int64_t step, const std::string& dir, double blocked_s);
  // The summary line and goodput: wall time, time in committed steps, time lost per cause.
  void finish(int64_t steps, double loss, double eval_loss, double tokens_per_s, double wall_s);

 private:
  TrainReport(const TrainConfig& config, const shard::ClusterLayout& layout,
              const std::vector<ReplicaBatch>& batches, std::FILE* out);
  void write(const std::string& json_line);
  void set_layout(const shard::ClusterLayout& layout, const std::vector<ReplicaBatch>& batches);

  bool quiet_ = false;
  int64_t steps_ = 0;
  std::string metrics_path_;
  std::vector<int> degrees_;      // [replica]
  std::vector<int64_t> samples_;  // [replica]
  std::vector<int> replica_of_;   // [world rank]
  std::vector<double> balance_;   // [replica]: ideal / largest per-rank units, worst space
  std::FILE* out_;
  double committed_s_ = 0, lost_detect_s_ = 0, lost_reconfigure_s_ = 0;
  int reconfigurations_ = 0;
  std::ofstream metrics_;
};

}  // namespace ntp::train
