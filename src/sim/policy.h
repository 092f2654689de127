// Failure-handling policies the simulator compares.
//
//   DP-DROP       a replica with a failed GPU stops contributing until repaired.
//   SPARES(n)     as DP-DROP, but n hot spare domains take the place of failed domains.
//   CKPT-RESTART  every failure restarts the job from its last checkpoint on replacement hardware.
//   NTP           a degraded domain keeps training at the reduced TP degree and takes fewer
//                 samples (`scale`); its whole pipeline replica runs at the slowest stage's pace.
//   NTP-PW        NTP plus a power boost within the rack budget; falls back to `scale` for the gap.
//   NTP-LIVE      NTP whose reconfiguration is ntp's live recovery instead of a job restart.
//   NTP-PW-LIVE   NTP-PW with live recovery: what the ntp runtime does (not in the default list).
// DP-DROP, SPARES, NTP and NTP-PW reconfigure through a job restart from the last checkpoint, as
// today's frameworks do; NTP-LIVE pays only the live recovery time.
//
// A policy also says what the job does about a slowed (fail-slow) device: the suffix `+NAME`
// (docs/sim.md "Fail-slow"); no suffix means UNMITIGATED.
//   UNMITIGATED  nothing: a slow GPU stalls its TP group, its replica, and so the whole job.
//   SHARE        the slowed replica takes a batch share in proportion to its speed.
//   REBALANCE    NTP only: the slow rank owns fewer units (weighted by speed, whole units), and
//                the replica's batch share follows the rebalanced speed.
//   BOOST        NTP-PW(-LIVE) only: REBALANCE plus a power boost of the slowed domain's GPUs
//                within the rack budget (power/boost_planner.h); the batch share covers the rest.
//   DROP         a device slower than fail_slow.drop_below is treated as failed while slow (the
//                base policy's reaction to a failure); slower ones above the threshold: SHARE.
#pragma once

#include <string>

#include "core/status.h"

namespace ntp::sim {

enum class PolicyKind { kDpDrop, kSpares, kCkptRestart, kNtp, kNtpPw, kNtpLive, kNtpPwLive };
enum class SlowMitigation { kUnmitigated, kShare, kRebalance, kBoost, kDrop };

struct PolicySpec {
  PolicyKind kind = PolicyKind::kDpDrop;
  int spares = 0;  // SPARES(n) only
  SlowMitigation slow = SlowMitigation::kUnmitigated;
  // The base name, then "+SHARE" etc. unless UNMITIGATED (so today's names are unchanged).
  std::string name() const;
  friend bool operator==(const PolicySpec&, const PolicySpec&) = default;
};

// "DP-DROP", "SPARES(16)", "CKPT-RESTART", "NTP", "NTP-PW", "NTP-LIVE", "NTP-PW-LIVE"
// (case-sensitive), optionally followed by "+UNMITIGATED", "+SHARE", "+REBALANCE", "+BOOST" or
// "+DROP". REBALANCE needs an NTP policy (uniform TP cannot give one rank fewer units) and BOOST a
// power-boosting one; other pairs are refused naming the fix.
Result<PolicySpec> parse_policy(const std::string& text);

inline bool is_ntp(PolicyKind kind) {
  return kind == PolicyKind::kNtp || kind == PolicyKind::kNtpPw || kind == PolicyKind::kNtpLive ||
         kind == PolicyKind::kNtpPwLive;
}
inline bool boosts_power(PolicyKind kind) {
  return kind == PolicyKind::kNtpPw || kind == PolicyKind::kNtpPwLive;
}
std::string mitigation_name(SlowMitigation slow);  // "UNMITIGATED", "SHARE", ...

// Reconfigures live (no restart, no lost work) instead of restarting from a checkpoint.
inline bool recovers_live(PolicyKind kind) {
  return kind == PolicyKind::kNtpLive || kind == PolicyKind::kNtpPwLive;
}

}  // namespace ntp::sim
