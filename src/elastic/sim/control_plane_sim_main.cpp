// control_plane_sim: the control plane of a job of N GPUs through one fault, simulated in virtual
// time with the protocol's own machines (elastic/sim/control_plane_sim.h). One JSON line per N
// and seed on stdout; progress on stderr.
//
//   build/bin/control_plane_sim --gpus 64,256,1024 [--store-ops 100000] [--rtt-us 100]
//       [--fault kill|hang|leader-kill|leader-hang] [--seeds K] [--seed S] [--tp 8] [--no-form]
//       [--hierarchy [--global-hang-factor 3] [--second-kill-ms MS [--second-in-same-domain]
//       [--second-kill-from-detection]] [--pause-leader-ms MS [--pause-for-ms 3000]]]
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/named_values.h"
#include "core/rng.h"
#include "elastic/sim/control_plane_sim.h"

namespace {

using ntp::elastic::sim::Duration;
using ntp::elastic::sim::Fault;
using ntp::elastic::sim::SimConfig;
using ntp::elastic::sim::SimResult;

nlohmann::ordered_json seconds_or_null(double s) {
  return s < 0 ? nlohmann::ordered_json(nullptr)
               : nlohmann::ordered_json(std::round(s * 1e4) / 1e4);
}

// --fault mixed: one schedule per seed, drawn from the seed alone: a member or a leader killed or
// hung, and half the time a second member killed 0-20 ms after the fault's detection (during the
// agreement or the formation at the sizes simulated, for a hang as for a kill: counted from the
// fault, a hang's second kill would land before its detection, 1 s on), in the same domain half
// of those times.
void draw_schedule(SimConfig& c) {
  ntp::Rng rng(c.seed ^ 0x9e3779b97f4a7c15ULL);
  constexpr Fault kFaults[] = {Fault::kKill, Fault::kHang, Fault::kLeaderKill, Fault::kLeaderHang};
  c.fault = kFaults[static_cast<size_t>(rng.uniform() * 4) % 4];
  c.second_kill_after = Duration(-1);
  if (rng.uniform() < 0.5) {
    c.second_kill_after = std::chrono::nanoseconds(static_cast<long long>(rng.uniform() * 20e6));
    c.second_in_same_domain = rng.uniform() < 0.5;
    c.second_kill_from_detection = true;
  }
}

const char* fault_name(Fault f) {
  static constexpr ntp::NamedValue<Fault> kNames[] = {{Fault::kKill, "kill"},
                                                      {Fault::kHang, "hang"},
                                                      {Fault::kLeaderKill, "leader-kill"},
                                                      {Fault::kLeaderHang, "leader-hang"},
                                                      {Fault::kDomainLoss, "domain-loss"}};
  return ntp::name_of(kNames, f);
}

// The runs of one GPU count: how many kept the invariants, and each phase's median and worst.
struct Summary {
  int runs = 0, ok = 0;
  std::vector<double> abort_all, agree, form;
  std::map<std::string, int> second_killed_in;  // runs with a second kill, by where it struck
  void add(const SimResult& r) {
    ++runs;
    if (r.second_victim >= 0) ++second_killed_in[r.second_killed_in];
    if (r.invariants != "ok") return;
    ++ok;
    abort_all.push_back(r.abort_all_s);
    agree.push_back(r.agree_s);
    form.push_back(r.form_s);
  }
  nlohmann::ordered_json json(int gpus) {
    nlohmann::ordered_json line;
    line["summary"] = true;
    line["gpus"] = gpus;
    line["runs"] = runs;
    line["invariants_ok"] = ok;
    for (auto [name, values] : {std::pair{"abort_all_s", &abort_all}, std::pair{"agree_s", &agree},
                                std::pair{"form_s", &form}}) {
      std::sort(values->begin(), values->end());
      if (values->empty()) continue;
      line[std::string(name) + "_p50"] = seconds_or_null((*values)[values->size() / 2]);
      line[std::string(name) + "_max"] = seconds_or_null(values->back());
    }
    if (!second_killed_in.empty()) line["second_killed_in"] = second_killed_in;
    return line;
  }
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "Simulates a job's control plane through one fault, in virtual time: every member runs the\n"
      "recovery protocol's own machines (failure watch, agreement) against a modeled store\n"
      "(one server: service rate, round trip, FIFO queue) and modeled links. Prints one JSON line\n"
      "per GPU count and seed; exits 1 when a run breaks an invariant or does not recover."};
  std::vector<int> gpus{64, 256, 1024};
  SimConfig c;
  double store_ops = c.store.ops_per_s, rtt_us = 100, link_rtt_us = 50, connect_us = 50;
  double dial_rtt_us = 50;
  double cpu_per_op_us = 0, wake_cpu_us = 0;
  double steady_s = 3, limit_s = 120;
  int hang_detect_ms = 1000, seeds = 1;
  std::string fault = "kill";
  bool no_form = false;
  app.add_option("--gpus", gpus, "GPU (member) counts to simulate, e.g. 64,256,1024")
      ->delimiter(',')
      ->check(CLI::Range(2, 1 << 20));
  app.add_option("--tp", c.tp, "members per replica (the TP and DP groups formed)")
      ->check(CLI::Range(1, 1024));
  app.add_option("--store-ops", store_ops, "the store's service rate, single-key ops per second")
      ->check(CLI::Range(100.0, 1e9));
  app.add_option("--rtt-us", rtt_us, "the store's unloaded round trip, microseconds")
      ->check(CLI::Range(0.0, 1e6));
  app.add_option("--per-extra-key", c.store.per_extra_key,
                 "cost of each key of a multi-key op past the first, in single-key ops")
      ->check(CLI::Range(0.0, 10.0));
  bool woken_reads_free = false;
  app.add_flag("--woken-reads-free", woken_reads_free,
               "answer a blocked read woken by an append at once, at no cost to the store (the "
               "model before 2026-12-05; redis runs each woken XREAD again, one service time "
               "each, which is the default)");
  app.add_option("--link-rtt-us", link_rtt_us,
                 "a message's round trip over a link between two members: a barrier's round, "
                 "microseconds")
      ->check(CLI::Range(0.0, 1e6));
  app.add_option("--connect-us", connect_us,
                 "a member's CPU to set one link up (each end of it), microseconds")
      ->check(CLI::Range(0.0, 1e6));
  app.add_option("--dial-rtt-us", dial_rtt_us,
                 "a dial's round trip, from the connect to the link up at both ends (a "
                 "member's formation dials its links one after another), microseconds")
      ->check(CLI::Range(0.0, 1e6));
  app.add_option("--cpu-per-op-us", cpu_per_op_us,
                 "a member's CPU per store op sent and per reply taken in, microseconds")
      ->check(CLI::Range(0.0, 1e6));
  app.add_option("--wake-cpu-us", wake_cpu_us,
                 "a member's CPU, past --cpu-per-op-us, for the reply to a blocking stream read "
                 "that carries events (its thread woken, the events parsed and acted on), "
                 "microseconds")
      ->check(CLI::Range(0.0, 1e6));
  app.add_option("--host-cores", c.host_cores,
                 "cores shared by every member (0: a CPU each, as on a cluster)")
      ->check(CLI::Range(0, 1 << 16));
  app.add_option("--hang-detect-ms", hang_detect_ms, "as ntp train's --hang-detect-ms")
      ->check(CLI::Range(50, 600000));
  app.add_option("--steady-s", steady_s, "failure-free seconds before the fault")
      ->check(CLI::Range(2.5, 3600.0));
  app.add_option("--limit-s", limit_s, "virtual seconds after the fault before a run fails")
      ->check(CLI::Range(1.0, 36000.0));
  app.add_option(
         "--fault", fault,
         "kill (the launcher posts an exit notice) or hang (SIGSTOP) of a member; with "
         "--hierarchy also leader-kill or leader-hang (a domain's leader), domain-loss (every "
         "GPU of a domain and its launcher at once, as a rack's power: no exit notice), or "
         "mixed (per seed one of kill, hang, leader-kill and leader-hang, and half the time a "
         "second kill 0-20 ms after the fault's detection)")
      ->check(
          CLI::IsMember({"kill", "hang", "leader-kill", "leader-hang", "domain-loss", "mixed"}));
  app.add_flag("--hierarchy", c.hierarchy,
               "the domain hierarchy: a store per domain of --tp GPUs, only the domains' "
               "leaders on the global store (the JSON's store figures are then the global "
               "store's, domain_* the busiest domain store's)");
  double second_kill_ms = -1;
  app.add_option("--second-kill-ms", second_kill_ms,
                 "with --hierarchy: kill a second member this many ms after the first fault, "
                 "in the next domain (or the same, with --second-in-same-domain)")
      ->check(CLI::Range(0.0, 1e7));
  app.add_flag("--second-in-same-domain", c.second_in_same_domain,
               "the second kill strikes the first fault's domain");
  app.add_flag("--second-kill-from-detection", c.second_kill_from_detection,
               "--second-kill-ms counts from the fault's detection (the first member's abort) "
               "instead of from the fault");
  double pause_leader_ms = -1, pause_for_ms = 3000;
  app.add_option("--pause-leader-ms", pause_leader_ms,
                 "with --hierarchy: pause (SIGSTOP) the leader of the domain after the first "
                 "fault's this many ms after it; it wakes --pause-for-ms later and carries out "
                 "what it was doing");
  app.add_option("--pause-for-ms", pause_for_ms, "how long the paused leader stays stopped")
      ->check(CLI::PositiveNumber);
  app.add_option("--global-hang-factor", c.global_hang_factor,
                 "the leaders' watch gives a domain this many times --hang-detect-ms")
      ->check(CLI::Range(2, 100));
  app.add_option("--seed", c.seed, "the first seed");
  app.add_option("--seeds", seeds, "seeds per GPU count (S, S+1, ...)")
      ->check(CLI::Range(1, 100000));
  app.add_flag("--no-form", no_form, "stop at the agreement (no group formation)");
  app.add_option("--slow-store", c.slow_store_factor,
                 "from the fault on, the store (with --hierarchy: the global store) serves this "
                 "many times fewer ops a second")
      ->check(CLI::Range(1.0, 1e6));
  bool summary_only = false;
  app.add_flag("--summary-only", summary_only,
               "print only one summary line per GPU count (runs, invariants kept, each phase's "
               "median and worst), not a line per run");
  CLI11_PARSE(app, argc, argv);

