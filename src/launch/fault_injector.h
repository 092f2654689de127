// Fault injection and chaos for `ntp launch`: decides which fault is due for which slot, and
// when; the launcher carries it out (signals, the slowdown thread, a fresh worker).
//
// Contracts:
// * An --inject fault fires once per run: it leaves the pending list when it fires (a fault at a
//   step that fired before a restart does not fire again).
// * A stall is carried out by the worker itself: the launcher puts NTP_STALL_AT=STEP in the
//   environment of the worker it starts for the slot while the stall is pending (stall_step), and
//   the injection fires when that worker reported the step (it is then stalled: launch/stall.h).
// * A slowdown with until= ends once its worker reported that step; one begun by chaos ends after
//   its drawn duration. A slowdown also ends with its worker (the launcher ends it then).
// * Chaos: kill/hang faults at RATE per second (Poisson) from Rng(SEED).fork(node_rank), drawn
//   exactly as before slowdowns and stalls existed (same seed, same kill/hang draws while no
//   chaos stall changed the live workers); slowdowns at RATE per second from a stream of their
//   own (factor 0.25, 0.5 or 0.75 for 0.5 to 2 s); a stall armed with probability 1/4 in each
//   worker started while no other chaos stall is armed, at a step in [2, 20), from a third
//   stream. Never the last live worker: a stall is not armed on a node of one slot, and a kill
//   or hang leaves at least one live worker that is not armed with a chaos stall (a worker that
//   fails by itself can still leave the armed one last).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/rng.h"
#include "launch/fault_spec.h"
#include "launch/worker_slot.h"

namespace ntp::launch {

struct Injection {
  FaultSpec fault;
  std::string why;    // "at step 4", "at 2.5 s", "chaos at 3.1 s"
  bool ends = false;  // slow: the slowdown ends now
};

class FaultInjector {
 public:
  // `faults`: those for this node's slots only.
  FaultInjector(std::vector<FaultSpec> faults, std::optional<ChaosSpec> chaos, int node_rank,
                int local_slots);

  // NTP_STALL_AT for the worker about to start in `rank`'s slot, if a stall waits for it.
  std::optional<long long> stall_step(int rank);
  // NTP_THROTTLE ("F,AT[,UNTIL]") for the worker about to start in `rank`'s slot, if a throttle
  // waits for it (the worker throttles itself: launch/throttle.h).
  std::optional<std::string> throttle_env(int rank) const;
  // NTP_FAULT_POINT items of the `point:` faults, comma-separated, for every worker (empty: none).
  const std::string& fault_points_env() const { return points_; }
  // Whether the step reports are needed now (a step-placed fault pending, a stall armed, a
  // slowdown waiting for its until step).
  bool needs_steps() const;
  // The injections due now. `elapsed`: seconds since launch; `dt`: since the last call.
  std::vector<Injection> due(const std::vector<Slot>& slots, double elapsed, double dt);
  // The slowdown of `rank`'s slot ended with its worker: it waits for nothing any more.
  void forget_slowdown(int rank);

 private:
  struct Slowdown {
    int rank = 0;
    std::optional<long long> until_step;
    std::optional<double> until_seconds;
  };

  void due_pending(const std::vector<Slot>& slots, double elapsed, std::vector<Injection>* out);
  void due_slowdown_ends(const std::vector<Slot>& slots, double elapsed,
                         std::vector<Injection>* out);
  void due_chaos(const std::vector<Slot>& slots, double elapsed, double dt,
                 std::vector<Injection>* out);

  struct Pending {
    FaultSpec fault;
    bool chaos = false;  // a chaos stall
  };

  void begin_slowdown(const FaultSpec& fault, std::optional<double> until_seconds);
  bool armed_for(int rank) const;  // a chaos stall waits in rank's worker

  std::vector<Pending> pending_;
  std::string points_;
  std::vector<Slowdown> slowdowns_;  // every slowdown in progress
  std::optional<ChaosSpec> chaos_;
  int local_slots_;
  Rng kill_hang_;  // the draws of chaos kills and hangs (unchanged since before slowdowns)
  Rng slow_;       // chaos slowdowns
  Rng stall_;      // chaos stalls
  bool chaos_stall_armed_ = false;
};

}  // namespace ntp::launch
