// The trainer's side of a worker's run: the step loop, one step, and the re-formation that
// executes the recovery protocol's decisions (elastic/). run_training (trainer.cpp) makes one
// LiveRun, starts it and runs it.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/survivors.h"
#include "comm/wait_observer.h"
#include "core/non_copyable.h"
#include "data/batcher.h"
#include "elastic/agreement.h"
#include "elastic/failure_watch.h"
#include "elastic/member_list.h"
#include "elastic/progress.h"
#include "power/power_control.h"
#include "train/event_log.h"
#include "train/hierarchy_plane.h"
#include "train/job.h"
#include "train/rebalancer.h"
#include "train/train_checkpoint.h"
#include "train/train_report.h"
#include "train/undo_log.h"

namespace ntp::train {

// Liveness: every worker beats, and its failure watch reads its two neighbours' beats, every
// elastic::liveness_period(--hang-detect-ms); one still for --hang-detect-ms is hung (or dead).
// Notices (a failed step, a worker gone) reach the watch through the store's event streams at
// once (elastic/failure_watch.h).
// Store errors one re-formation's agreement may meet before the job gives up on the store.
inline constexpr int kAgreementStoreRetries = 5;
// How long a repair waits to be admitted, and a worker parked outside the job (its replica below
// --min-tp) for its domain's repair: the parked one leaves when the job ends, not before.
inline constexpr std::chrono::seconds kRepairPatience{600};
inline constexpr std::chrono::seconds kParkedPatience{30 * 24 * 3600};
// How long a worker of --control-plane hierarchy waits for its runtime's next list (a re-formation
// that takes longer has lost its quorum: the worker gives up with an error).
inline constexpr std::chrono::seconds kHierarchyListPatience{300};

// The whole job's reshard (every member calls it, joiners too): bytes moved between slots, and
// the slowest rank's time.
struct ReshardTotals {
  int64_t bytes = 0, busiest_rank_bytes = 0;
  double slowest_s = 0.0;
};

// One worker's run of the job: its part of the recovery protocol (progress in its heartbeat, the
// failure watch, the agreement), the job it holds and the base state it kept, its steps and its
// checkpoints. run() is the step loop (live_run.cpp), train_step one step (live_step.cpp), reform
// the re-formation (reformation.cpp), which executes the protocol's decisions
// (elastic/member_list.h). Members are destroyed in reverse order: the watch, whose aborts reach
// the jobs, stops before the jobs go; the heartbeat, which reads the progress, before the
// progress.
struct LiveRun : NonCopyable {
  LiveRun(const TrainConfig& config, const WorkerContext& context, data::Batcher train,
          data::Batcher val);
  ~LiveRun() { comm::observe_waits(nullptr); }

  // The first job (or a repair's admission and join), then a resume from a checkpoint.
  // nullopt: ready to train; else the summary of a worker that leaves without training.
  Result<std::optional<TrainSummary>> start();
  Result<TrainSummary> run();  // the step loop, then the last checkpoint and the summary

