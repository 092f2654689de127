// The trainer behind `ntp train`: one worker process of a job whose replicas may run at different
// TP degrees. Every worker runs the same loop (train/live_step.cpp reads top to bottom):
//   data -> forward/backward (gradient sync overlapped, bucket by bucket) -> wait for the sync ->
//   global loss and gradient norm -> clip -> optimizer (replicated or ZeRO-1) -> commit ->
//   metrics -> eval
// The job's layout comes from the layout algebra (plan_cluster over the healthy slots), and each
// worker's part of it from WorkerRole (train/worker_role.h); the sync plan is executed by
// SyncExecutor (train/sync_executor.h).
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>

#include "comm/store.h"
#include "core/status.h"
#include "train/train_config.h"

namespace ntp::train {

// What a worker process knows of itself (from `ntp launch`'s environment).
struct WorkerContext {
  int slot_rank = 0;  // NTP_RANK = domain * tp + slot
  std::shared_ptr<comm::Store> store;
  // The same store on a connection of its own, for the heartbeat alone (null: it shares `store`),
  // so that no other thread's store traffic queues a beat behind it: on a loaded host each of
  // those operations may take a scheduler period, and a beat that waits for them looks stopped.
  std::shared_ptr<comm::Store> beat_store;
  // Its scale-up domain's store (`ntp launch --domain-size`, launch::open_domain_store), for
  // --control-plane hierarchy; null: none (the flat protocol needs only `store`).
  std::shared_ptr<comm::Store> domain_store;
  int attempt = 0;        // NTP_ATTEMPT: restarts of the job so far (namespaces its store keys)
  int restart_count = 0;  // NTP_RESTART_COUNT: > 0 for a repair that joins a running job
  // The address this worker listens on for collectives (NTP_LOCAL_ADDR); empty: 127.0.0.1.
  std::string local_addr;
  // Called at the start of every step (lets `ntp launch --inject ...,at=STEP` place faults).
  std::function<void(int64_t step)> on_step;
  // The share of its compute speed this worker runs at in `step` (`--inject throttle:`): after
  // each micro-batch's compute the training thread sleeps (1/factor - 1) times as long. Null: 1.
  std::function<double(int64_t step)> compute_factor;
  // Progress lines and the summary (world rank 0 only); errors go to stderr.
  std::FILE* out = stdout;
};

struct TrainSummary {
  int64_t steps = 0;
  double final_loss = 0.0;
  double final_eval_loss = 0.0;
  double tokens_per_second = 0.0;  // the whole job, over the timed steps
  bool took_part = true;           // false for a worker of a failed slot, or one that left:
  std::string left;                // why it left early (fenced, never admitted); empty otherwise
  // It left because the others declared it dead (fenced) and the job goes on without it: `ntp
  // train` tells the launcher (launch::report_left), whose --replace-failed starts a successor.
  bool fenced = false;
  // The job stopped cleanly because live recovery cannot go on (below --min-tp, no copy of some
  // state): the reason, the same on every survivor; `speaks` on one of them, which says it.
  std::string stopped;
  bool speaks = false;
};

// Runs the whole job on this worker. kInvalidArgument for a bad config (nothing computed);
// kUnavailable when a peer died.
Result<TrainSummary> run_training(TrainConfig config, const WorkerContext& context);

}  // namespace ntp::train
