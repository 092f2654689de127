// The control plane at scale (issue 20, item 6): N lightweight members (threads of one process,
// each with its own store connection) run the real heartbeat, failure watch, agreement and group
// formation (bench_member.h) against a real redis-server that the bench starts and stops on a
// loopback port. One member dies as a SIGKILLed worker does (its heartbeat and watch stop, the
// launcher posts its exit notice); the bench times fault -> every survivor aborted, -> agreed
// on the new list, -> new groups formed, and reads the store load from the server's own
// INFO commandstats: in steady state (ops/s) and from the fault to the last member formed.
//
// One JSON line per N on stdout; progress on stderr. Each N runs in a child process of its own
// (a fresh redis-server, fresh descriptors and threads; a run past --max-s is killed and
// reported). Group formation connects every member's links (comm/pair_mesh.h: its TP peers, its
// ring and tree links in the world and in its DP group), both ends of each in this process:
// above the process's descriptor limit it is skipped and said so ("form_skipped").
//
//   build/bench/elastic/control_plane_bench --members 256,512,1024 [--port P]
//       [--redis-server PATH] [--steady-s S] [--tp T] [--max-s S]
//       [--formation one-batch|per-group|both] [--agreement-reader prepared|lazy]
//
// --formation: the groups' links exchanged in the world's one batch (the default, what
// build_job does: GlooOptions::planned_subgroups) or a batch per group (the code before); both
// runs each N both ways, one after the other ("formation" in each line).
// --agreement-reader: each member's agreement connects its stream reader before the fault
// (prepared, the default: what the trainer does, elastic::Agreement::prepare) or at its first
// read in the agreement (lazy: the code before), "agreement_reader" in each line.
#include <pthread.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "bench_flags.h"
#include "bench_member.h"
#include "bench_timing.h"
#include "child_run.h"
#include "comm/exit_notice.h"
#include "comm/gloo_communicator.h"
#include "machine_info.h"
#include "redis_process.h"

