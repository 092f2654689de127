// The simulator's modeled store in exact virtual time, and the simulated control plane: every
// seeded fault schedule keeps the invariants, a run is a function of its seed, and the figures
// it reports are the ones the protocol's own rules give.
#include "elastic/sim/control_plane_sim.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "elastic/agreement.h"
#include "elastic/agreement_machine.h"
#include "elastic/sim/host_cpu.h"
#include "elastic/sim/sim_barrier.h"
#include "elastic/sim/sim_link.h"
#include "elastic/sim/sim_store.h"

namespace ntp::elastic::sim {
namespace {

using std::chrono::milliseconds;

double at_s(Time t) { return 1e-9 * static_cast<double>(t.time_since_epoch().count()); }

TEST(SimStoreTest, OpsSentTogetherAreServedOneAfterAnotherAtTheServiceRate) {
  EventLoop loop;
  StoreModel model;
  model.ops_per_s = 1000;              // 1 ms of service an op
  model.round_trip = milliseconds(2);  // 1 ms each way
  SimStore store(loop, model);
  std::vector<double> replies;
  for (int k = 0; k < 5; ++k) {
    store.submit(io::set("k" + std::to_string(k), "v"),
                 [&](io::Reply r) { replies.push_back(at_s(r.now)); });
  }
  loop.run_until(Time::max(), [] { return false; });
  // Op k: arrives at 1 ms, waits for the k before it, takes 1 ms, 1 ms back: (k + 3) ms. Virtual
  // time is whole nanoseconds, so the bound (1 ps) asks for the exact figure; it allows only the
  // rounding of converting nanoseconds to seconds in double.
  ASSERT_EQ(replies.size(), 5u);
  for (int k = 0; k < 5; ++k) EXPECT_NEAR(replies[static_cast<size_t>(k)], 1e-3 * (k + 3), 1e-12);
  EXPECT_EQ(store.counts().peak_queue, 5);
  EXPECT_EQ(store.counts().ops, 5);
}

TEST(SimStoreTest, ABlockedReadAnswersAtTheAppendOrAtItsBlockOrAtAWake) {
  EventLoop loop;
  StoreModel model;
  model.ops_per_s = 1e6;  // 1 us an op
  model.round_trip = milliseconds(2);
  SimStore store(loop, model);
  double woken_by_event = -1, timed_out = -1, woken = -1;
  std::size_t events = 99;
  int reader_a = 0, reader_b = 0, reader_c = 0;
  store.submit(
      io::ReadStreams{{{"s", ""}}, milliseconds(100)},
      [&](io::Reply r) {
        woken_by_event = at_s(r.now);
        events = r.events.size();
      },
      &reader_a);
  store.submit(
      io::ReadStreams{{{"quiet", ""}}, milliseconds(100)},
      [&](io::Reply r) { timed_out = at_s(r.now); }, &reader_b);
  store.submit(
      io::ReadStreams{{{"quiet", ""}}, milliseconds(100)},
      [&](io::Reply r) { woken = at_s(r.now); }, &reader_c);
  loop.at(Time(milliseconds(30)), [&] { store.submit(io::Append{"s", "e"}, nullptr); });
  loop.at(Time(milliseconds(50)), [&] { store.wake(&reader_c); });
  loop.run_until(Time::max(), [] { return false; });
  // Exact figures (bounds of 1 ns: the clock's resolution). The append reaches the server at
  // 31 ms (+ 1 us of service), the woken read is run again (1 us more), the reply 1 ms later.
  EXPECT_NEAR(woken_by_event, 0.032002, 1e-9);
  EXPECT_EQ(events, 1u);
  // Blocked from its service at 1.002 ms for 100 ms, then 1 ms back.
  EXPECT_NEAR(timed_out, 0.102002, 1e-9);
  EXPECT_NEAR(woken, 0.051, 1e-9);
}

TEST(SimStoreTest, ReadsWokenByOneAppendAreServedInTurnOrAtOnceWithoutTheirCost) {
  for (const bool cost : {true, false}) {
    EventLoop loop;
    StoreModel model;
    model.ops_per_s = 1e6;  // 1 us an op
    model.round_trip = milliseconds(2);
    model.woken_reads_cost_service = cost;
    SimStore store(loop, model);
    std::vector<double> answered;
    for (int reader = 0; reader < 3; ++reader) {
      store.submit(io::ReadStreams{{{"s", ""}}, milliseconds(100)},
                   [&](io::Reply r) { answered.push_back(at_s(r.now)); });
    }
    loop.at(Time(milliseconds(30)), [&] { store.submit(io::Append{"s", "e"}, nullptr); });
    loop.run_until(Time::max(), [] { return false; });
    // The append is served 31.000-31.001 ms; the three reads after it, 1 us each, in the order
    // they blocked (or all at 31.001 ms); each reply 1 ms later. Exact to the clock's 1 ns.
    const std::vector<double> expected =
        cost ? std::vector<double>{0.032002, 0.032003, 0.032004} : std::vector<double>(3, 0.032001);
    ASSERT_EQ(answered.size(), 3u);
    for (size_t i = 0; i < 3; ++i) EXPECT_NEAR(answered[i], expected[i], 1e-9) << i;
    EXPECT_EQ(store.counts().ops, 4);  // three reads and an append: a woken read is one request
  }
}

TEST(PostFailureTest, ARelayersEventGoesOutOnlyAsTheFirstPosterAWitnessesAlways) {
  // Five posters of one failed epoch, in turn: relayer, relayer, witness, relayer, witness. The
  // first poster's event goes out, the other relayers' do not, both witnesses' do: 3 events, and
  // the key counts all 5 posters.
  EventLoop loop;
  SimStore store(loop, StoreModel{});
  const StoreLink link{&loop, &store, nullptr, Duration(0)};
  const auto live = std::make_shared<bool>(true);
  std::vector<std::unique_ptr<IoSlot>> slots;
  int posted = 0;
  for (FailurePoster poster :
       {FailurePoster::kRelay, FailurePoster::kRelay, FailurePoster::kWitness,
        FailurePoster::kRelay, FailurePoster::kWitness}) {
    slots.push_back(std::make_unique<IoSlot>());
    IoSlot& io = *slots.back();
    drive(link, io, post_failure(io, "g", 3, poster), live, [&posted](Status s) {
      EXPECT_TRUE(s.ok()) << s.to_string();
      ++posted;
    });
    loop.run_until(Time::max(), [] { return false; });  // each post ends before the next begins
  }
  ASSERT_EQ(posted, 5);
  std::size_t events = 0;
  store.submit(io::ReadStreams{{{job_events("g"), ""}}, milliseconds(0)},
               [&events](io::Reply r) { events = r.events.size(); });
  loop.run_until(Time::max(), [] { return false; });
  EXPECT_EQ(events, 3u);
  ASSERT_NE(store.value(fail_key("g", 3)), nullptr);
  EXPECT_EQ(*store.value(fail_key("g", 3)), "5");
}

TEST(HostCpuTest, WorkQueuesOnTheCoreFreeFirstAndRunsAtOnceOnACpuOfItsOwn) {
  EventLoop loop;
  HostCpu shared(loop, 2), own(loop, 0);
  std::vector<Time> done_shared, done_own;
  for (int k = 0; k < 5; ++k) {
    shared.run(milliseconds(1), [&] { done_shared.push_back(loop.now()); });
    own.run(milliseconds(1), [&] { done_own.push_back(loop.now()); });
  }
  loop.run_until(Time::max(), [] { return false; });
  // Two cores, five pieces of 1 ms sent at once: two end at 1 ms, two at 2 ms, one at 3 ms
  // (exact: virtual time in whole nanoseconds).
  const Time ms1(milliseconds(1)), ms2(milliseconds(2)), ms3(milliseconds(3));
  EXPECT_EQ(done_shared, (std::vector<Time>{ms1, ms1, ms2, ms2, ms3}));
  EXPECT_EQ(done_own, (std::vector<Time>(5, ms1)));
}

// A barrier of n ranks whose messages each take `hop` on the agenda; ranks enter at `enter_at`.
// Returns when each rank left (Time::max(): never) and counts the messages sent.
struct BarrierRun {
  std::vector<Time> left;
  int messages = 0;
};
BarrierRun run_barrier(int n, bool sparse, Duration hop, const std::vector<Time>& enter_at) {
  EventLoop loop;
  BarrierRun out;
  out.left.assign(static_cast<size_t>(n), Time::max());
  SimBarrier barrier(n, sparse, [&](int, std::function<void()> taken) {
    ++out.messages;
    loop.after(hop, std::move(taken));
  });
  for (int r = 0; r < n; ++r) {
    loop.at(enter_at[static_cast<size_t>(r)], [&, r] {
      barrier.enter(r, [&, r] {
        EXPECT_EQ(out.left[static_cast<size_t>(r)], Time::max()) << "rank " << r << " left twice";
        out.left[static_cast<size_t>(r)] = loop.now();
      });
    });
  }
  loop.run_until(Time::max(), [] { return false; });
  return out;
}

TEST(SimBarrierTest, ADisseminationTakesCeilLog2RoundsOfOneMessagePerRank) {
  // comm/gloo_collectives.cpp's barrier over a full mesh: in round k rank r sends to r + 2^k and
  // waits for r - 2^k. All ranks entering at 0 with 1 ms hops leave at ceil(log2 n) ms exactly,
  // after n messages a round. A rank entering 5 ms late holds every other rank until its
  // messages have gone round: each leaves after 5 + 1 ms (it needs the late rank's first
  // message, at least through others), the last at 5 + ceil(log2 n) ms; the late rank itself
  // leaves in [5, 5 + ceil(log2 n)] ms (its later rounds' messages come through ranks it held).
  for (int n : {2, 3, 7, 8, 31}) {
    const int rounds = static_cast<int>(std::ceil(std::log2(n)));
    const BarrierRun together = run_barrier(n, false, milliseconds(1), std::vector<Time>(n));
    EXPECT_EQ(together.messages, n * rounds) << n;
    EXPECT_EQ(together.left, std::vector<Time>(n, Time(milliseconds(rounds)))) << n;
    const int late = n / 2;
    std::vector<Time> one_late(n);
    one_late[static_cast<size_t>(late)] = Time(milliseconds(5));
    const BarrierRun r = run_barrier(n, false, milliseconds(1), one_late);
    Time last{};
    for (int k = 0; k < n; ++k) {
      const Time left = r.left[static_cast<size_t>(k)];
      last = std::max(last, left);
      EXPECT_GE(left, Time(milliseconds(k == late ? 5 : 5 + 1))) << n << " " << k;
      EXPECT_LE(left, Time(milliseconds(5 + rounds))) << n << " " << k;
    }
    EXPECT_EQ(last, Time(milliseconds(5 + rounds))) << n;
  }
}

TEST(SimBarrierTest, ATreeGoesUpAndDownTheBinomialTreeOnceEach) {
  // Over sparse links: every rank but the root sends up once and receives down once, 2 (n - 1)
  // messages. In the binomial tree rank v is popcount(v) hops below the root, so with all
  // entering at 0 and 1 ms hops the root hears its last child at the greatest depth d and
  // leaves then, as it sends down, and the deepest rank leaves at 2 d.
  for (int n : {2, 33, 64, 100}) {
    int depth = 0;
    for (int v = 0; v < n; ++v) depth = std::max(depth, std::popcount(static_cast<unsigned>(v)));
    const BarrierRun r = run_barrier(n, true, milliseconds(1), std::vector<Time>(n));
    EXPECT_EQ(r.messages, 2 * (n - 1)) << n;
    EXPECT_EQ(r.left[0], Time(milliseconds(depth))) << n;
    EXPECT_EQ(*std::max_element(r.left.begin(), r.left.end()), Time(milliseconds(2 * depth))) << n;
  }
}

SimConfig small(int gpus, Fault fault, std::uint64_t seed) {
  SimConfig c;
  c.gpus = gpus;
  c.tp = 4;
  c.fault = fault;
  c.seed = seed;
  return c;
}

// The hierarchy at `gpus` GPUs in domains of `tp`: a `fault`, then `after` it a second kill in
// the same domain (seed 1).
SimConfig second_kill_in_domain(int gpus, int tp, Fault fault, std::chrono::microseconds after) {
  SimConfig c = small(gpus, fault, 1);
  c.tp = tp;
  c.hierarchy = true;
  c.second_kill_after = after;
  c.second_in_same_domain = true;
  return c;
}

TEST(ControlPlaneSimTest, EverySeededKillAndHangKeepsTheInvariantsInOneEpoch) {
  // 100 schedules of each fault at 16 members (the beats' phases are the seed's): one list per
  // epoch, every survivor in it and on it, no false verdict before the fault, every survivor
  // formed; one fault is agreed in exactly one epoch (none given up).
  for (Fault fault : {Fault::kKill, Fault::kHang}) {
    for (std::uint64_t seed = 1; seed <= 100; ++seed) {
      const SimResult r = simulate(small(16, fault, seed));
      ASSERT_EQ(r.invariants, "ok") << "seed " << seed;
      ASSERT_EQ(r.agreed_epoch, 1) << "seed " << seed;
    }
  }
}

TEST(ControlPlaneSimTest, ARunIsAFunctionOfItsSeed) {
  const SimResult a = simulate(small(64, Fault::kHang, 7)),
                  b = simulate(small(64, Fault::kHang, 7));
  EXPECT_EQ(a.events, b.events);
  EXPECT_EQ(a.abort_all_s, b.abort_all_s);
  EXPECT_EQ(a.agree_s, b.agree_s);
  EXPECT_EQ(a.form_s, b.form_s);
  EXPECT_EQ(a.recovery_store_ops, b.recovery_store_ops);
  EXPECT_EQ(a.peak_store_queue, b.peak_store_queue);
  const SimResult c = simulate(small(64, Fault::kHang, 8));
  EXPECT_NE(a.events, c.events);  // another seed, other phases
  EXPECT_EQ(c.invariants, "ok");
}

TEST(ControlPlaneSimTest, AHangIsSeenWithinTheWatchsBoundAndAKillAtTheNotice) {
  // elastic/progress.h: a stopped beat is a hang after --hang-detect-ms, seen within
  // hang_detect + 2 liveness periods (1 s + 2 x 250 ms here); never before hang_detect.
  for (std::uint64_t seed = 1; seed <= 20; ++seed) {
    const SimResult hang = simulate(small(32, Fault::kHang, seed));
    EXPECT_GE(hang.abort_all_s, 1.0) << "seed " << seed;
    EXPECT_LE(hang.abort_all_s, 1.5) << "seed " << seed;
    // A kill is the launcher's exit notice: two store ops and the blocked reads' wake, a few
    // round trips of 0.1 ms with the store idle, far below one liveness period.
    const SimResult kill = simulate(small(32, Fault::kKill, seed));
    EXPECT_LT(kill.abort_all_s, 0.001) << "seed " << seed;
  }
}

TEST(ControlPlaneSimTest, TheAgreementsThreePartsFollowInOrderAndAddUpToIt) {
  // SimResult::agree_announce_s, _decide_s, _take_s (what control_plane_bench measures too). Each
  // is at least the round trips (0.1 ms) its path cannot skip: the last member to abort enters the
  // epoch only after its failure count, the walk's read and the target's read (3); the decider
  // hears the last announcement half a round trip after it is sent and its reply takes the other
  // half (1); the last waiter's read of the list reaches the store after the publication does and
  // comes back (1). Measured 1.3-1.7, 0.7-1.4 and 1.5-2.7 ms: the rest is 32 members' ops queued
  // in the store. The parts are consecutive spans of virtual time in whole nanoseconds, so their
  // sum is agree_s to the rounding of three conversions to seconds and two additions in double:
  // at most about 5 x 2e-19 s at these 1e-3 s magnitudes (measured: exactly 0 in all 10 runs).
  for (Fault fault : {Fault::kKill, Fault::kHang}) {
    for (std::uint64_t seed = 1; seed <= 5; ++seed) {
      const SimResult r = simulate(small(32, fault, seed));
      ASSERT_EQ(r.invariants, "ok") << "seed " << seed;
      EXPECT_GE(r.agree_announce_s, 3e-4) << "seed " << seed;
      EXPECT_GE(r.agree_decide_s, 1e-4) << "seed " << seed;
      EXPECT_GE(r.agree_take_s, 1e-4) << "seed " << seed;
      EXPECT_NEAR(r.agree_announce_s + r.agree_decide_s + r.agree_take_s, r.agree_s, 1e-17)
          << "seed " << seed;
    }
  }
}

TEST(ControlPlaneSimTest, AWokenReadsCostIsPaidOnceOnTheNoticesPath) {
  // SimConfig::wake_cpu: the reply to a blocking read that carries events costs that much more
  // of the member's CPU. A kill reaches every member by one woken read of the exit event, then
  // the member aborts: with a CPU per member (no queue) the last abort moves by exactly the wake
  // cost (virtual time in whole nanoseconds; the seconds printed to 1e-9).
  SimConfig c = small(32, Fault::kKill, 3);
  c.cpu_per_op = std::chrono::microseconds(20);
  const SimResult plain = simulate(c);
  c.wake_cpu = std::chrono::microseconds(300);
  const SimResult woken = simulate(c);
  ASSERT_EQ(woken.invariants, "ok");
  EXPECT_NEAR(woken.abort_all_s - plain.abort_all_s, 300e-6, 2e-9);
}

TEST(ControlPlaneSimTest, TheFormationsThreePartsAddUpToItAndTheDialsAreSequential) {
  // SimResult::form_link_s, _barrier_s, _done_s (what control_plane_bench measures too). The
  // links' part is the address exchange, plus the longest chain of one member's dials, one
  // after another, each a dial round trip and 2 x 50 us of set-up CPU (the default, one per
  // end). Doubling the dial round trip from 20 to 40 ms leaves the exchange and the CPU as they
  // were, so the links' part grows by exactly k x 20 ms for a whole number k of dials, between 2
  // and the 14 links of a member of 15 (measured: k = 11, 1.4 ms left). Tripling the barriers'
  // round trip moves the barriers' part, not the links'.
  SimConfig c = small(16, Fault::kKill, 2);
  c.dial_round_trip = milliseconds(20);
  const SimResult r = simulate(c);
  ASSERT_EQ(r.invariants, "ok");
  // Consecutive spans in whole nanoseconds: the sum differs from form_s by the rounding of four
  // conversions to seconds and two additions, a few ulps of 0.1 s (1.4e-17 each).
  EXPECT_NEAR(r.form_link_s + r.form_barrier_s + r.form_done_s, r.form_s, 1e-16);
  c.dial_round_trip = milliseconds(40);
  const SimResult doubled = simulate(c);
  ASSERT_EQ(doubled.invariants, "ok");
  const double k = (doubled.form_link_s - r.form_link_s) / 20e-3;
  // Whole nanoseconds converted to seconds: k is a whole number to 1e-6 (1e-9 s of rounding).
  EXPECT_NEAR(k, std::round(k), 1e-6);
  EXPECT_GE(std::round(k), 2);  // dials made all at once would give 1
  EXPECT_LE(std::round(k), 14);
  // What is left is the exchange: a set, then polls 0, 1 and 3 ms after it (k x 100 us of
  // set-up CPU is taken off above). 15 members publish within a millisecond of each other, so
  // the 3 ms poll finds every address at the latest: 3 ms plus its round trips bounds it from
  // the poll schedule, not from a run (measured 1.4 ms: the 1 ms poll found them).
  const double exchange = r.form_link_s - std::round(k) * (20e-3 + 100e-6);
  EXPECT_GT(exchange, 0);
  EXPECT_LT(exchange, 3.5e-3);
  c.dial_round_trip = milliseconds(20);
  c.link_round_trip = 3 * c.link_round_trip;
  const SimResult slower = simulate(c);
  EXPECT_EQ(slower.form_link_s, r.form_link_s);
  EXPECT_GT(slower.form_barrier_s, 2.5 * r.form_barrier_s);
  // A lone survivor has no link to wait for: it forms once its (empty) exchange is done.
  const SimResult lone = simulate(small(2, Fault::kKill, 1));
  ASSERT_EQ(lone.invariants, "ok");
  EXPECT_GE(lone.form_link_s, 0);
}

TEST(ControlPlaneSimTest, TheSteadyLoadIsTheWatchsAndTheBeatsExactly) {
  // Per member and per 2 s: 8 heartbeat sets and 8 neighbour looks (every 250 ms) and one
  // blocking read of the event streams (2 s): 8.5 ops/s, what control_plane_bench measures on
  // redis (docs/perf.md).
  const SimResult r = simulate(small(64, Fault::kKill, 3));
  EXPECT_EQ(r.steady_ops_by_kind.at("set_many"), 64 * 8);
  EXPECT_EQ(r.steady_ops_by_kind.at("get_many"), 64 * 8);
  EXPECT_EQ(r.steady_ops_by_kind.at("read"), 64);
  EXPECT_DOUBLE_EQ(r.steady_store_ops_per_s, 64 * 8.5);
}

// The domain hierarchy (elastic/sim/hierarchy_sim.cpp): 8 domains of 8 GPUs.
SimConfig domains_of_8(Fault fault, std::uint64_t seed) {
  SimConfig c = small(64, fault, seed);
  c.tp = 8;
  c.hierarchy = true;
  return c;
}

bool is_hang(Fault fault) { return fault == Fault::kHang || fault == Fault::kLeaderHang; }

// Which of `phases` a sweep's runs landed in (SimResult::paused_in or second_killed_in, each
// one or more phases joined by ", "), so that a sweep can assert it crossed every phase.
class PhasesHit {
 public:
  explicit PhasesHit(std::vector<std::string> phases) : phases_(std::move(phases)) {}
  void add(const std::string& doing) {
    for (const std::string& phase : phases_) {
      if (doing.find(phase) != std::string::npos) hit_.insert(phase);
    }
  }
  void expect_all(Fault fault, const std::string& sweep) const {
    for (const std::string& phase : phases_) {
      EXPECT_EQ(hit_.count(phase), 1u) << "fault " << static_cast<int>(fault) << ": no " << sweep
                                       << " in " << phase << "; pick the sweep's moments again";
    }
  }

