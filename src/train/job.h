// A worker's job: everything one cluster layout implies for it (communicators, model shard, sync
// executor, optimizer, batch split), how it is built from a layout, and the job-wide operations
// the trainer runs on it (evaluation, a checkpoint load, a dump of the logical tensors, the power
// plan). One job per membership epoch: a re-formation builds a new one (docs/recovery.md).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "core/status.h"
#include "data/batcher.h"
#include "elastic/member_list.h"
#include "model/comm_tp_group.h"
#include "model/model.h"
#include "power/power_control.h"
#include "shard/cluster_layout.h"
#include "shard/sync_plan.h"
#include "train/adamw_optimizer.h"
#include "train/batch_split.h"
#include "train/replica_pace.h"
#include "train/sharded_adamw.h"
#include "train/sync_executor.h"
#include "train/train_config.h"
#include "train/train_report.h"
#include "train/trainer.h"
#include "train/worker_role.h"

namespace ntp::train {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

std::unique_ptr<shard::SyncStrategy> make_strategy(const TrainConfig& c);

// Everything one cluster layout implies for this worker. Members are destroyed in reverse order:
// the executor (which uses the communicators and the model's tensors) goes first.
struct Job {
  int epoch = 0;  // the membership epoch it was built for
  shard::ClusterLayout layout;
  WorkerRole role;
  // Set by abort_all: a rendezvous of this job in progress ends, later ones do not start.
  std::shared_ptr<std::atomic<bool>> cancel = std::make_shared<std::atomic<bool>>(false);
  std::mutex comms_mutex;  // abort_all (the watch's thread) against installing communicators
  std::unique_ptr<comm::Communicator> world, tp, replica;
  std::vector<std::unique_ptr<comm::Communicator>> dp;
  std::unique_ptr<model::CommTpGroup> tp_group;
  std::unique_ptr<model::Model> model;
  std::unique_ptr<SyncExecutor> sync;
  std::optional<AdamWOptimizer> adamw;
  std::optional<ShardedAdamW> sharded;
  std::vector<ReplicaPace> paces;     // [replica]: what the split follows and the leader boosts
  std::vector<ReplicaBatch> batches;  // [replica]

  // Breaks every communicator (peers blocked on this worker fail at once) and cancels a
  // rendezvous in progress.
  void abort_all(const std::string& reason) {
    cancel->store(true);
    std::lock_guard<std::mutex> lock(comms_mutex);
    for (auto& d : dp) {
      if (d) d->abort(reason);
    }
    if (replica) replica->abort(reason);
    if (tp) tp->abort(reason);
    if (world) world->abort(reason);
  }
  // Makes `c` one of the job's communicators (a job aborted meanwhile aborts it at once).
  comm::Communicator* install(std::unique_ptr<comm::Communicator>& slot,
                              std::unique_ptr<comm::Communicator> c) {
    std::lock_guard<std::mutex> lock(comms_mutex);
    if (cancel->load()) c->abort("the job was aborted while it was being built");
    slot = std::move(c);
    return slot.get();
  }
};

// "domain:slot", as logs name a slot.
std::string slot_name(shard::SlotRef s);

// The launcher's global ranks (domain * tp + slot) of the layout's active slots, increasing.
std::vector<int> slot_ranks(const shard::ClusterLayout& layout);

// Which process each slot runs now, as the launcher names it in its exit notices (the restart
// counts of the member list: repairs raise them, announcements carry them).
std::vector<std::string> incarnations(int attempt, const elastic::MemberList& list);

// The layout of the job whose active slots are `members` (global ranks), keeping units where they
// are: with the slots' `speeds` (a rebalance; empty: equal shares) when given, else previous's
// speeds for the same members and equal shares for others. A domain without members has left the
// job (ClusterSpec::left). failed_precondition, naming the replica, when one would run below
// --min-tp (the agreement parks such a replica's members unless no other replica is left), or
// none is left.
// `unit_loads` (null: the previous layout's): the measured loads to place loaded spaces by
// (ClusterSpec::unit_loads, as the decider published them).
Result<shard::ClusterLayout> next_layout(
    const TrainConfig& c, const shard::SyncStrategy& strategy, const shard::ClusterLayout& previous,
    const std::vector<int>& members, const std::vector<std::vector<double>>* speeds,
    const std::vector<std::vector<double>>* unit_loads = nullptr);

// kDrawn: the model's initial weights (a new job); kFilledByCaller: zeros, because the caller
// moves the state in at once (a re-formation's reshard, or a checkpoint).
enum class InitialState { kDrawn, kFilledByCaller };

// The part of build_job a forward-only job (`ntp eval` under `ntp launch`) needs: the role, the
// world and TP communicators and the model shard over them (no replica or DP communicators, no
// sync executor, no optimizer, no batch split). Every worker of the layout calls it.
Status build_forward_job(Job& job, const TrainConfig& c, const WorkerContext& ctx,
                         shard::ClusterLayout layout, shard::SlotRef slot, int epoch,
                         InitialState state);

// Builds `job` (made by the caller, so that a failure watch can abort it while it connects) for
// `layout` and `slot`: communicators named by `epoch` (a new one after every membership change),
// the model shard, the sync executor and the optimizer.
Status build_job(Job& job, const TrainConfig& c, const WorkerContext& ctx,
                 shard::ClusterLayout layout, shard::SlotRef slot, int epoch, InitialState state);

// Writes every parameter as its logical tensor (NaN where this rank holds nothing): the reduced
// gradients after the first step's sync (`grads`), or the weights. Testing aid (--dump-dir).
Status dump_logical(const std::string& path, Job& job, bool grads);

// Mean loss over a fixed held-out set: `eval_samples` sequences split over the replicas.
Result<double> evaluate(const TrainConfig& c, Job& job, const data::Batcher& val);

// Loads the job's latest committed checkpoint in --save-dir into `job` (the same one on every
// rank: the leader picks it). nullopt when there is none.
Result<std::optional<int64_t>> load_latest_checkpoint(const TrainConfig& c, Job& job);

// Power boosting (batch policy boost): sets each replica's devices to the power factor its pace
// plan chose (healthy replicas back to 1 x TDP) through `control`, reporting every change. Called
// by the leader whenever the layout changes.
void apply_power(const std::vector<ReplicaPace>& paces, const shard::ClusterLayout& layout,
                 power::PowerControl& control, std::optional<TrainReport>& report);

}  // namespace ntp::train