  c.store.ops_per_s = store_ops;
  c.store.round_trip = std::chrono::nanoseconds(static_cast<long long>(rtt_us * 1e3));
  c.store.woken_reads_cost_service = !woken_reads_free;
  c.link_round_trip = std::chrono::nanoseconds(static_cast<long long>(link_rtt_us * 1e3));
  c.connect_per_link = std::chrono::nanoseconds(static_cast<long long>(connect_us * 1e3));
  c.dial_round_trip = std::chrono::nanoseconds(static_cast<long long>(dial_rtt_us * 1e3));
  c.cpu_per_op = std::chrono::nanoseconds(static_cast<long long>(cpu_per_op_us * 1e3));
  c.wake_cpu = std::chrono::nanoseconds(static_cast<long long>(wake_cpu_us * 1e3));
  c.hang_detect = std::chrono::milliseconds(hang_detect_ms);
  c.steady = std::chrono::milliseconds(static_cast<long long>(steady_s * 1e3));
  c.limit = std::chrono::milliseconds(static_cast<long long>(limit_s * 1e3));
  c.fault = fault == "hang"          ? Fault::kHang
            : fault == "leader-kill" ? Fault::kLeaderKill
            : fault == "leader-hang" ? Fault::kLeaderHang
            : fault == "domain-loss" ? Fault::kDomainLoss
                                     : Fault::kKill;
  if (second_kill_ms >= 0) {
    c.second_kill_after = std::chrono::nanoseconds(static_cast<long long>(second_kill_ms * 1e6));
  }
  if (pause_leader_ms >= 0) {
    c.pause_leader_after = std::chrono::nanoseconds(static_cast<long long>(pause_leader_ms * 1e6));
    c.pause_for = std::chrono::nanoseconds(static_cast<long long>(pause_for_ms * 1e6));
  }
  if (!c.hierarchy && (fault.starts_with("leader") || fault == "mixed" || fault == "domain-loss" ||
                       second_kill_ms >= 0 || pause_leader_ms >= 0)) {
    std::fprintf(stderr,
                 "control_plane_sim: --fault %s, --second-kill-ms and --pause-leader-ms need "
                 "--hierarchy\n",
                 fault.c_str());
    return 2;
  }
  if (fault == "domain-loss" && c.second_in_same_domain) {
    std::fprintf(stderr,
                 "control_plane_sim: --second-in-same-domain strikes the lost domain, which has "
                 "no one left to kill; leave it out with --fault domain-loss\n");
    return 2;
  }
  if (c.second_kill_from_detection && second_kill_ms < 0) {
    std::fprintf(stderr,
                 "control_plane_sim: --second-kill-from-detection says where --second-kill-ms "
                 "counts from; give --second-kill-ms too\n");
    return 2;
  }
  c.form = !no_form;
  const std::uint64_t first_seed = c.seed;
  int failures = 0;
  for (int n : gpus) {
    Summary summary;
    for (int k = 0; k < seeds; ++k) {
      c.gpus = n;
      if (c.hierarchy && (n % c.tp != 0 || n / c.tp < 2)) {
        std::fprintf(stderr,
                     "control_plane_sim: --gpus %d is not 2 or more whole domains of --tp %d\n", n,
                     c.tp);
        return 2;
      }
      c.seed = first_seed + static_cast<std::uint64_t>(k);
      if (fault == "mixed") draw_schedule(c);
      const auto wall_start = std::chrono::steady_clock::now();
      const SimResult r = ntp::elastic::sim::simulate(c);
      const double wall =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
      nlohmann::ordered_json line;
      line["gpus"] = n;
      line["domain"] = c.tp;
      line["hierarchy"] = c.hierarchy;
      line["seed"] = c.seed;
      line["fault"] = fault_name(c.fault);
      if (c.slow_store_factor != 1) line["slow_store"] = c.slow_store_factor;
      line["victim"] = r.victim;
      if (r.second_victim >= 0) {
        line["second_victim"] = r.second_victim;
        line["second_kill_ms"] =
            std::round(std::chrono::duration<double, std::milli>(c.second_kill_after).count() *
                       1e3) /
            1e3;
        line["second_kill_from"] = c.second_kill_from_detection ? "detection" : "fault";
        line["second_in_same_domain"] = c.second_in_same_domain;
        line["second_killed_in"] = r.second_killed_in;
        line["second_killed_at_s"] = seconds_or_null(r.second_killed_at_s);
      }
      if (r.paused_leader >= 0) {
        line["paused_leader"] = r.paused_leader;
        line["paused_leader_left"] = r.paused_leader_left;
        line["paused_in"] = r.paused_in;
      }
      if (c.hierarchy) line["detected_at_s"] = seconds_or_null(r.detected_at_s);
      line["abort_all_s"] = seconds_or_null(r.abort_all_s);
      line["agree_s"] = seconds_or_null(r.agree_s);
      line["form_s"] = seconds_or_null(r.form_s);
      if (r.agree_announce_s >= 0) {
        line["agree_parts"] = {{"announce_s", seconds_or_null(r.agree_announce_s)},
                               {"decide_s", seconds_or_null(r.agree_decide_s)},
                               {"take_s", seconds_or_null(r.agree_take_s)}};
      }
      if (r.agree_domain_s >= 0) {
        line["hierarchy_agree_parts"] = {{"domain_s", seconds_or_null(r.agree_domain_s)},
                                         {"round_s", seconds_or_null(r.agree_round_s)},
                                         {"take_s", seconds_or_null(r.agree_relay_take_s)}};
      }
      if (r.form_link_s >= 0) {
        line["form_parts"] = {{"link_s", seconds_or_null(r.form_link_s)},
                              {"barrier_s", seconds_or_null(r.form_barrier_s)},
                              {"done_s", seconds_or_null(r.form_done_s)}};
      }
      line["steady_store_ops_per_s"] = std::round(r.steady_store_ops_per_s);
      line["steady_store_ops_per_s_per_gpu"] = std::round(100 * r.steady_store_ops_per_s / n) / 100;
      line["steady_ops_by_kind"] = r.steady_ops_by_kind;
      line["peak_store_queue"] = r.peak_store_queue;
      line["recovery_store_ops"] = r.recovery_store_ops;
      if (c.hierarchy) {
        line["domain_steady_store_ops_per_s"] = std::round(r.domain_steady_store_ops_per_s);
        line["peak_domain_store_queue"] = r.peak_domain_store_queue;
      }
      line["agreed_epoch"] = r.agreed_epoch;
      if (c.hierarchy) line["base_epoch"] = r.base_epoch;
      line["invariants"] = r.invariants;
      line["events"] = r.events;
      line["wall_s"] = std::round(wall * 100) / 100;
      if (!summary_only || r.invariants != "ok") {
        std::printf("%s\n", line.dump().c_str());
        std::fflush(stdout);
      }
      if (r.invariants != "ok") ++failures;
      summary.add(r);
    }
    if (seeds > 1 || summary_only) std::printf("%s\n", summary.json(n).dump().c_str());
  }
  return failures == 0 ? 0 : 1;
}
