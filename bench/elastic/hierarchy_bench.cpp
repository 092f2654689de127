// The domain hierarchy's control plane with real members (issue 35, item 4, for the hierarchy):
// N members (threads of one process, each with its own connections) run the runtime's hierarchy
// member (elastic/hierarchy_runtime.h: its heartbeats, failure watches, domain agreement, leader
// rounds and relay) against real redis-servers that the bench starts on loopback ports: one per
// domain of --tp members and one for the leaders. One member dies as a SIGKILLed worker does (its
// connections are cut at once, then its domain's launcher posts its exit notice); a member in the
// middle domain, or with --fault leader-kill that domain's leader. The bench times fault -> every
// survivor's domain watch aborted, -> every survivor holding the new full list (-> with --form,
// every survivor's groups formed: the trainer's world, TP and DP groups with Gloo over its
// domain's store, the addresses of links to other domains carried by the leaders' relay,
// elastic/address_relay.h), and reads the stores' load from the servers' own INFO counters.
// bench/elastic/hierarchy_vs_sim.py compares its figures with control_plane_sim --hierarchy's.
//
// One JSON line per N on stdout, progress on stderr; each N runs in a child process of its own
// (fresh servers and threads; one past --max-s is killed and reported).
//
//   build/bench/elastic/hierarchy_bench --members 32,64,128 [--tp 8]
//       [--fault kill|leader-kill] [--form] [--steady-s S] [--max-s S] [--redis-server PATH]
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "bench_flags.h"
#include "bench_timing.h"
#include "child_run.h"
#include "comm/communicator.h"
#include "comm/exit_notice.h"
#include "comm/gloo_communicator.h"
#include "elastic/hierarchy_runtime.h"
#include "killable_store.h"
#include "machine_info.h"
#include "redis_process.h"