namespace {

using ntp::bench::BenchMember;
using ntp::bench::now_ns;
using ntp::bench::ServerCounts;
using ntp::bench::span_s;

struct Options {
  std::vector<int> members;
  int port = 0;
  std::string redis_server = "redis-server";
  double steady_s = 3.0;
  int tp = 8;
  double max_s = 900.0;
  // How the new groups' links are exchanged: in the world's one batch (what build_job does),
  // a batch per group (before), or both, one after the other for each N.
  std::vector<bool> one_batch{true};
  // The agreement's stream reader connected before the fault (Agreement::prepare, what LiveRun
  // does), or at the first agreement (the code before).
  bool prepare_agreement = true;
};

constexpr const char* kProgram = "control_plane_bench";

[[noreturn]] void bad(const std::string& message) { ntp::bench::flag_error(kProgram, message); }

long number(const std::string& flag, const std::string& text, long low, long high) {
  return ntp::bench::whole_number(kProgram, flag, text, low, high);
}

double seconds(const std::string& flag, const std::string& text, double low, double high) {
  return ntp::bench::seconds_number(kProgram, flag, text, low, high);
}

Options parse(int argc, char** argv) {
  Options o;
  ntp::bench::NumberListFlag members(o.members);
  ntp::bench::for_each_flag(
      kProgram, argc, argv, [&](const std::string& flag, const std::string& value) {
        if (flag == "--members") {
          members.take(kProgram, flag, value, 4, 16384);
        } else if (flag == "--port") {
          o.port = static_cast<int>(number(flag, value, 1, 65535));
        } else if (flag == "--redis-server") {
          if (value.empty()) bad("--redis-server '': give the path of a redis-server binary");
          o.redis_server = value;
        } else if (flag == "--steady-s") {
          o.steady_s = seconds(flag, value, 0.5, 600);
        } else if (flag == "--tp") {
          o.tp = static_cast<int>(number(flag, value, 1, 64));
        } else if (flag == "--max-s") {
          o.max_s = seconds(flag, value, 10, 7200);
        } else if (flag == "--formation") {
          if (value == "one-batch") {
            o.one_batch = {true};
          } else if (value == "per-group") {
            o.one_batch = {false};
          } else if (value == "both") {
            o.one_batch = {false, true};
          } else {
            bad("--formation '" + value + "': give one-batch, per-group or both");
          }
        } else if (flag == "--agreement-reader") {
          if (value != "prepared" && value != "lazy") {
            bad("--agreement-reader '" + value + "': give prepared or lazy");
          }
          o.prepare_agreement = value == "prepared";
        } else {
          bad("unknown flag '" + flag +
              "': use --members N[,N...], --port, --redis-server, --steady-s, --tp, --max-s, "
              "--formation, --agreement-reader");
        }
      });
  if (o.members.empty()) bad("no --members given: e.g. --members 256,512,1024");
  return o;
}

// Descriptors the new groups take in one process: a socket per link end, the links counted
// exactly as the groups connect them (comm/pair_mesh.h: every pair of a group up to 32 members,
// GlooOptions::full_mesh_max_size; the ring and tree links of a larger one, comm/gloo_tree.h;
// a pair shared by groups once), plus per member its device's epoll and wake pipe and its two
// store connections.
long formation_descriptors(int n, int tp) {
  const int dense_max = ntp::comm::GlooOptions{}.full_mesh_max_size;
  long sockets = 0;
  for (int id = 0; id < n; ++id) {
    std::vector<int> peers = ntp::comm::formation_links({}, id, n, dense_max);  // the world's
    const int replica = id / tp, position = id % tp;
    std::vector<int> replica_ids, dp_ids;
    for (int q = replica * tp; q < std::min(n, (replica + 1) * tp); ++q) replica_ids.push_back(q);
    for (int q = position; q < n; q += tp) dp_ids.push_back(q);
    const std::pair<const std::vector<int>*, int> groups[] = {{&replica_ids, position},
                                                              {&dp_ids, replica}};
    for (const auto& [ids, index] : groups) {
      const std::vector<int> more =
          ntp::comm::formation_links(*ids, index, static_cast<int>(ids->size()), dense_max);
      peers.insert(peers.end(), more.begin(), more.end());
    }
    std::sort(peers.begin(), peers.end());
    sockets += std::unique(peers.begin(), peers.end()) - peers.begin();
  }
  return sockets + 5L * n;
}

long descriptor_limit() {
  rlimit limit{};
  getrlimit(RLIMIT_NOFILE, &limit);
  return static_cast<long>(limit.rlim_cur);
}

// The latest moment every survivor reached, or 0 when one of them has not (yet) or failed.
std::int64_t all_reached(const std::vector<std::unique_ptr<BenchMember>>& members, int victim,
                         std::atomic<std::int64_t> ntp::bench::MemberMoments::*moment) {
  std::int64_t last = 0;
  for (size_t i = 0; i < members.size(); ++i) {
    if (static_cast<int>(i) == victim) continue;
    const std::int64_t t = (members[i]->moments().*moment).load();
    if (t == 0) return 0;
    last = std::max(last, t);
  }
  return last;
}

// The agreement's parts, as control_plane_sim prints them (SimResult::agree_announce_s): from the
// last abort to the last announcement, to the decider's list, to the last member holding it;
// null when they do not follow in that order (an epoch given up and agreed again).
nlohmann::ordered_json agree_parts(const std::vector<std::unique_ptr<BenchMember>>& members,
                                   int victim, std::int64_t aborted, std::int64_t agreed) {
  const std::int64_t announced =
      all_reached(members, victim, &ntp::bench::MemberMoments::announced);
  std::int64_t decided = 0;
  for (size_t i = 0; i < members.size(); ++i) {
    if (static_cast<int>(i) != victim) {
      decided = std::max(decided, members[i]->moments().decided.load());
    }
  }
  if (!(aborted <= announced && announced <= decided && decided <= agreed)) return nullptr;
  nlohmann::ordered_json parts;
  parts["announce_s"] = span_s(aborted, announced);
  parts["decide_s"] = span_s(announced, decided);
  parts["take_s"] = span_s(decided, agreed);
  return parts;
}

// The formation's parts, as control_plane_sim prints them (SimResult::form_link_s): from the last
// member holding the list to the last with every link up, to the last past its groups' barriers,
// to the last done.
nlohmann::ordered_json form_parts(const std::vector<std::unique_ptr<BenchMember>>& members,
                                  int victim, std::int64_t agreed, std::int64_t formed) {
  const std::int64_t linked = all_reached(members, victim, &ntp::bench::MemberMoments::linked);
  const std::int64_t passed = all_reached(members, victim, &ntp::bench::MemberMoments::passed);
  if (!(agreed <= linked && linked <= passed && passed <= formed)) return nullptr;
  nlohmann::ordered_json parts;
  parts["link_s"] = span_s(agreed, linked);
  parts["barrier_s"] = span_s(linked, passed);
  parts["done_s"] = span_s(passed, formed);
  return parts;
}

bool any_failed(const std::vector<std::unique_ptr<BenchMember>>& members, int victim,
                std::string* first) {
  for (size_t i = 0; i < members.size(); ++i) {
    if (static_cast<int>(i) == victim) continue;
    const std::string e = members[i]->error();
    if (!e.empty()) {
      *first = "member " + std::to_string(i) + ": " + e;
      return true;
    }
  }
  return false;
}

ServerCounts counts_or_die(const ntp::bench::RedisProcess& server) {
  ntp::Result<ServerCounts> c = server.counts();
  if (!c.ok()) {
    std::fprintf(stderr, "control_plane_bench: %s\n", c.status().to_string().c_str());
    std::fflush(stderr);
    _exit(1);
  }
  return *c;
}

// One N, in a child process: prints its JSON line, then leaves without tearing down (a member
// still blocked in an agreement that cannot end must not hold the next N back).
[[noreturn]] void measure(const Options& o, int n, bool one_batch,
                          const ntp::bench::RedisProcess& server) {
  // Ends in time to print what it has before the parent kills it at --max-s.
  // (the phases get 0.7 of it; what a short run prints takes store reads of its own).
  const std::int64_t start = now_ns();
  const std::int64_t deadline = start + static_cast<std::int64_t>(o.max_s * 0.7e9);
  const std::int64_t report_deadline = start + static_cast<std::int64_t>(o.max_s * 0.85e9);
  // 12,000+ threads at N = 4096: small stacks (the control plane's frames are shallow).
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 512 * 1024);
  pthread_setattr_default_np(&attr);

