// Progress: what a worker's training thread has done lately, carried in its heartbeat, so that a
// worker whose training thread is stuck (a deadlock, a stuck kernel or write: the usual "NCCL
// hang") is taken as hung although its process and its heartbeat thread live. A SIGSTOPped or
// killed worker stops beating altogether, which looks the same: its progress stops moving.
//
// The training thread calls mark() at every phase boundary (cheap: relaxed atomics); the
// heartbeat thread publishes token() with every beat. A watcher feeds the tokens it reads to a
// Stillness tracker (the one staleness routine of the job: the failure watch and the agreement's
// decider both use it), which takes a worker as hung once its progress has not moved for the
// allowance of the phase it is in while it is not waiting on its peers: --hang-detect-ms for the
// phases of a step, ten times that for phases that may legitimately run long (the first step, a
// checkpoint, an evaluation, a re-formation), none for a finished worker. The trainer marks a
// step's phase again as soon as a long phase ends, so that a long allowance never outlives its
// phase. A worker whose beat stops (SIGSTOP, death) is hung after --hang-detect-ms, whatever it
// was doing.
#pragma once

#include <sys/types.h>
#include <time.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "comm/wait_observer.h"

namespace ntp::elastic {

enum class Phase : std::uint8_t {
  kSetup = 0,   // loading data, building the first job
  kFirstStep,   // the first step of a process (first touches of every buffer)
  kStep,        // a phase of a training step
  kCheckpoint,  // committing a checkpoint save
  kReform,      // a re-formation (agreement, rebuild, reshard)
  kJoin,        // a repair waiting to be admitted
  kFinished,    // the job's steps are done
  kEval,        // a held-out evaluation at the end of a step
};

// Also the training thread's wait observer (comm/wait_observer.h): while it blocks on its peers it
// is waiting, not stuck, and its token says so.
//
// Starved, not stuck (docs/recovery.md, "A loaded host"): a worker whose host's cores are busy runs
// late, and its token says by how much, so that watchers judge it against its own pace:
// - `starved`: with the training thread's CPU clock, the token says whether that thread ran for
//   less than half of the time since its progress was last seen to move while not waiting, and
//   still works: it ran at least 1% of that window, or it is runnable now (waits for a core: the
//   kernel's run state, which a blocked thread, in a deadlock or a stuck call, is not), or
//   another thread of its process is (a helper it may wait on without a peer, through a lock or
//   the memory map, waits for a core: its process still works). It works, slowly (contention, or
//   a slow read that is not a peer's). Its progress gets the long allowance (phase_allowance of
//   a long phase) instead of its phase's. Judged over that window, not one beat's interval, in
//   which a starved thread may get no CPU.
// - `ran_ms`, `queued_ms`, `blocked_in`: the training thread's CPU time in that window, its time
//   waiting for a core, and where it sleeps, for the verdict's message.
// - `still_ms`: how long that window is, on this process's clock: how long its progress has stood
//   still as its own heartbeat thread saw it. Watchers judge progress by it, not by when they read
//   the tokens, so that a watcher or a beat that runs late on a loaded host does not stretch it.
// - `beat_gap_ms`: the longest time between two of its last 8 tokens, that is between two beats
//   (the heartbeat thread calls token() once per beat). A beat thread that woke late lately may
//   wake late again: its beat gets four times that lateness more time (beat_allowance).
// A stuck thread (a deadlock, a blocked call: no CPU) and a stopped process (no beat) on a host
// that was not late keep their bounds, so a hang is found as before; every extension is capped at
// ten times --hang-detect-ms, so a hang on a loaded host is found too, later.
class Progress : public comm::WaitObserver {
 public:
  // The thread whose progress this is, as the heartbeat thread reads it: its CPU-time clock and
  // its kernel thread id (for its run state in /proc).
  struct Thread {
    clockid_t cpu_clock{};
    pid_t tid = 0;
    static Thread current();  // the calling thread
  };
  // `incarnation`: the process's restart count in its slot (the launcher's NTP_RESTART_COUNT). It
  // leads the moving part of the token, so that a record of a previous process's progress (a
  // silent record, agreement.h) never matches this one's, however many marks it has made.
  // `thread`: the training thread (Thread::current() called on it); none (tests, the simulator,
  // whose tokens must not depend on the host's clocks): the token always says not starved and a
  // beat gap of 0, and has no still_ms (watchers time its progress).
  explicit Progress(int incarnation = 0, std::optional<Thread> thread = std::nullopt)
      : incarnation_(incarnation), thread_(thread) {}
  // The training thread reached `phase` of `step`. Every call counts as progress.
  void mark(Phase phase, std::int64_t step);
  // "<incarnation>.<sequence>:<phase>:<step>:<waiting 0|1>:<starved
  // 0|1>:<beat_gap_ms>[:<still_ms>:<ran_ms>:<queued_ms>:<blocked_in>]" for the heartbeat: one
  // caller, the heartbeat thread. still_ms: the time since the first call that saw the current
  // sequence, ran_ms the training thread's CPU time in it and queued_ms its time waiting for a core
  // (with a thread only); starved judges them (and the run state); blocked_in names where a thread
  // that is neither at speed nor runnable sleeps (else empty); beat_gap_ms is the longest of the
  // last 8 times between calls.
  std::string token() const;
  // The token's moving part, "<incarnation>.<sequence>" (ProgressToken::moving), without a sample
  // of the CPU clock: for this worker's own watch, which compares it with its silent record.
  std::string moving() const;
  void waiting(bool begins) override;
  // Seconds the training thread has spent waiting on its peers so far (outermost waits; read on
  // that thread), by the wall clock.
  double waited_seconds() const { return 1e-9 * static_cast<double>(waited_ns_); }
  // The training thread's CPU seconds so far outside its waits on peers (read on that thread, out
  // of any wait; 0 without a thread): its compute, less the time the host's scheduler gave to
  // other threads, which its wall time counts.
  double computed_cpu_seconds() const;