namespace {

using ntp::bench::now_ns;
using ntp::bench::RedisProcess;
using ntp::bench::ServerCounts;
using ntp::bench::span_s;
using ntp::elastic::HierarchyMoments;
using ntp::elastic::HierarchyRuntime;

constexpr const char* kProgram = "hierarchy_bench";
constexpr const char* kGlobalGroup = "train/a0/g";

struct Options {
  std::vector<int> members;
  int tp = 8;
  bool leader = false;  // --fault leader-kill
  bool form = false;    // --form: the new groups formed after the agreement
  double steady_s = 2.0;
  double max_s = 300.0;
  std::string redis_server = "redis-server";
};

[[noreturn]] void bad(const std::string& message) { ntp::bench::flag_error(kProgram, message); }

double seconds_flag(const std::string& flag, const std::string& text, double low, double high) {
  return ntp::bench::seconds_number(kProgram, flag, text, low, high);
}

Options parse(int argc, char** argv) {
  Options o;
  ntp::bench::NumberListFlag members(o.members);
  ntp::bench::for_each_flag(
      kProgram, argc, argv, [&](const std::string& flag, const std::string& value) {
        if (flag == "--members") {
          members.take(kProgram, flag, value, 4, 4096);
        } else if (flag == "--tp") {
          o.tp = static_cast<int>(ntp::bench::whole_number(kProgram, flag, value, 2, 72));
        } else if (flag == "--fault") {
          if (value != "kill" && value != "leader-kill") {
            bad("--fault '" + value + "': give kill or leader-kill");
          }
          o.leader = value == "leader-kill";
        } else if (flag == "--form") {
          if (value != "yes" && value != "no") bad("--form '" + value + "': give yes or no");
          o.form = value == "yes";
        } else if (flag == "--steady-s") {
          o.steady_s = seconds_flag(flag, value, 0.5, 600);
        } else if (flag == "--max-s") {
          o.max_s = seconds_flag(flag, value, 10, 7200);
        } else if (flag == "--redis-server") {
          if (value.empty()) bad("--redis-server '': give the path of a redis-server binary");
          o.redis_server = value;
        } else {
          bad("unknown flag '" + flag +
              "': use --members N[,N...], --tp, --fault, --form, --steady-s, --max-s, "
              "--redis-server");
        }
      });
  if (o.members.empty()) bad("no --members given: e.g. --members 32,64,128");
  for (int n : o.members) {
    if (n % o.tp != 0 || n / o.tp < 2) {
      bad("--members " + std::to_string(n) + ": give whole domains of --tp " +
          std::to_string(o.tp) + ", at least 2");
    }
  }
  return o;
}

[[noreturn]] void die(const std::string& why) {
  std::fprintf(stderr, "%s: %s\n", kProgram, why.c_str());
  std::fflush(stderr);
  _exit(1);
}

// The job's servers: the leaders' (index 0), then one per domain.
struct Servers {
  std::vector<std::unique_ptr<RedisProcess>> all;
  const RedisProcess& global() const { return *all.front(); }
  const RedisProcess& domain(int d) const { return *all[static_cast<size_t>(d) + 1]; }
  ServerCounts counts(size_t i) const {
    ntp::Result<ServerCounts> c = all[i]->counts();
    if (!c.ok()) die(c.status().to_string());
    return *c;
  }
};

std::string mesh_prefix(const ntp::elastic::MemberList& full) {
  return "train/a0/e" + std::to_string(full.epoch);
}

// The trainer's groups on `full` (train/job.cpp's shape, as control_plane_bench's members build
// them) over the member's domain store: the world, its TP and sync groups (its domain) and its DP
// group (its slot in every listed domain), in one batch, and a barrier over each, in that order
// (as sim/sim_formation.h models them).
ntp::Status form_groups(const std::shared_ptr<ntp::comm::Store>& store,
                        const ntp::elastic::MemberList& full, int gid, int tp,
                        std::vector<std::unique_ptr<ntp::comm::Communicator>>& groups) {
  groups.clear();
  std::vector<int> tp_ranks, dp_ranks;
  for (size_t r = 0; r < full.members.size(); ++r) {
    if (full.members[r] / tp == gid / tp) tp_ranks.push_back(static_cast<int>(r));
    if (full.members[r] % tp == gid % tp) dp_ranks.push_back(static_cast<int>(r));
  }
  ntp::comm::GlooOptions gloo;
  gloo.store = store;
  gloo.rank = static_cast<int>(std::lower_bound(full.members.begin(), full.members.end(), gid) -
                               full.members.begin());
  gloo.size = static_cast<int>(full.members.size());
  gloo.prefix = mesh_prefix(full);
  gloo.planned_subgroups = {tp_ranks, dp_ranks};
  NTP_ASSIGN_OR_RETURN(auto world, ntp::comm::connect_gloo(gloo));
  NTP_ASSIGN_OR_RETURN(auto tp_group, world->subgroup(tp_ranks, "tp"));
  NTP_ASSIGN_OR_RETURN(auto sync_group, world->subgroup(tp_ranks, "sync"));
  NTP_ASSIGN_OR_RETURN(auto dp_group, world->subgroup(dp_ranks, "dp"));
  for (ntp::comm::Communicator* group :
       {world.get(), tp_group.get(), sync_group.get(), dp_group.get()}) {
    NTP_RETURN_IF_ERROR(group->barrier());
  }
  groups.push_back(std::move(world));
  groups.push_back(std::move(tp_group));
  groups.push_back(std::move(sync_group));
  groups.push_back(std::move(dp_group));
  return ntp::Status();
}

// One member: its runtime over connections the bench can cut, and its groups.
struct Member {
  std::shared_ptr<ntp::bench::KillableStore> domain_store, global_store;
  std::shared_ptr<std::vector<std::unique_ptr<ntp::comm::Communicator>>> groups =
      std::make_shared<std::vector<std::unique_ptr<ntp::comm::Communicator>>>();
  std::unique_ptr<HierarchyRuntime> runtime;
};

std::shared_ptr<ntp::comm::Store> open(const RedisProcess& server) {
  ntp::Result<std::shared_ptr<ntp::comm::Store>> s = ntp::comm::open_store(server.spec(), "hbench");
  if (!s.ok()) die(s.status().to_string());
  return *s;
}

Member make_member(const Options& o, int n, int gid, const Servers& servers) {
  Member m;
  const int domain = gid / o.tp;
  m.domain_store = std::make_shared<ntp::bench::KillableStore>(open(servers.domain(domain)));
  m.global_store = std::make_shared<ntp::bench::KillableStore>(open(servers.global()));
  ntp::elastic::HierarchyRuntimeSetup setup;
  setup.member.global_group = kGlobalGroup;
  setup.member.domain_group = "train/a0/d" + std::to_string(domain);
  setup.member.domain = domain;
  setup.member.slot = gid % o.tp;
  setup.member.domain_size = o.tp;
  setup.member.domain_count = n / o.tp;
  setup.member.encode_layout = [] { return std::string("bench layout"); };
  setup.domain_store = m.domain_store;
  setup.global_store = m.global_store;
  if (o.form) {
    setup.form = [groups = m.groups, store = m.domain_store, gid,
                  tp = o.tp](const ntp::elastic::MemberList& full) {
      return form_groups(store, full, gid, tp, *groups);
    };
    setup.member.mesh_prefix = mesh_prefix;
    setup.member.shape = {o.tp, ntp::comm::GlooOptions{}.full_mesh_max_size};
  }
  m.runtime = std::make_unique<HierarchyRuntime>(std::move(setup));
  return m;
}

// The latest moment every survivor reached, or 0 while one has not.
std::int64_t all_reached(const std::vector<Member>& members, int victim,
                         std::atomic<std::int64_t> HierarchyMoments::*moment) {
  std::int64_t last = 0;
  for (size_t i = 0; i < members.size(); ++i) {
    if (static_cast<int>(i) == victim) continue;
    const std::int64_t t = (members[i].runtime->moments().*moment).load();
    if (t == 0) return 0;
    last = std::max(last, t);
  }
  return last;
}

// Every survivor at `moment`, or 0 when one failed (its error in `failure`) or time ran out.
std::int64_t wait_all(const std::vector<Member>& members, int victim,
                      std::atomic<std::int64_t> HierarchyMoments::*moment, std::int64_t deadline,
                      std::string* failure) {
  for (;;) {
    if (const std::int64_t t = all_reached(members, victim, moment); t != 0) return t;
    for (size_t i = 0; i < members.size(); ++i) {
      if (static_cast<int>(i) == victim) continue;
      if (const std::string e = members[i].runtime->error(); !e.empty()) {
        *failure = "member " + std::to_string(i) + ": " + e;
        return 0;
      }
    }
    if (now_ns() > deadline) {
      *failure = "ran past --max-s";
      return 0;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

// The agreement's parts, as control_plane_sim prints them (SimResult::agree_domain_s): from the
// last abort to the last survivor's domain list agreed, to the last leader's relay, to the last
// survivor holding its full list; null when they do not follow in that order.
nlohmann::ordered_json agree_parts(const std::vector<Member>& members, int victim,
                                   std::int64_t aborted, std::int64_t agreed) {
  const std::int64_t domain = all_reached(members, victim, &HierarchyMoments::domain_agreed);
  std::int64_t relayed = 0;
  for (size_t i = 0; i < members.size(); ++i) {
    if (static_cast<int>(i) != victim) {
      relayed = std::max(relayed, members[i].runtime->moments().relayed.load());
    }
  }
  if (!(aborted <= domain && domain <= relayed && relayed <= agreed)) return nullptr;
  nlohmann::ordered_json parts;
  parts["domain_s"] = span_s(aborted, domain);
  parts["round_s"] = span_s(domain, relayed);
  parts["take_s"] = span_s(relayed, agreed);
  return parts;
}

// The global epoch every survivor's full list is of, and its size; nulls when they differ.
void agreed_list(const std::vector<Member>& members, int victim, nlohmann::ordered_json& line) {
  int lowest = 1 << 30, highest = -1, smallest = 1 << 30, largest = -1;
  for (size_t i = 0; i < members.size(); ++i) {
    if (static_cast<int>(i) == victim) continue;
    const auto list = members[i].runtime->training_on();
    const int epoch = list ? list->epoch : -1,
              size = list ? static_cast<int>(list->members.size()) : -1;
    lowest = std::min(lowest, epoch);
    highest = std::max(highest, epoch);
    smallest = std::min(smallest, size);
    largest = std::max(largest, size);
  }
  line["agreed_epoch"] = lowest == highest ? nlohmann::ordered_json(lowest) : nullptr;
  line["agreed_members"] = smallest == largest ? nlohmann::ordered_json(largest) : nullptr;
}

// Store ops in [from, to) per second: the global server's, and the busiest domain server's.
void steady_load(const std::vector<ServerCounts>& from, const std::vector<ServerCounts>& to,
                 double seconds, nlohmann::ordered_json& line) {
  double busiest = 0;
  for (size_t i = 1; i < from.size(); ++i) {
    busiest = std::max(busiest, static_cast<double>(to[i].commands - from[i].commands) / seconds);
  }
  line["steady_store_ops_per_s"] =
      std::round(static_cast<double>(to[0].commands - from[0].commands) / seconds);
  line["domain_steady_store_ops_per_s"] = std::round(busiest);
}

std::vector<ServerCounts> all_counts(const Servers& servers) {
  std::vector<ServerCounts> out;
  for (size_t i = 0; i < servers.all.size(); ++i) out.push_back(servers.counts(i));
  return out;
}

// One N, in a child process: prints its JSON line and leaves without tearing down.
[[noreturn]] void measure(const Options& o, int n, const Servers& servers) {
  const std::int64_t deadline = now_ns() + static_cast<std::int64_t>(o.max_s * 0.8e9);
  const int domains = n / o.tp;
  nlohmann::ordered_json line;
  line["gpus"] = n;
  line["domain"] = o.tp;
  line["hierarchy"] = true;
  line["fault"] = o.leader ? "leader-kill" : "kill";
  std::vector<Member> members;
  for (int gid = 0; gid < n; ++gid) members.push_back(make_member(o, n, gid, servers));
  for (Member& m : members) m.runtime->start();
  std::fprintf(stderr, "N=%d: %d members in %d domains running; steady %.1f s\n", n, n, domains,
               o.steady_s);
  std::this_thread::sleep_for(std::chrono::seconds(1));  // every watch past its first look
  const std::vector<ServerCounts> c0 = all_counts(servers);
  const std::int64_t t0 = now_ns();
  std::this_thread::sleep_for(std::chrono::duration<double>(o.steady_s));
  steady_load(c0, all_counts(servers), span_s(t0, now_ns()), line);
  for (size_t i = 0; i < members.size(); ++i) {
    if (members[i].runtime->moments().aborted.load() != 0)
      die("member " + std::to_string(i) + "'s watch fired before the fault");
  }
  // The fault, where control_plane_sim strikes: the middle domain's middle slot, or its leader.
  const int victim = (domains / 2) * o.tp + (o.leader ? 0 : o.tp / 2);
  line["victim"] = victim;
  Member& dead = members[static_cast<size_t>(victim)];
  dead.domain_store->kill();
  dead.global_store->kill();
  const ServerCounts global_at_fault = servers.counts(0);
  const std::int64_t tf = now_ns();
  std::shared_ptr<ntp::comm::Store> launcher = open(servers.domain(victim / o.tp));
  (void)ntp::comm::post_exit_notice(*launcher, victim % o.tp, ntp::comm::incarnation(0, 0));
  std::string failure;
  const std::int64_t ta = wait_all(members, victim, &HierarchyMoments::aborted, deadline, &failure);
  const std::int64_t tg =
      ta == 0 ? 0 : wait_all(members, victim, &HierarchyMoments::agreed, deadline, &failure);
  line["abort_all_s"] =
      ta == 0 ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(span_s(tf, ta));
  line["agree_s"] =
      tg == 0 ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(span_s(ta, tg));
  if (o.form) {
    const std::int64_t tm =
        tg == 0 ? 0 : wait_all(members, victim, &HierarchyMoments::formed, deadline, &failure);
    line["form_s"] =
        tm == 0 ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(span_s(tg, tm));
  }
  if (tg != 0) {
    line["recovery_store_ops"] = servers.counts(0).commands - global_at_fault.commands;
    agreed_list(members, victim, line);
    line["hierarchy_agree_parts"] = agree_parts(members, victim, ta, tg);
  }
  if (!failure.empty()) line["failed"] = failure;
  std::printf("%s\n", line.dump().c_str());
  std::fflush(stdout);
  std::fprintf(stderr, "N=%d: abort %s, agreement %s, formation %s\n", n,
               line["abort_all_s"].dump().c_str(), line["agree_s"].dump().c_str(),
               o.form ? line["form_s"].dump().c_str() : "not run");
  std::fflush(stderr);
  _exit(failure.empty() ? 0 : 1);
}

// Runs one N in a child; its line, or one saying why there is none.
bool run_one(const Options& o, int n) {
  Servers servers;
  for (int i = 0; i <= n / o.tp; ++i) {
    ntp::Result<std::unique_ptr<RedisProcess>> server = RedisProcess::start(o.redis_server, 0);
    if (!server.ok()) {
      std::fprintf(stderr, "%s: %s\n", kProgram, server.status().to_string().c_str());
      return false;
    }
    servers.all.push_back(std::move(*server));
  }
  const ntp::bench::ChildEnd end = ntp::bench::run_child(o.max_s, [&] { measure(o, n, servers); });
  if (end == ntp::bench::ChildEnd::kKilled) {
    std::printf("{\"gpus\":%d,\"failed\":\"killed after --max-s %.0f s\"}\n", n, o.max_s);
    std::fflush(stdout);
  }
  return end == ntp::bench::ChildEnd::kOk;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  rlimit limit{};  // as many descriptors as allowed: every member's links are in this process
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    setrlimit(RLIMIT_NOFILE, &limit);
  }
  std::fprintf(stderr, "# %s\n# machine: %s\n# tp %d; steady %.1f s\n",
               ntp::bench::command_line(kProgram, argc, argv).c_str(),
               ntp::bench::machine_description().c_str(), o.tp, o.steady_s);
  bool all_ok = true;
  for (int n : o.members) all_ok = run_one(o, n) && all_ok;
  return all_ok ? 0 : 1;
}