  nlohmann::ordered_json line;
  line["members"] = n;
  for (const char* key :
       {"abort_all_s", "agree_s", "form_s", "steady_store_ops_per_s", "recovery_store_ops"}) {
    line[key] = nullptr;  // the fields first, in its order
  }
  const long need = formation_descriptors(n, o.tp), have = descriptor_limit();
  line["formation"] = one_batch ? "one-batch" : "per-group";
  line["agreement_reader"] = o.prepare_agreement ? "prepared" : "lazy";
  ntp::bench::MemberSetup setup{
      n, o.tp, need < have, one_batch, std::chrono::milliseconds(30000), o.prepare_agreement};
  const std::string run_id = "cpbench" + std::to_string(n);
  auto open = [&] {
    ntp::Result<std::shared_ptr<ntp::comm::Store>> s = ntp::comm::open_store(server.spec(), run_id);
    if (!s.ok()) {
      std::fprintf(stderr, "control_plane_bench: %s\n", s.status().to_string().c_str());
      _exit(1);
    }
    return *s;
  };
  std::shared_ptr<ntp::comm::Store> launcher = open();  // the launcher's connection
  std::vector<std::unique_ptr<BenchMember>> members;
  // Every connection first, while the server is idle (beating members would slow the rest).
  std::vector<std::shared_ptr<ntp::comm::Store>> stores;
  for (int id = 0; id < n; ++id) stores.push_back(open());
  for (int id = 0; id < n; ++id) {
    members.push_back(std::make_unique<BenchMember>(stores[static_cast<size_t>(id)], id, setup));
    if ((id + 1) % 512 == 0) std::fprintf(stderr, "N=%d: %d members beating\n", n, id + 1);
  }
  for (const auto& m : members) m->start();
  std::fprintf(stderr, "N=%d: %d members running; steady state for %.1f s\n", n, n, o.steady_s);