  void watch_job(Job& j, const elastic::MemberList& list);
  Status open_report(bool append);
  WorkerState worker_state();
  Status finish_pending_save();
  Status save_checkpoint_now();
  Status stop_job(const std::string& why, bool speaks);
  Status mirror_moments(Job& j);
  Result<int64_t> move_zero_state(Job* source, const shard::ClusterLayout& from, Job& next);
  Result<int64_t> move_replicated_state(Job* source, const shard::ClusterLayout& from, Job& next);
  Result<int64_t> restore_from_checkpoint(const elastic::MemberList& list, const Status& why,
                                          Job& next, RecoveryEvent& event);
  Status train_step(int64_t step);
  // The parts of a step (live_step.cpp).
  struct StepTotals {
    double loss = 0.0, grad_norm = 0.0;  // the global batch's, bit-identical on every rank
  };
  struct Update {
    float lr = 0.0f, clip = 1.0f;
  };
  struct StepTimes {
    double fwd_bwd_s = 0.0, sync_wait_s = 0.0, optimizer_s = 0.0;
    // The device's time for forward + backward: the training thread's CPU time in it outside its
    // waits on peers, plus the time a throttled or emulated device adds (throttle). Not its wall
    // time less the waits: on a host with more busy threads than cores, that counts the time the
    // scheduler gave to other processes, which says nothing of this rank's device.
    double compute_s = 0.0;
    double routed_load_peak = 0.0;  // ForwardBackward's
  };
  struct ForwardBackward {
    double loss = 0.0;       // the replica's mean loss
    double compute_s = 0.0;  // StepTimes::compute_s
    // model::Model::routed_load_peak, the largest over the micro-batches (0: no router).
    double routed_load_peak = 0.0;
  };
  Result<ForwardBackward> forward_backward(int64_t step, elastic::Phase phase);
  // Returns the seconds slept for it.
  double throttle(int64_t step, double compute_s, int64_t samples) const;
  Result<StepTotals> step_totals(double replica_loss);
  Result<Update> apply_update(int64_t step, double grad_norm);
  Status report_step(int64_t step, const StepTotals& totals, const Update& update,
                     const StepTimes& times, Clock::time_point step_start);
  Status checkpoint_and_eval(int64_t step, elastic::Phase phase);
  Status observe_speeds(const std::vector<double>& figures);
  // What every member does at a step boundary, as world rank 0 says: admit the slots asking to
  // join, or re-form onto the slots' speeds its rebalancer proposed (empty: equal shares again),
  // or go on. World rank 0 announces in a step's totals (leader_has_news) that it has something
  // to say; only then does the next boundary cost a collective (one broadcast), else none.
  struct StepBoundary {
    std::vector<int> joiners;
    std::vector<int> drops;  // slots measured too slow (--drop-below): re-form without them
    std::optional<std::vector<std::vector<double>>> speeds;
  };
  Result<StepBoundary> step_boundary();
  bool leader_has_news() const;
  Status start_rebalancer(bool same_members);
  // `speeds`: a rebalance onto these slot speeds (same members).
  Result<int64_t> reform(const Status& cause, const std::vector<int>& joiners, double detect_s,
                         const std::vector<std::vector<double>>* speeds = nullptr);
  Result<elastic::MemberList> agree_epoch(const std::vector<int>& joiners, int& store_errors);
  // The control plane's verbs, flat or hierarchy: no watch on any job; a failed step on `epoch`;
  // the re-formation on `list` ended with `status` (ok: marks it done; the hierarchy's runtime
  // also takes a failure, the flat protocol's is reported by the caller).
  void unwatch();
  void report_failure(int epoch);
  Status formed(const elastic::MemberList& list, const Status& status);
  void set_committed(int64_t step);
  Result<shard::ClusterLayout> base_layout(const elastic::MemberList& list,
                                           const Job* source) const;
  struct MovedState {
    int64_t step = 0;  // the step the moved state is at
    ReshardTotals totals;
  };
  Result<MovedState> move_state(const elastic::MemberList& list, Job* source,
                                const shard::ClusterLayout& from, Job& next, RecoveryEvent& event);
  Status report_reformed(const elastic::MemberList& list, const MovedState& state,
                         const shard::ClusterLayout& before, bool same_members,
                         Clock::time_point t0, RecoveryEvent& event);
  void reform_fault_point(const char* phase, const elastic::MemberList& list);
  Status sit_out(const elastic::MemberList& list);
  Status await_recovery();
  TrainSummary left_job(const Status& why);
  // The others went on without this worker while its training thread was stuck: it says so and
  // exits at once (on a watch's thread; the stuck training thread would never return).
  [[noreturn]] void fenced_while_stuck();
  static bool ends_job(const Status& s) {
    return s.code() == StatusCode::kAborted || s.code() == StatusCode::kFailedPrecondition;
  }
  static bool peer_failure(const Status& s) { return s.code() == StatusCode::kUnavailable; }

