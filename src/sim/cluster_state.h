// Cluster state: failed GPUs per TP group, and what each policy makes of it at this instant.
//
// GPUs are numbered 0..gpus-1; TP group g holds GPUs [g tp, (g + 1) tp); a scale-up domain holds
// domain_size / tp consecutive groups; pipeline replica r holds groups [r pp, (r + 1) pp).
// The state keeps per-replica aggregates and cluster totals up to date on every change, so each
// query below costs O(pp + tp) at most, independent of the cluster size.
// Capacity is in replica units: a failure-free cluster has capacity replicas().
// "Need" is the spare capacity, in TP groups, that would restore the full batch:
//   DP-DROP-like policies: one spare group per failed group (swap it in);
//   NTP-like policies: per replica min(failed groups, pp x (1 - its capacity)) -- a spare either
//   replaces the failed groups or adds the missing fraction as extra data-parallel capacity --
//   plus pp x capacity x (1 - dp_factor) for the cluster-wide 1/t_min effect.
#pragma once

#include <cstdint>
#include <vector>

#include "power/boost_planner.h"
#include "sim/config.h"
#include "sim/recovery_cost.h"
#include "sim/workload.h"

namespace ntp::sim {

struct PolicyRates {
  double capacity = 0;     // replica units, before downtime/pauses
  double need_groups = 0;  // spare TP groups to restore the full batch
  double active_gpus = 0;  // GPUs doing work
  double power_units = 0;  // sum over active GPUs of their power factor (x TDP)
};

class ClusterState {
 public:
  ClusterState(const SimConfig& config, const Workload& workload, const power::PowerModel& model);

  // Marks GPUs [first, first + count) failed / repaired; returns how many changed state.
  int fail(std::int64_t first, int count);
  int repair(std::int64_t first, int count);
  bool is_failed(std::int64_t gpu) const { return gpu_failed_[gpu] != 0; }

  PolicyRates rates(const PolicySpec& policy) const;

  std::int64_t failed_gpus() const { return failed_gpus_; }
  std::int64_t failed_groups() const { return sum_bad_; }
  std::int64_t failed_replicas() const { return failed_replicas_; }
  std::int64_t replicas() const { return replicas_; }
  int groups_per_domain() const { return groups_per_domain_; }
  // Smallest TP degree among groups that can still run (tp when none is degraded).
  int min_running_degree() const;
  // The groups the last fail()/repair() touched, with their running degree before and after
  // (equal when the GPUs changed but the degree did not), in the order first touched.
  const std::vector<DegreeChange>& last_changes() const { return changes_; }
  // Smallest running degree among the groups `changes` does not list (tp when none); `changes`
  // must describe the current state (their `to` degrees).
  int min_degree_of_others(const std::vector<DegreeChange>& changes) const;

  // What the fail-slow adjustment (slow_state.h) builds on. Per failed-GPU count f of a group
  // (0..tp): its running degree, its stage speed under NTP (`pw` false) or NTP-PW (true), and the
  // NTP-PW power factor of its GPUs.
  int tp() const { return tp_; }
  int pp() const { return pp_; }
  int group_failed(std::int64_t group) const { return group_failed_[group]; }
  int degree_for(int failed) const { return degree_[failed]; }
  double stage_speed(int failed, bool pw) const {
    return pw ? pw_speed_[failed] : ntp_speed_[failed];
  }
  double pw_factor(int failed) const { return failed > 0 ? pw_factor_[failed] : 1.0; }
  double dp_factor(int t_min) const { return dp_factor_[t_min]; }
  // Replica r's speed (its slowest stage; 0 when a stage cannot run) and failed groups.
  double replica_speed(std::int64_t r, bool pw) const { return pw ? rep_[r].pw : rep_[r].ntp; }
  int replica_bad(std::int64_t r) const { return rep_[r].bad; }
  // Sum of the replicas' speeds (NTP capacity before the 1/t_min factor).
  double speed_sum(bool pw) const { return pw ? sum_pw_ : sum_ntp_; }
  // Spare groups left over once `spare_groups` restored what they can (restored_by_spares).
  std::int64_t spare_groups_left(std::int64_t spare_groups) const;

 private:
  void update_group(std::int64_t group, int new_failed);
  void recompute_replica(std::int64_t replica);
  // Replicas restored by `spare_groups` spare groups, fixing replicas with fewest failed first;
  // `left`, when given, receives the spare groups no replica used.
  std::int64_t restored_by_spares(std::int64_t spare_groups, std::int64_t* left = nullptr) const;

  int tp_, pp_, groups_per_domain_;
  std::int64_t replicas_;
  // Per failed-count tables (index = failed GPUs in a group, 0..tp).
  std::vector<int> degree_;
  std::vector<double> ntp_speed_, pw_speed_, pw_factor_;
  std::vector<double> dp_factor_;  // by t_min

  std::vector<std::uint8_t> gpu_failed_;
  std::vector<std::int16_t> group_failed_;
  std::vector<std::int64_t> degree_hist_;   // groups per running degree (index degree)
  std::vector<std::int64_t> replica_hist_;  // replicas per number of failed groups (0..pp)
  struct Replica {
    int bad = 0;
    double ntp = 1, pw = 1, ntp_active = 0, pw_power = 0;
  };
  std::vector<Replica> rep_;
  std::int64_t failed_gpus_ = 0, sum_bad_ = 0, failed_replicas_ = 0;
  double sum_ntp_ = 0, sum_pw_ = 0, sum_ntp_need_ = 0, sum_pw_need_ = 0, sum_ntp_active_ = 0,
         sum_pw_power_ = 0;
  std::int64_t gpus_;
  std::vector<DegreeChange> changes_;
};

}  // namespace ntp::sim