  std::this_thread::sleep_for(std::chrono::seconds(1));  // every watch past its first look
  const ServerCounts c0 = counts_or_die(server);
  const std::int64_t t0 = now_ns();
  std::this_thread::sleep_for(std::chrono::duration<double>(o.steady_s));
  const ServerCounts c1 = counts_or_die(server);
  const std::int64_t t1 = now_ns();
  const double steady = span_s(t0, t1);
  const double ops_per_s = static_cast<double>(c1.commands - c0.commands) / steady;
  line["steady_store_ops_per_s"] = std::round(ops_per_s);
  line["steady_store_ops_per_s_per_member"] = std::round(10 * ops_per_s / n) / 10;
  line["steady_store_bytes_per_s"] = std::round(
      static_cast<double>(c1.bytes_in + c1.bytes_out - c0.bytes_in - c0.bytes_out) / steady);
  int false_aborts = 0;
  std::string false_reason;
  for (const auto& m : members) {
    if (!m->fired_before_fault()) continue;
    if (false_aborts++ == 0) false_reason = m->abort_reason();
  }
  line["false_aborts"] = false_aborts;
  if (false_aborts > 0) {  // the job re-formed without a fault: nothing below would mean anything
    line["failed"] = "a watch aborted before the fault: " + false_reason;
    std::printf("%s\n", line.dump().c_str());
    std::fflush(stdout);
    _exit(1);
  }

  // The fault: a member in the middle of the ring (a random victim's expected place in the watch's
  // scan of exit notices) dies, then its launcher posts the exit notice.
  const int victim = n / 2;
  members[static_cast<size_t>(victim)]->die();
  for (const auto& m : members) m->fault_posted();
  const ServerCounts cf = counts_or_die(server);
  const std::int64_t tf = now_ns();
  (void)ntp::comm::post_exit_notice(*launcher, victim, ntp::comm::incarnation(0, 0));
  std::fprintf(stderr, "N=%d: member %d died, exit notice posted\n", n, victim);