 private:
  std::vector<std::string> phases_;
  std::set<std::string> hit_;
};

TEST(ControlPlaneHierarchyTest, EverySeededFaultOfAMemberOrALeaderKeepsTheInvariants) {
  // 25 schedules of each fault: one list per epoch in every store, one full list per global
  // epoch (composed once, or again to the same bytes), every survivor holding it and no one
  // else, no false verdict, every survivor formed. A member's fault is agreed in global epoch
  // 1. A leader's death is taken over by its domain's next slot, which gives up the one global
  // epoch its predecessor may have died in (fail_open_epochs): exactly one, so epoch 2.
  for (Fault fault : {Fault::kKill, Fault::kHang, Fault::kLeaderKill, Fault::kLeaderHang}) {
    const bool leader = fault == Fault::kLeaderKill || fault == Fault::kLeaderHang;
    for (std::uint64_t seed = 1; seed <= 25; ++seed) {
      const SimResult r = simulate(domains_of_8(fault, seed));
      ASSERT_EQ(r.invariants, "ok") << "fault " << static_cast<int>(fault) << " seed " << seed;
      ASSERT_EQ(r.agreed_epoch, leader ? 2 : 1)
          << "fault " << static_cast<int>(fault) << " seed " << seed;
    }
  }
}

TEST(ControlPlaneHierarchyTest, ASecondKillAtAnyMomentOfTheRecoveryKeepsTheInvariants) {
  // A second member killed during the first fault's recovery (the domain's agreement, the
  // leaders' round, the composition, the formation) or after it (a second recovery); in the
  // first fault's domain (after a leader's fault: the slot taking over) or the next one. Every
  // survivor ends on one full list without either victim. A kill's recovery runs in its first
  // ~10 ms at 8 domains of 8; a hang's only after its detection (0.75-1.5 s after it: hang_detect
  // from the last beat seen move), so its delays are 1 s later (its 0-40 ms all landed in the
  // steady state before this was asserted). That the second victim was killed in each phase is
  // asserted, per fault (SimResult::second_killed_in), so a change of the model's timing cannot
  // move the sweep off the recovery unseen.
  const std::vector<double> after_kill_ms = {0, 0.7, 1.3, 1.9, 2.6, 3.5, 6, 11, 40, 1050, 1300};
  const std::vector<double> after_hang_ms = {1000, 1002, 1003, 1004, 1005, 1006,
                                             1008, 1011, 1020, 1050, 1300};
  for (Fault fault : {Fault::kKill, Fault::kHang, Fault::kLeaderKill, Fault::kLeaderHang}) {
    PhasesHit hit({"steady", "domain agreement", "awaiting the full list", "forming"});
    for (bool same : {false, true}) {
      for (double ms : is_hang(fault) ? after_hang_ms : after_kill_ms) {
        for (std::uint64_t seed = 1; seed <= 3; ++seed) {
          SimConfig c = domains_of_8(fault, seed);
          c.second_kill_after = std::chrono::microseconds(static_cast<std::int64_t>(ms * 1e3));
          c.second_in_same_domain = same;
          const SimResult r = simulate(c);
          ASSERT_EQ(r.invariants, "ok")
              << "fault " << static_cast<int>(fault) << " same " << same << " at " << ms
              << " ms, seed " << seed << " (" << r.second_killed_in << ")";
          hit.add(r.second_killed_in);
        }
      }
    }
    hit.expect_all(fault, "second kill");
  }
}

TEST(ControlPlaneHierarchyTest, ARecoveryAfterAFormedOneStartsFromItsFullList) {
  // A second kill 1.05 s after the first fault's (a kill's recovery ends within ~10 ms at 8
  // domains of 8): every GPU trained on the first recovery's full list, and its leaders marked
  // it done before their first step on it, so the second recovery's base is that list (epoch 1
  // after a member's kill, 2 after a leader's), and every holder of the last list trained on it
  // (the invariants' base check). Without the leaders' marks the base stays at epoch 0, which
  // the trainer would reject (a holder of epoch 0's state is at a later step). After a
  // leader's kill the second victim in its domain is the slot that took over, now its leader:
  // a takeover again, which gives up one more epoch.
  for (Fault fault : {Fault::kKill, Fault::kLeaderKill}) {
    for (bool same : {false, true}) {
      SimConfig c = domains_of_8(fault, 1);
      c.second_kill_after = std::chrono::milliseconds(1050);
      c.second_in_same_domain = same;
      const SimResult r = simulate(c);
      const bool leader = fault == Fault::kLeaderKill;
      const int first = leader ? 2 : 1;
      const std::string where =
          std::string(leader ? "leader-kill" : "kill") + (same ? " same" : "");
      ASSERT_EQ(r.invariants, "ok") << where;
      EXPECT_EQ(r.second_killed_in, "steady") << where;
      EXPECT_EQ(r.base_epoch, first) << where;
      EXPECT_EQ(r.agreed_epoch, first + (leader && same ? 2 : 1)) << where;
    }
  }
}

TEST(ControlPlaneHierarchyTest, ASecondKillCountedFromDetectionStrikesEveryFaultsRecovery) {
  // --fault mixed draws its second kill 0-20 ms after the fault's detection: counted from the
  // fault, a hang's second kill landed in the steady state, a second before its detection. The
  // kill comes exactly `after` past the first abort (virtual time in whole nanoseconds: 1e-9 s is
  // one tick of it), and inside the recovery for a hang as for a kill. The detection itself: a
  // kill's at the exit notice, a few 0.1 ms round trips; a hang's when a watcher saw its beat
  // still for hang_detect, counted from the look that first saw the last beat (up to one
  // liveness period before the hang) and seen up to two periods late: 1 s - 250 ms to
  // 1 s + 2 x 250 ms.
  for (Fault fault : {Fault::kKill, Fault::kHang, Fault::kLeaderKill, Fault::kLeaderHang}) {
    for (double after_ms : {0.0, 2.0}) {
      for (std::uint64_t seed = 1; seed <= 3; ++seed) {
        SimConfig c = domains_of_8(fault, seed);
        c.second_kill_after = std::chrono::microseconds(static_cast<std::int64_t>(after_ms * 1e3));
        c.second_kill_from_detection = true;
        c.second_in_same_domain = true;
        const SimResult r = simulate(c);
        const std::string where = "fault " + std::to_string(static_cast<int>(fault)) + " after " +
                                  std::to_string(after_ms) + " ms seed " + std::to_string(seed);
        ASSERT_EQ(r.invariants, "ok") << where;
        if (is_hang(fault)) {
          EXPECT_GE(r.detected_at_s, 0.75) << where;
          EXPECT_LE(r.detected_at_s, 1.5) << where;
        } else {
          EXPECT_GE(r.detected_at_s, 0.0) << where;
          EXPECT_LT(r.detected_at_s, 0.001) << where;
        }
        EXPECT_NEAR(r.second_killed_at_s, r.detected_at_s + after_ms / 1e3, 1e-9) << where;
        // At 0 ms the second victim dies in the instant of the first abort, before it heard of
        // the fault itself (what it was doing is then "steady"); 2 ms on it is in its recovery.
        if (after_ms > 0) {
          EXPECT_NE(r.second_killed_in, "steady") << where;
        }
      }
    }
  }
}

TEST(ControlPlaneHierarchyTest, ALeaderPausedAtAnyMomentOfTheRecoveryAndWokenKeepsTheInvariants) {
  // After the first fault (a member or a leader of domain 4 of 8 killed or hung), the leader of
  // domain 5 is stopped (SIGSTOP) at moments that cross its recovery: before its domain hears of
  // the fault, in its domain's agreement, in the leaders' round, awaiting the full list, forming,
  // and after. What reaches it waits until it is continued (SIGCONT), then it carries out what it
  // was doing: the case the Promela model (models/hierarchy) found gaps in, here on the
  // protocol's own machines. A kill is heard at its exit notice, so its recovery runs in the
  // first ms; a hang is heard after the beat's detection (0.75-1.5 s after it), so its
  // moments are 1 s later. That each phase was hit is asserted (SimResult::paused_in), so a
  // change of the model's timing cannot move the sweep off the recovery unseen.
  //   0.9 s: shorter than the beat's hang detection (1 s), so no watcher can take it as hung: it
  //          stays a member, and the recovery waits for it.
  //   3 s:   longer than the detection and its domain's takeover (hang_detect plus two beat
  //          periods, then a domain agreement), so it is always declared dead: it must read so
  //          and leave, whatever it was about to do when it woke.
  // The run goes on 6 s (2 x the leaders' detection) past the wake; every survivor ends on one
  // full list, one list per epoch in every store. Found with it: the simulated member ended a
  // wait it had not begun (a re-formation during an unfinished formation), which made every
  // member of its domain look stuck a second later, and fenced healthy members job-wide.
  const std::vector<double> after_kill_ms = {0, 1, 2.6, 3.5, 4.5, 5, 5.5, 6, 11, 40};
  const std::vector<double> after_hang_ms = {1000,   1001, 1004,   1005, 1006, 1006.3,
                                             1006.6, 1007, 1007.5, 1012, 1040};
  for (Fault fault : {Fault::kKill, Fault::kHang, Fault::kLeaderKill, Fault::kLeaderHang}) {
    PhasesHit hit(
        {"steady", "domain agreement", "leaders' round", "awaiting the full list", "forming"});
    for (double ms : is_hang(fault) ? after_hang_ms : after_kill_ms) {
      for (const int pause_ms : {900, 3000}) {
        SimConfig c = domains_of_8(fault, 1);
        c.pause_leader_after = std::chrono::microseconds(static_cast<std::int64_t>(ms * 1e3));
        c.pause_for = milliseconds(pause_ms);
        const SimResult r = simulate(c);
        const std::string what = "fault " + std::to_string(static_cast<int>(fault)) +
                                 ", paused at " + std::to_string(ms) + " ms for " +
                                 std::to_string(pause_ms) + " ms (" + r.paused_in + ")";
        ASSERT_EQ(r.invariants, "ok") << what;
        ASSERT_EQ(r.paused_leader, 40) << what;
        EXPECT_EQ(r.paused_leader_left, pause_ms > 1000) << what;
        hit.add(r.paused_in);
      }
    }
    hit.expect_all(fault, "pause");
  }
}

TEST(ControlPlaneHierarchyTest, APausedFirstPosterDoesNotHoldItsDomain) {
  // Found as seed 881 of --fault mixed with a leader paused at 1,006 ms, here with a 5 s pause:
  // domain 64's leader hangs, the slot taking over is killed 1.232 ms after the detection, and
  // domain 65's leader is stopped just after it counted itself the first poster of its domain's
  // failure, before it sent the event. Its ring neighbours see it still (0.75-1.5 s after the
  // stop) and post the failure too; when only a first poster's event went out, the rest of domain
  // 65 heard of nothing until the leader woke (abort at 6.006 s), and the leaders had agreed the
  // job without domain 65 by then: 7 healthy GPUs fenced. Witnesses now send the event
  // (FailurePoster::kWitness): every abort by 1.006 + 1.5 s plus a few ms of the domain's ops
  // (measured 2.003 s).
  SimConfig c = domains_of_8(Fault::kLeaderHang, 881);
  c.gpus = 1024;
  c.second_kill_after = std::chrono::microseconds(1232);
  c.second_kill_from_detection = true;
  c.second_in_same_domain = true;
  c.pause_leader_after = milliseconds(1006);
  c.pause_for = std::chrono::seconds(5);
  const SimResult r = simulate(c);
  EXPECT_EQ(r.invariants, "ok");
  EXPECT_EQ(r.paused_in, "steady");
  EXPECT_TRUE(r.paused_leader_left);
  EXPECT_LT(r.abort_all_s, 1.006 + 1.5 + 0.01);
}

TEST(ControlPlaneHierarchyTest, AMemberNeverFormsOnAFullListRelayedBeforeItsDomainReformed) {
  // 16 NVL72 domains; a second kill 3.581 ms after the first, in its domain, lands while the
  // other domains' members are still reading global epoch 1's full list. Their domains re-form
  // for epoch 2, and a member that had not read epoch 1's list yet must not take it then
  // (it is agreed for the domain's previous epoch): found as seed 157 of --fault mixed.
  // The interleaving needs exact timing: it is reached with the store model it was found with
  // (woken reads at no cost) and not with today's: at 20 us steps over 18-27 ms, where the relays
  // happen, no member of a domain the faults spared awaited a relayed list (coarser scans over
  // 3.3-34 ms counted only the struck domain's members).
  SimConfig c = second_kill_in_domain(1152, 72, Fault::kKill, std::chrono::microseconds(3581));
  c.store.woken_reads_cost_service = false;
  const SimResult r = simulate(c);
  EXPECT_EQ(r.invariants, "ok");
  EXPECT_EQ(r.agreed_epoch, 2);
  // The case itself: 1,065 members of domains the faults spared (whose domain lists stayed the
  // same) awaited epoch 1's relayed list when their domains re-formed (exact: one seed; 492
  // before the decider was named by its claim, one operation fewer on the way to the relay).
  EXPECT_EQ(r.awaits_dropped_after_relay, 1065);
}

TEST(ControlPlaneHierarchyTest, ASlotKilledWhileTakingTheLeadIsReplacedByTheNext) {
  // 128 domains of 8: the leader of domain 64 is killed, then, 3.6 ms later, slot 1, which had
  // taken over and posted the global failure (found as seeds 3, 153, 492, 654 of --fault mixed
  // at 1,024 GPUs). Two faults of the takeover surfaced here: the dead slot's takeover went on
  // (its round was not yet its leadership's, so its death did not drop it) and announced the
  // domain's old list beside slot 2's; and it had counted itself the first poster of global
  // epoch 0's failure, then died before the event, so the other leaders never heard of it.
  const SimResult r =
      simulate(second_kill_in_domain(1024, 8, Fault::kLeaderKill, std::chrono::microseconds(3600)));
  EXPECT_EQ(r.invariants, "ok");
  EXPECT_EQ(r.agreed_epoch, 3);            // epochs 1 and 2 given up by the two takeovers
  EXPECT_EQ(r.takeovers_cut_by_death, 1);  // the case itself: slot 1 died taking over
}

TEST(ControlPlaneHierarchyTest, AStoreSlowedAtTheFaultSlowsTheRecoveryAndKeepsTheInvariants) {
  // The global store (the flat protocol's only store) serves 100x fewer ops from the fault on.
  // Both protocols keep their invariants; the flat one, whose every GPU waits in that store's
  // queue, takes longer than the hierarchy, whose global store sees 8 leaders.
  SimConfig flat = small(64, Fault::kKill, 2);
  flat.slow_store_factor = 100;
  SimConfig tiered = domains_of_8(Fault::kKill, 2);
  tiered.slow_store_factor = 100;
  const SimResult f = simulate(flat), h = simulate(tiered);
  const SimResult fast = simulate(domains_of_8(Fault::kKill, 2));
  ASSERT_EQ(f.invariants, "ok");
  ASSERT_EQ(h.invariants, "ok");
  EXPECT_GT(h.agree_s, fast.agree_s);  // the global agreement waits in the slowed queue
  EXPECT_GT(f.agree_s + f.form_s, h.agree_s + h.form_s);
}

TEST(ControlPlaneHierarchyTest, AWholeDomainLostAtOnceIsSeenByTheLeadersAndDroppedWhole) {
  // A rack's power: its 8 GPUs and its launcher stop at once, no exit notice, and no one is left
  // in the domain to see it. The leaders' watch (3 x hang_detect, looks every 750 ms) sees the
  // domain's beat stop: never before 3 s, within 3 s + 2 periods (4.5 s). The other domains
  // re-form without it: the invariants (every survivor on one full list, none of the lost 8 in
  // it: a list of 56 GPUs) in every seed, one global epoch, and with a second kill in another
  // domain as well.
  for (std::uint64_t seed = 1; seed <= 20; ++seed) {
    SimConfig c = domains_of_8(Fault::kDomainLoss, seed);
    const SimResult r = simulate(c);
    ASSERT_EQ(r.invariants, "ok") << "seed " << seed;
    EXPECT_GE(r.abort_all_s, 3.0) << "seed " << seed;
    EXPECT_LE(r.abort_all_s, 4.5) << "seed " << seed;
    EXPECT_EQ(r.agreed_epoch, 1) << "seed " << seed;
    c.second_kill_after = std::chrono::milliseconds(seed);
    c.second_kill_from_detection = true;
    const SimResult twice = simulate(c);
    ASSERT_EQ(twice.invariants, "ok") << "seed " << seed;
    EXPECT_GE(twice.second_victim, 0);
  }
}

TEST(ControlPlaneHierarchyTest, AHangIsSeenWithinTheDomainWatchsBound) {
  // The domain's watch is the flat one over the domain's 8 slots: hang_detect + 2 periods
  // (1 s + 2 x 250 ms), never before hang_detect, for a member and for a leader alike; the
  // leaders' watch (3 s) never fires first.
  for (std::uint64_t seed = 1; seed <= 10; ++seed) {
    for (Fault fault : {Fault::kHang, Fault::kLeaderHang}) {
      const SimResult r = simulate(domains_of_8(fault, seed));
      EXPECT_GE(r.abort_all_s, 1.0) << "seed " << seed;
      EXPECT_LE(r.abort_all_s, 1.5) << "seed " << seed;
    }
  }
}

TEST(ControlPlaneHierarchyTest, TheGlobalStoreSeesTheLeadersOnly) {
  // With the leaders' hang_detect at 4 s (period 1 s), a 2 s window holds, per leader, exactly
  // 2 global beats, 2 neighbour looks and one blocking read: 8 leaders x 2.5 ops/s = 20 ops/s,
  // against 64 x 8.5 = 544 for the flat protocol. Each domain store carries its 8 members'
  // 8.5 ops/s: 68.
  SimConfig c = domains_of_8(Fault::kKill, 3);
  c.global_hang_factor = 4;
  const SimResult r = simulate(c);
  ASSERT_EQ(r.invariants, "ok");
  EXPECT_EQ(r.steady_ops_by_kind.at("set_many"), 8 * 2);
  EXPECT_EQ(r.steady_ops_by_kind.at("get_many"), 8 * 2);
  EXPECT_EQ(r.steady_ops_by_kind.at("read"), 8);
  EXPECT_DOUBLE_EQ(r.steady_store_ops_per_s, 8 * 2.5);
  EXPECT_DOUBLE_EQ(r.domain_steady_store_ops_per_s, 8 * 8.5);
}

TEST(ControlPlaneHierarchyTest, ARunIsAFunctionOfItsSeed) {
  const SimResult a = simulate(domains_of_8(Fault::kLeaderHang, 7)),
                  b = simulate(domains_of_8(Fault::kLeaderHang, 7));
  EXPECT_EQ(a.events, b.events);
  EXPECT_EQ(a.abort_all_s, b.abort_all_s);
  EXPECT_EQ(a.agree_s, b.agree_s);
  EXPECT_EQ(a.form_s, b.form_s);
  EXPECT_EQ(a.recovery_store_ops, b.recovery_store_ops);
}

}  // namespace
}  // namespace ntp::elastic::sim
