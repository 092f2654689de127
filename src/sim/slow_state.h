// Slowed GPUs, and what each policy's fail-slow mitigation (policy.h) makes of them.
//
// The state is the set of GPUs in a fail-slow episode with their speed factors (few at a time:
// rate x duration x GPUs), kept apart from ClusterState's failed GPUs; a GPU both failed and slow
// counts as failed. adjust() turns a policy's fail-stop rates (ClusterState::rates) into its
// rates with the slowed GPUs, visiting only the replicas that hold one: O(slowed GPUs x (pp +
// log)) per query. With no slowed GPU it returns the fail-stop rates unchanged, bit for bit.
//
// Per TP group (a stage), with the group's non-failed slowed GPUs:
//   - a degraded group idles its slowest healthy GPUs first when degree_multiple rounding leaves
//     some idle (an assumption about the runtime's choice);
//   - UNMITIGATED, SHARE: the stage runs at its slowest active rank's factor x its speed;
//   - REBALANCE: x Workload::rebalanced_speed instead (units split by speed);
//   - BOOST: plan_boost(NTP speed x rebalanced factor) within the rack headroom, as NTP-PW plans a
//     degraded domain (the slowed GPU is the one that cannot go faster: its peers carry its units
//     at a raised power limit);
//   - DROP: GPUs slower than fail_slow.drop_below count as failed (the degree falls, or a
//     DP-DROP replica stops; CKPT-RESTART swaps them out), the rest as SHARE.
// A replica runs at its slowest stage. UNMITIGATED: every replica waits for the slowest one, so
// the cluster's capacity is scaled by the least (slowed / unslowed) replica speed; the others
// replace each slowed replica's speed by its slowed one (its batch share). DP-DROP and SPARES
// count slowed GPUs only in replicas with no failed group (a replica running on spare groups is
// taken as unslowed). Reactions are instant and, except DROP's, free: the engine charges a DROP
// the restart or live re-formation of a failure (engine.h); no detection delay, batch-share change
// or REBALANCE reshard is priced (docs/sim.md "Fail-slow", limits). Spare need is that of the
// fail-stop state.
#pragma once

#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "power/power_model.h"
#include "sim/cluster_state.h"
#include "sim/config.h"
#include "sim/workload.h"

namespace ntp::sim {

class SlowState {
 public:
  // `workload` and `model` must outlive the state.
  SlowState(const SimConfig& config, const Workload& workload, const power::PowerModel& model);

  // Starts an episode on `gpu` at speed `factor`; false (nothing changes) when it is already slow.
  bool start(std::int64_t gpu, double factor);
  // Ends the episode on `gpu` (it must be slow).
  void end(std::int64_t gpu);
  std::int64_t slow_gpus() const { return static_cast<std::int64_t>(factor_.size()); }
  // The factor of a slow GPU (1 when it is not slow).
  double factor(std::int64_t gpu) const;
  // GPUs in [first, first + count) that DROP takes out now: slow below drop_below, not failed.
  int dropped(const ClusterState& state, std::int64_t first, std::int64_t count) const;
  double drop_below() const { return drop_below_; }

  // `base` = state.rates(policy); the rates with the slowed GPUs under policy.slow.
  PolicyRates adjust(const ClusterState& state, const PolicySpec& policy,
                     const PolicyRates& base) const;

 private:
  struct Stage {
    int degree = 0;
    double speed = 0;         // relative to a healthy stage
    double power_factor = 1;  // x TDP per active GPU
  };
  // A stage of an NTP-like policy: `failed` GPUs down, `slow` the factors of its other slowed GPUs.
  Stage ntp_stage(const ClusterState& state, const PolicySpec& policy, int failed,
                  std::vector<double> slow) const;
  PolicyRates adjust_ntp(const ClusterState& state, const PolicySpec& policy,
                         const PolicyRates& base) const;
  PolicyRates adjust_uniform(const ClusterState& state, const PolicySpec& policy,
                             const PolicyRates& base) const;

  // Slowed, non-failed GPUs' factors by replica, then by group.
  using ByReplica = std::map<std::int64_t, std::map<std::int64_t, std::vector<double>>>;
  ByReplica by_replica(const ClusterState& state) const;

  // Workload::rebalanced_speed, cached per (degree, sorted factors): factors come from a short
  // list, and each refresh asks again for every slowed group.
  double rebalanced(int degree, const std::vector<double>& slow) const;

  const Workload& workload_;
  const power::PowerModel& model_;
  double drop_below_, tdp_watts_, headroom_;
  int tp_, pp_, groups_per_domain_;
  std::map<std::int64_t, double> factor_;  // ordered: results do not depend on hashing
  mutable std::map<std::pair<int, std::vector<double>>, double> rebalanced_;
};

}  // namespace ntp::sim