  // Waits for every survivor to reach `moment`; 0 when one failed or the run ran out of time.
  std::string failure;
  auto wait_all = [&](std::atomic<std::int64_t> ntp::bench::MemberMoments::*moment) {
    for (;;) {
      if (const std::int64_t t = all_reached(members, victim, moment); t != 0) return t;
      if (any_failed(members, victim, &failure) || now_ns() > deadline) return std::int64_t{0};
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  };
  nlohmann::ordered_json phase_ops;
  auto phase = [&](const char* name, std::int64_t since, std::int64_t at, const ServerCounts& from,
                   ServerCounts* to) -> bool {
    if (at == 0) {
      line[name] = nullptr;
      return false;
    }
    *to = counts_or_die(server);
    line[name] = span_s(since, at);
    phase_ops[name] = to->commands - from.commands;
    std::fprintf(stderr, "N=%d: %s %.3f s\n", n, name, span_s(since, at));
    return true;
  };
  ServerCounts ca, cg, cm;
  const std::int64_t ta = wait_all(&ntp::bench::MemberMoments::aborted);
  bool ok = phase("abort_all_s", tf, ta, cf, &ca);
  const std::int64_t tg = ok ? wait_all(&ntp::bench::MemberMoments::agreed) : 0;
  ok = phase("agree_s", ta, tg, ca, &cg) && ok;
  if (tg != 0) {  // the epoch agreed on (1 unless waiters gave epochs up) and its size
    int lowest = 1 << 30, highest = 0, smallest = 1 << 30, largest = 0;
    for (size_t i = 0; i < members.size(); ++i) {
      if (static_cast<int>(i) == victim) continue;
      const ntp::bench::MemberMoments& m = members[i]->moments();
      lowest = std::min(lowest, m.epoch.load());
      highest = std::max(highest, m.epoch.load());
      smallest = std::min(smallest, m.size.load());
      largest = std::max(largest, m.size.load());
    }
    line["agreed_epoch"] = lowest == highest ? nlohmann::ordered_json(lowest) : nullptr;
    line["agreed_members"] = smallest == largest ? nlohmann::ordered_json(largest) : nullptr;
    line["agree_parts"] = agree_parts(members, victim, ta, tg);
  }
  ServerCounts end = cg;
  if (!setup.form) {
    line["form_s"] = nullptr;
    line["form_skipped"] = "the links of " + std::to_string(n - 1) + " members in one process " +
                           "need up to " + std::to_string(need) + " descriptors; the limit is " +
                           std::to_string(have);
  } else {
    const std::int64_t tm = ok ? wait_all(&ntp::bench::MemberMoments::formed) : 0;
    ok = phase("form_s", tg, tm, cg, &cm) && ok;
    end = cm;
    if (ok) {
      line["fault_to_formed_s"] = span_s(tf, tm);
      line["form_parts"] = form_parts(members, victim, tg, tm);
    }
  }
  if (!ok) {
    line["failed"] = failure.empty() ? "ran past --max-s" : failure;
    // Who a watch or a waiter recorded as hung (elastic/agreement.h: <group>/silent/<id>).
    std::vector<int> silent;
    for (int id = 0; id < n && now_ns() < report_deadline; ++id) {
      ntp::Result<bool> there = launcher->exists(ntp::elastic::silent_key("train/a0", id));
      if (there.ok() && *there) {
        silent.push_back(id);
        // The heartbeat value the watcher found still, and the one there now: a beat that moved
        // since was late, not stopped.
        ntp::Result<std::string> seen = launcher->get(ntp::elastic::silent_key("train/a0", id));
        ntp::Result<std::string> now = launcher->get(ntp::comm::Heartbeat::key("train/a0", id));
        std::fprintf(stderr, "N=%d: member %d recorded silent at '%s', heartbeat now '%s'\n", n, id,
                     seen.ok() ? seen->c_str() : "?", now.ok() ? now->c_str() : "?");
      }
    }
    line["declared_silent"] = silent;
    // How far the survivors got when the run ended.
    int aborted = 0, agreed = 0;
    for (size_t i = 0; i < members.size(); ++i) {
      if (static_cast<int>(i) == victim) continue;
      aborted += members[i]->moments().aborted.load() != 0 ? 1 : 0;
      agreed += members[i]->moments().agreed.load() != 0 ? 1 : 0;
    }
    line["survivors_aborted"] = aborted;
    line["survivors_agreed"] = agreed;
    line["fault_to_end_s"] = span_s(tf, now_ns());
    for (size_t i = 0; i < members.size(); ++i) {
      if (const std::string e = members[i]->error(); !e.empty()) {
        std::fprintf(stderr, "N=%d: member %zu: %s\n", n, i, e.c_str());
      }
    }
  }
  line["recovery_store_ops"] = ok ? nlohmann::ordered_json(end.commands - cf.commands) : nullptr;
  line["recovery_store_bytes"] =
      ok ? nlohmann::ordered_json(end.bytes_in + end.bytes_out - cf.bytes_in - cf.bytes_out)
         : nullptr;
  line["phase_store_ops"] = phase_ops;
  line["victim"] = victim;
  std::printf("%s\n", line.dump().c_str());
  std::fflush(stdout);
  std::fflush(stderr);
  _exit(ok ? 0 : 1);
}

// Runs one N in a child; its line, or one saying why there is none.
bool run_one(const Options& o, int n, bool one_batch) {
  ntp::Result<std::unique_ptr<ntp::bench::RedisProcess>> server =
      ntp::bench::RedisProcess::start(o.redis_server, o.port);
  if (!server.ok()) {
    std::fprintf(stderr, "control_plane_bench: %s\n", server.status().to_string().c_str());
    return false;
  }
  const ntp::bench::ChildEnd end =
      ntp::bench::run_child(o.max_s, [&] { measure(o, n, one_batch, **server); });
  if (end == ntp::bench::ChildEnd::kKilled) {
    std::printf(
        "{\"members\":%d,\"formation\":\"%s\",\"failed\":\"killed after --max-s %.0f s\"}\n", n,
        one_batch ? "one-batch" : "per-group", o.max_s);
    std::fflush(stdout);
  }
  return end == ntp::bench::ChildEnd::kOk;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  rlimit limit{};  // as many descriptors as allowed: the full meshes need them
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    setrlimit(RLIMIT_NOFILE, &limit);
  }
  const std::string command = ntp::bench::command_line(kProgram, argc, argv);
  std::fprintf(stderr, "# %s\n# machine: %s\n# descriptors: %ld; tp %d; steady %.1f s\n",
               command.c_str(), ntp::bench::machine_description().c_str(), descriptor_limit(), o.tp,
               o.steady_s);
  bool all_ok = true;
  for (int n : o.members) {
    for (bool one_batch : o.one_batch) all_ok = run_one(o, n, one_batch) && all_ok;
  }
  return all_ok ? 0 : 1;
}
