// control_plane_sim: a deterministic discrete-event simulation of a job's control plane, in
// virtual time, single-threaded, reproducible by seed. Each of N members runs the protocol's own
// machines (elastic/watch_machine.h: the failure watch's notice and liveness rounds;
// elastic/agreement_machine.h: the agreement and the collection) against a modeled store
// (elastic/sim/sim_store.h), as bench/elastic/control_plane_bench runs them against a real
// redis-server: every member beats, its watch reads the event streams and looks at its two ring
// neighbours, one member dies (or hangs) and every survivor aborts, agrees on the next epoch's
// list, forms its new groups and marks the epoch done.
//
// What is modeled rather than run: the group formation (sim/sim_formation.h: comm/pair_mesh.h's
// address exchange as store ops, one batch of its links' addresses, polls of its peers' doubling
// from 1 ms to 100 ms, an erase of what it read; then its dials one after another and a barrier
// per group, message by message) and the heartbeat's writes (one set every liveness period).
//
// Checked on every run: one list per epoch (its key written once), every survivor in the agreed
// list and no one else, every survivor on the same epoch, no watch fired before the fault, every
// survivor formed.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>

#include "elastic/sim/sim_store.h"

namespace ntp::elastic::sim {

// kKill / kHang: a member (with `hierarchy`, one that leads no domain); kLeaderKill /
// kLeaderHang: a domain's leader (hierarchy only); kDomainLoss: every GPU of a domain at once,
// its launcher with them (a rack's power: no exit notice; hierarchy only).
enum class Fault { kKill, kHang, kLeaderKill, kLeaderHang, kDomainLoss };

struct SimConfig {
  int gpus = 64;
  int tp = 8;  // a replica's size: member id / tp is its replica (its scale-up domain)
  StoreModel store;
  Duration link_round_trip = std::chrono::microseconds(50);
  Duration connect_per_link = std::chrono::microseconds(50);  // a member's CPU per link set up
  // A dial's round trip: from a member's connect to the link up at both ends (both protocols'
  // formation, sim/sim_formation.h).
  Duration dial_round_trip = std::chrono::microseconds(50);
  // The members' own CPU: per store op sent and per reply taken in (syscalls, parsing, waking a
  // thread), on a host of `host_cores` cores shared by every member (0: a CPU each).
  Duration cpu_per_op{0};
  // More CPU, past cpu_per_op, for the reply to a blocking stream read that carries events: the
  // member's notice or waiter thread woken from its blocked read, the events parsed and acted on
  // (an abort wakes the training thread). The flat formation charges the same for each thread a
  // dial or a barrier message wakes. Fitted on a host (bench/elastic/sim_vs_bench.py).
  Duration wake_cpu{0};
  int host_cores = 0;
  std::chrono::milliseconds hang_detect{1000};
  std::chrono::milliseconds steady{3000};  // failure-free time before the fault, >= 2.5 s
  Fault fault = Fault::kKill;
  bool form = true;
  // The (global) store serves slow_store_factor times fewer ops a second from the fault on.
  double slow_store_factor = 1;
  // The domain hierarchy (docs/design/control-plane-hierarchy.md): a store per domain of `tp`
  // GPUs and a global one where only the domains' leaders beat, watch and agree. The leaders'
  // watch gives a domain global_hang_factor x hang_detect: longer than a leader's takeover
  // (its domain's detection, hang_detect plus two periods, and a domain agreement).
  bool hierarchy = false;
  int global_hang_factor = 3;
  // With the hierarchy: a second member killed this long after the first fault (negative:
  // none), in the same domain as the first or in the next one; the figures then run to the
  // formation that follows both.
  Duration second_kill_after{-1};
  bool second_in_same_domain = false;
  // second_kill_after counts from the fault's detection (the first member's abort after it: at
  // once for a kill, hang_detect and up to two beat periods later for a hang) instead of from
  // the fault, so that a small delay lands in the recovery whatever the fault.
  bool second_kill_from_detection = false;
  // With the hierarchy: the leader of the domain after the first fault's is paused this long
  // after the first fault (negative: never) and continued pause_for later, as SIGSTOP and SIGCONT
  // would: what reaches it meanwhile waits, and on waking it carries out what it was doing (the
  // case elastic's Promela model found gaps in). The run then goes on at least 2 x the leaders'
  // hang detection past the wake, and the paused member must either have left (declared dead:
  // it read so and left) or be a survivor like any other.
  Duration pause_leader_after{-1};
  Duration pause_for = std::chrono::seconds(3);
  std::uint64_t seed = 1;
  std::chrono::milliseconds limit{120000};  // virtual time after the fault before giving up
};

struct SimResult {
  // Three consecutive phases, each from the end of the one before:
  double abort_all_s = -1;  // the fault -> the last survivor's watch fired
  double agree_s = -1;      // that -> the last survivor agreed (hierarchy: got its full list)
  double form_s = -1;       // that -> the last survivor formed its groups and marked it done
  double steady_store_ops_per_s = 0;
  std::map<std::string, std::int64_t> steady_ops_by_kind;  // in the 2 s before the fault
  std::int64_t peak_store_queue = 0;
  // With the hierarchy, the figures above are the global store's; these are the busiest domain
  // store's.
  double domain_steady_store_ops_per_s = 0;
  std::int64_t peak_domain_store_queue = 0;
  std::int64_t recovery_store_ops = 0;  // from the fault to the last member formed
  int agreed_epoch = -1;
  int base_epoch = -1;  // with the hierarchy: the base epoch of the last full list
  int victim = -1;
  int second_victim = -1;
  int paused_leader = -1;           // pause_leader_after's member
  bool paused_leader_left = false;  // it was declared dead and left
  // What the paused leader was doing when it stopped: "steady", "forming", or one or more of
  // "domain agreement", "leaders' round", "awaiting the full list", joined by ", ".
  std::string paused_in;
  std::string second_killed_in;    // the same, of the second victim when it was killed
  double second_killed_at_s = -1;  // when, from the fault (-1: no second kill)
  // With the hierarchy: the first member's abort, from the fault (-1: none, or the flat protocol).
  double detected_at_s = -1;
  // The flat protocol's agreement in three parts that add up to agree_s (control_plane_bench
  // measures the same): from the last abort to the last member entering the epoch (about to
  // announce itself), to the decider's list (before it publishes it), to the last member holding
  // it. -1 with the hierarchy, or when they do not follow in that order (an epoch given up).
  double agree_announce_s = -1, agree_decide_s = -1, agree_take_s = -1;
  // The flat protocol's formation in three parts that add up to form_s (control_plane_bench
  // measures the same): from the last member holding the list to the last one with every link
  // up (its addresses exchanged and its links set up), to the last one past its four groups'
  // barriers, to the last one done. -1 with the hierarchy, or without formation.
  double form_link_s = -1, form_barrier_s = -1, form_done_s = -1;
  // The hierarchy's agreement in three parts that add up to agree_s (hierarchy_bench measures
  // the same): from the last abort to the last survivor's domain list agreed (its domain watch
  // armed on it), to the last relay of a full list by a leader, to the last survivor holding its
  // full list. -1 without the hierarchy, or when they do not follow in that order.
  double agree_domain_s = -1, agree_round_s = -1, agree_relay_take_s = -1;
  // With the hierarchy, witnesses that a run met two rare interleavings (a test of one asserts
  // its run did): members of a domain no fault struck (so its list did not change) whose domain
  // re-formed while they awaited a full list already relayed to them: only the domain epoch
  // tells them not to take it; takeovers whose slot died before relaying a full list.
  std::int64_t awaits_dropped_after_relay = 0;
  std::int64_t takeovers_cut_by_death = 0;
  std::int64_t events = 0;  // the simulation's own work
  std::string invariants;   // "ok", or the first violation
};

SimResult simulate(const SimConfig& config);
// simulate() with config.hierarchy (elastic/sim/hierarchy_sim.cpp).
SimResult simulate_hierarchy(const SimConfig& config);

}  // namespace ntp::elastic::sim