  const TrainConfig& c;
  const WorkerContext& ctx;
  const shard::SlotRef slot;
  TrainSummary summary;
  data::Batcher train_batches, val_batches;
  const Clock::time_point run_start = Clock::now();
  const std::unique_ptr<shard::SyncStrategy> strategy;
  const std::string group;
  const std::chrono::milliseconds hang_detect;
  elastic::Progress progress;  // the training thread's, carried in the heartbeat
  // The flat protocol's beat on the job's store; null under --control-plane hierarchy, whose
  // runtime beats on the domain's store with the same progress (one beat per worker).
  std::unique_ptr<comm::Heartbeat> heartbeat;
  EventLog events;  // this worker's detections and decisions
  // The job of the last epoch this worker completed, and the state a re-formation started from
  // (kept until the new epoch is proven complete by its first world all-reduce).
  std::unique_ptr<Job> job, base;
  elastic::FailureWatch watch;
  elastic::Agreement agreement;
  // --control-plane hierarchy: the domain hierarchy's runtime, which then watches, agrees and
  // marks done in place of `watch` and `agreement` (never armed or asked); null: the flat protocol.
  // After the jobs: it aborts them, so it goes first.
  std::unique_ptr<HierarchyPlane> plane;
  elastic::MemberList last;  // the newest member list this worker received
  std::optional<TrainReport> report;
  // CPU: records what the planner asks for (nothing, unless --power-limit emulates a control).
  power::RecordingPowerControl power_control;
  const bool boost;
  // Checkpoints: the save started at the end of the previous step is committed at the end of
  // the next one (its write had a step to run); `saved_step` is the last committed save's step.
  CheckpointSaver saver;
  int64_t saved_step = -1;
  int64_t first_step = 0, last_step = 0;
  int64_t committed = 0;  // steps whose update this worker has applied
  // The leader's measured speeds (--rebalance), its proposal for the next step boundary, and the
  // one being carried out (for its metrics line).
  std::optional<Rebalancer> rebalancer;
  std::optional<RebalanceTarget> proposal;
  RebalanceTarget rebalance_carried_out;
  // What a re-formation costs this job, as the leader last measured one (the first job's build
  // until a re-formation happened): a rebalance must first save that much (speed_estimator.h).
  double reform_cost_s = 0.0;
  // A MoE model's routed tokens per expert as this replica saw them, each step's added to the
  // sum so far decayed by kExpertLoadDecay (a load over about the last 10 steps). A decider
  // publishes them with its list; every member places a reduced replica's experts by the loads
  // published (shard/load_layout.h). Empty for a model without a router.
  static constexpr double kExpertLoadDecay = 0.9;
  std::vector<double> expert_tokens;
  std::vector<std::vector<double>> measured_unit_loads() const;
  // The leader's: the join notices its watch had read at its last look that left none to admit
  // (admission.h joiners_asking).
  int64_t join_seen = -1;
  // The last step's totals said that world rank 0 speaks at the next step boundary. Every member
  // of an epoch holds the same value; a re-formation clears it.
  bool boundary_announced = false;
  UndoLog undo;              // the state before the last update (live recovery)
  bool state_ahead = false;  // the job's state is one update past `committed` (ZeRO-1, mid-update)
  const int64_t global_batch;
  double timed_seconds = 0.0;
  int64_t timed_steps = 0;
  bool stop_speaks = false;
  // Why this worker sits outside the job, holding nothing, waiting to join again (it was dropped
  // as too slow, or its replica left below --min-tp); empty while it is a member.
  std::string parked_why;
  // The slots the re-formation in progress drops as too slow (the decider parks them; such a
  // worker rejoins only once its probe finds it recovered), ascending.
  std::vector<int> dropped;
  double probe_baseline_s = 0.0;  // its speed probe's CPU seconds at start (speed_probe.h)
};

}  // namespace ntp::train