 private:
  struct Sample {
    bool starved = false;
    std::int64_t beat_gap_ms = 0;
    std::int64_t still_ms = -1, ran_ms = -1, queued_ms = -1;  // none without a thread
    std::string blocked_in;  // where a thread that is not runnable sleeps (thread_blocked_in)
  };
  // Samples the clocks: the window since progress last moved, and the longest of the last 8
  // intervals between calls.
  Sample sample() const;

  const int incarnation_;
  const std::optional<Thread> thread_;
  mutable std::mutex sample_mutex_;
  mutable std::int64_t sample_wall_ns_ = -1;  // the last call's wall clock (for beat gaps)
  // The window since progress was last seen to move: its start's wall and training-thread CPU
  // clocks, and the sequence seen then.
  mutable std::int64_t still_wall_ns_ = -1, still_cpu_ns_ = -1, still_queued_ns_ = 0;
  mutable std::uint64_t still_sequence_ = 0;
  mutable std::array<std::int64_t, 8> gaps_ms_{};  // the last 8 intervals between calls
  mutable std::size_t next_gap_ = 0;
  std::atomic<int> waits_{0};
  // The training thread's only: the outermost wait's start and the waits' sum, by the wall clock
  // and by its CPU clock.
  std::int64_t wait_start_ns_ = 0, waited_ns_ = 0;
  std::int64_t wait_start_cpu_ns_ = 0, waited_cpu_ns_ = 0;
  std::atomic<std::uint64_t> sequence_{0};
  std::atomic<std::uint8_t> phase_{0};
  std::atomic<std::int64_t> step_{-1};
};

// The starvation rule on one window of `wall_ns`: the training thread ran `cpu_ns` of it, less than
// half (at half or more it computes at speed), and at least 1% or it is `runnable` now (below 1%
// and not runnable it is blocked).
bool starved_share(std::int64_t wall_ns, std::int64_t cpu_ns, bool runnable = false);

// Whether thread `tid` of this process is runnable now (running or waiting for a core: state R in
// /proc/self/task/<tid>/stat); false if that cannot be read.
bool thread_runnable(pid_t tid);

// Whether a thread of this process other than `tid` and the calling thread is runnable now.
bool other_thread_runnable(pid_t tid);

// How long thread `tid` of this process has waited for a core so far, in ns (the scheduler's run
// delay, /proc/self/task/<tid>/schedstat); 0 if that cannot be read.
std::int64_t thread_queued_ns(pid_t tid);

// The kernel function thread `tid` of this process sleeps in ("futex_wait_queue",
// "do_nanosleep", ...: /proc/self/task/<tid>/wchan); empty when it runs or that cannot be read.
std::string thread_blocked_in(pid_t tid);

// A heartbeat value read back: the beat (moves while the process runs), the progress (moves while
// its training thread works), the phase it is in, and whether it waits on its peers.
struct ProgressToken {
  std::string beat;
  std::string moving;  // incarnation.sequence; the whole value for a plain heartbeat
  Phase phase = Phase::kStep;
  bool waiting = false;
  bool starved = false;  // its training thread runs, slowly (see Progress): the long allowance
  std::int64_t beat_gap_ms = 0;  // the longest of its last 8 beat intervals (see Progress)
  // How long its progress had stood still when the token was made, by its own clock, and the CPU
  // time its training thread had in that window (see Progress); none from a process without a
  // thread clock, whose watchers time it themselves.
  std::optional<std::int64_t> still_ms, ran_ms;
  // How long its training thread waited for a core in that window, and the kernel function it
  // slept in when the token was made if it was neither computing at speed nor runnable (empty
  // otherwise): what a verdict's message tells of a thread taken as hung.
  std::optional<std::int64_t> queued_ms;
  std::string blocked_in;
};
// "progress still for 612 ms in phase 2 at step 9 (ran 3 ms of CPU; not starved)": what a token
// says of a worker taken as hung, for the abort's message.
std::string describe_stillness(const ProgressToken& token);
// Splits a heartbeat value
// "<beat>|<sequence>:<phase>:<step>:<waiting>[:<starved>:<beat_gap_ms>[:<still_ms>[:<ran_ms>
// [:<queued_ms>[:<blocked_in>]]]]]"
// (comm::Heartbeat with a progress payload); a value without '|' (a plain heartbeat) is all beat
// and all progress.
ProgressToken parse_progress(const std::string& heartbeat_value);

// How often a worker beats and its failure watch looks at its neighbours' beats: a quarter of
// --hang-detect-ms (250 ms by default), at least 50 ms. A healthy beat then moves four times
// within the allowance, so a beat late by up to about 3/4 of it is not taken for a hang, and a
// hang is seen within hang_detect + 2 periods. Each costs one store operation per member.
std::chrono::milliseconds liveness_period(std::chrono::milliseconds hang_detect);

// How long progress may stand still in `phase` before the worker is taken as hung.
std::chrono::milliseconds phase_allowance(Phase phase, std::chrono::milliseconds hang_detect);
// How long a beat may stand still before the process is taken as stopped: hang_detect, plus four
// times how late its beats have lately come (beat_gap_ms past a liveness period), at most ten
// times hang_detect in all.
std::chrono::milliseconds beat_allowance(std::int64_t beat_gap_ms,
                                         std::chrono::milliseconds hang_detect);

// What a watcher feeds Stillness for a member whose heartbeat key holds nothing: it never beat in
// this attempt (still starting up).
inline constexpr std::string_view kAbsentBeat = "absent";

// The one staleness routine: per watched id, the last beat and progress seen and since when. A
// worker is taken as hung when its beat has not moved for --hang-detect-ms (a stopped or dead
// process), or when its progress has not moved for its phase's allowance while it is not waiting
// on its peers (a stuck training thread; one that waits is bounded by its collective's timeout),
// the long allowance while its token says starved. A beat's allowance follows its recent lateness
// (beat_allowance); a neighbour that never beat (kAbsentBeat) gets the setup phase's allowance.
class Stillness {
 public:
  using Clock = std::chrono::steady_clock;
  explicit Stillness(std::chrono::milliseconds hang_detect) : hang_detect_(hang_detect) {}

  // Feeds the value read for `id` at `now` (nullopt: the store did not answer, so nothing is
  // known and its stillness starts over). True when its progress has stood still for its
  // phase's allowance.
  bool still(int id, const std::optional<std::string>& value, Clock::time_point now);
  // The value `id` was last seen with (for the silent record).
  const std::string& last_value(int id) const { return seen_.at(id).value; }
  // Why `id` was last taken as still ("beat still for 700 ms", or describe_stillness's words).
  const std::string& verdict(int id) const { return seen_.at(id).verdict; }
  void clear() { seen_.clear(); }

 private:
  struct Seen {
    std::string value, beat, moving;
    Clock::time_point beat_since, moving_since;
    std::string verdict;
  };
  std::chrono::milliseconds hang_detect_;
  std::map<int, Seen> seen_;
};

}  // namespace ntp::elastic
