#include "elastic/progress.h"

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "core/check.h"
#include "core/cpu_clock.h"
#include "core/named_values.h"

namespace ntp::elastic {

void Progress::mark(Phase phase, std::int64_t step) {
  phase_.store(static_cast<std::uint8_t>(phase), std::memory_order_relaxed);
  step_.store(step, std::memory_order_relaxed);
  sequence_.fetch_add(1, std::memory_order_relaxed);
}

void Progress::waiting(bool begins) {
  const int before = waits_.fetch_add(begins ? 1 : -1, std::memory_order_relaxed);
  if (before == (begins ? 0 : 1)) {  // the outermost wait starts or ends: read the clocks
    const std::int64_t now = clock_ns(CLOCK_MONOTONIC);
    const std::int64_t cpu = thread_ ? clock_ns(CLOCK_THREAD_CPUTIME_ID) : 0;
    if (begins) {
      wait_start_ns_ = now;
      wait_start_cpu_ns_ = cpu;
    } else {
      waited_ns_ += now - wait_start_ns_;
      waited_cpu_ns_ += cpu - wait_start_cpu_ns_;
    }
  }
  sequence_.fetch_add(1, std::memory_order_relaxed);  // a wait that starts or ends is progress
}

double Progress::computed_cpu_seconds() const {
  if (!thread_) return 0.0;
  return 1e-9 * static_cast<double>(clock_ns(CLOCK_THREAD_CPUTIME_ID) - waited_cpu_ns_);
}

Progress::Thread Progress::Thread::current() {
  Thread thread;
  NTP_CHECK(pthread_getcpuclockid(pthread_self(), &thread.cpu_clock) == 0);
  thread.tid = static_cast<pid_t>(syscall(SYS_gettid));
  return thread;
}

// Starved: the training thread's CPU time against the wall time since its progress was last seen
// to move (the first call that saw the current sequence), under 50% of it, and either 1% or more
// of it or runnable now (starved_share): a thread that waits for a core on a host with dozens of
// runnable threads per core may get under 1% of a window and is still no blocked one; nor is one
// that sleeps while another thread of its process waits for a core (it may sleep on a lock or the
// memory map that thread holds: a healthy worker on a loaded host was once fenced asleep so). Over
// that whole window, not the interval since the previous call: on a host with more runnable
// threads than a scheduler period serves, a starved thread can get no CPU at all in one beat's
// interval and some in the next, and only the window the watchers judge (progress standing
// still) tells a thread that runs slowly from one that is blocked. Beat gaps: the wall time
// between calls; calls less than 1 ms apart tell nothing new of it.
Progress::Sample Progress::sample() const {
  if (!thread_) return {};  // no clocks read: the simulator's tokens stay deterministic
  const std::int64_t wall = clock_ns(CLOCK_MONOTONIC), cpu = clock_ns(thread_->cpu_clock);
  const std::int64_t queued = thread_queued_ns(thread_->tid);
  const std::uint64_t sequence = sequence_.load(std::memory_order_relaxed);
  const std::lock_guard<std::mutex> lock(sample_mutex_);
  Sample out;
  if (sample_wall_ns_ >= 0 && wall - sample_wall_ns_ >= 1'000'000) {
    gaps_ms_[next_gap_] = (wall - sample_wall_ns_) / 1'000'000;
    next_gap_ = (next_gap_ + 1) % gaps_ms_.size();
  }
  if (sample_wall_ns_ < 0 || wall - sample_wall_ns_ >= 1'000'000) sample_wall_ns_ = wall;
  if (still_wall_ns_ < 0 || sequence != still_sequence_) {  // it moved: a new window starts
    still_wall_ns_ = wall;
    still_cpu_ns_ = cpu;
    still_queued_ns_ = queued;
    still_sequence_ = sequence;
    out.still_ms = out.ran_ms = out.queued_ms = 0;
  } else {
    const std::int64_t window = wall - still_wall_ns_, ran = cpu - still_cpu_ns_;
    // The run state only where the shares leave it open (a /proc read).
    const bool open = window > 0 && 2 * ran < window && 100 * ran < window;
    const bool runnable = open && thread_runnable(thread_->tid);
    const bool helped = open && !runnable && other_thread_runnable(thread_->tid);
    out.starved = starved_share(window, ran, runnable || helped);
    out.still_ms = window / 1'000'000;
    out.ran_ms = ran / 1'000'000;
    out.queued_ms = std::max<std::int64_t>(0, queued - still_queued_ns_) / 1'000'000;
    if (open && !runnable) out.blocked_in = thread_blocked_in(thread_->tid);
  }
  out.beat_gap_ms = *std::max_element(gaps_ms_.begin(), gaps_ms_.end());
  return out;
}

bool starved_share(std::int64_t wall_ns, std::int64_t cpu_ns, bool runnable) {
  return wall_ns > 0 && (runnable || 100 * cpu_ns >= wall_ns) && 2 * cpu_ns < wall_ns;
}

namespace {

// The text of /proc/self/task/<tid>/<file> (at most 511 bytes; empty if it cannot be read).
std::string read_task_file(pid_t tid, const char* file) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/self/task/%d/%s", static_cast<int>(tid), file);
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {};
  char text[512];
  const ssize_t length = ::read(fd, text, sizeof text - 1);
  ::close(fd);
  return length > 0 ? std::string(text, static_cast<size_t>(length)) : std::string();
}

}  // namespace

bool thread_runnable(pid_t tid) {
  // "<tid> (<name>) <state> ...": the name may hold spaces and parentheses, the state follows
  // the last ')'.
  const std::string stat = read_task_file(tid, "stat");
  const size_t close = stat.rfind(')');
  return close != std::string::npos && close + 2 < stat.size() && stat[close + 2] == 'R';
}

bool other_thread_runnable(pid_t tid) {
  const pid_t self = static_cast<pid_t>(syscall(SYS_gettid));
  DIR* tasks = ::opendir("/proc/self/task");
  if (tasks == nullptr) return false;
  bool found = false;
  while (const dirent* entry = ::readdir(tasks)) {
    const auto other = static_cast<pid_t>(std::strtol(entry->d_name, nullptr, 10));
    if (other > 0 && other != tid && other != self && thread_runnable(other)) {
      found = true;
      break;
    }
  }
  ::closedir(tasks);
  return found;
}

std::int64_t thread_queued_ns(pid_t tid) {
  // "<ns on a core> <ns waiting for one> <time slices>"
  const std::string schedstat = read_task_file(tid, "schedstat");
  const char* at = schedstat.c_str();
  char* end = nullptr;
  (void)std::strtoll(at, &end, 10);
  return end != at ? std::strtoll(end, nullptr, 10) : 0;
}

std::string thread_blocked_in(pid_t tid) {
  // A kernel symbol's name, or "0" while it runs. A name with a token separator (':' or '|') or
  // white space is no symbol: dropped rather than let it break the token.
  std::string name = read_task_file(tid, "wchan");
  if (name == "0" || name.find_first_of(":|\n ") != std::string::npos) return {};
  return name;
}

std::string Progress::moving() const {
  return std::to_string(incarnation_) + "." +
         std::to_string(sequence_.load(std::memory_order_relaxed));
}

std::string Progress::token() const {
  const bool waiting = waits_.load(std::memory_order_relaxed) > 0;
  const Sample now = sample();
  char text[128];
  const int length =
      std::snprintf(text, sizeof text, "%d.%llu:%u:%lld:%d:%d:%lld", incarnation_,
                    static_cast<unsigned long long>(sequence_.load(std::memory_order_relaxed)),
                    static_cast<unsigned>(phase_.load(std::memory_order_relaxed)),
                    static_cast<long long>(step_.load(std::memory_order_relaxed)), waiting ? 1 : 0,
                    now.starved && !waiting ? 1 : 0, static_cast<long long>(now.beat_gap_ms));
  std::string out(text, length > 0 ? static_cast<size_t>(length) : 0);
  if (now.still_ms >= 0) {
    out += ":" + std::to_string(now.still_ms) + ":" + std::to_string(now.ran_ms) + ":" +
           std::to_string(now.queued_ms) + ":" + now.blocked_in;
  }
  return out;
}

ProgressToken parse_progress(const std::string& heartbeat_value) {
  ProgressToken out;
  const size_t bar = heartbeat_value.find('|');
  if (bar == std::string::npos) {
    out.beat = out.moving = heartbeat_value;
    return out;
  }
  out.beat = heartbeat_value.substr(0, bar);
  // incarnation.sequence:phase:step:waiting[:starved:beat_gap_ms[:still_ms[:ran_ms[:queued_ms
  // [:blocked_in]]]]]
  const std::string token = heartbeat_value.substr(bar + 1);
  const size_t a = token.find(':');
  const size_t b = a == std::string::npos ? a : token.find(':', a + 1);
  const size_t c = b == std::string::npos ? b : token.find(':', b + 1);
  const size_t d = c == std::string::npos ? c : token.find(':', c + 1);
  const size_t e = d == std::string::npos ? d : token.find(':', d + 1);
  const size_t f = e == std::string::npos ? e : token.find(':', e + 1);
  const size_t g = f == std::string::npos ? f : token.find(':', f + 1);
  const size_t h = g == std::string::npos ? g : token.find(':', g + 1);
  const size_t i = h == std::string::npos ? h : token.find(':', h + 1);
  out.moving = token.substr(0, a);
  if (a != std::string::npos) {
    const auto code = static_cast<unsigned>(std::strtoul(token.c_str() + a + 1, nullptr, 10));
    if (code <= static_cast<unsigned>(Phase::kEval)) out.phase = static_cast<Phase>(code);
  }
  auto flag = [&token](size_t at, size_t end) {
    return at != std::string::npos && token.compare(at + 1, end - at - 1, "1") == 0;
  };
  out.waiting = flag(c, d == std::string::npos ? token.size() : d);
  out.starved = flag(d, e == std::string::npos ? token.size() : e);
  if (e != std::string::npos) out.beat_gap_ms = std::strtoll(token.c_str() + e + 1, nullptr, 10);
  if (f != std::string::npos) out.still_ms = std::strtoll(token.c_str() + f + 1, nullptr, 10);
  if (g != std::string::npos) out.ran_ms = std::strtoll(token.c_str() + g + 1, nullptr, 10);
  if (h != std::string::npos) out.queued_ms = std::strtoll(token.c_str() + h + 1, nullptr, 10);
  if (i != std::string::npos) out.blocked_in = token.substr(i + 1);
  return out;
}

namespace {

// The phase as the stillness description names it: "progress still in a step ...".
constexpr NamedValue<Phase> kPhaseNames[] = {
    {Phase::kSetup, "setup"},           {Phase::kFirstStep, "the first step"},
    {Phase::kStep, "a step"},           {Phase::kCheckpoint, "a checkpoint"},
    {Phase::kReform, "a re-formation"}, {Phase::kJoin, "a join"},
    {Phase::kFinished, "finished"},     {Phase::kEval, "an evaluation"}};

const char* phase_name(Phase phase) { return name_of(kPhaseNames, phase); }

}  // namespace

std::string describe_stillness(const ProgressToken& token) {
  std::string out = "progress still";
  if (token.still_ms) out += " for " + std::to_string(*token.still_ms) + " ms";
  out += std::string(" in ") + phase_name(token.phase) + " (";
  if (token.ran_ms) out += "ran " + std::to_string(*token.ran_ms) + " ms of CPU";
  if (token.queued_ms) out += ", waited " + std::to_string(*token.queued_ms) + " ms for a core";
  if (!token.blocked_in.empty()) out += ", asleep in " + token.blocked_in;
  if (token.ran_ms) out += "; ";
  return out + (token.starved ? "starved)" : "not starved)");
}

std::chrono::milliseconds liveness_period(std::chrono::milliseconds hang_detect) {
  return std::max(std::chrono::milliseconds(50), hang_detect / 4);
}

std::chrono::milliseconds beat_allowance(std::int64_t beat_gap_ms,
                                         std::chrono::milliseconds hang_detect) {
  const std::int64_t late =
      std::max<std::int64_t>(0, beat_gap_ms - liveness_period(hang_detect).count());
  return std::min(hang_detect + std::chrono::milliseconds(4 * late), 10 * hang_detect);
}

std::chrono::milliseconds phase_allowance(Phase phase, std::chrono::milliseconds hang_detect) {
  switch (phase) {
    case Phase::kStep:
      return hang_detect;
    case Phase::kFinished:
      return std::chrono::hours(24);  // done, not hung
    default:
      return 10 * hang_detect;
  }
}

bool Stillness::still(int id, const std::optional<std::string>& value, Clock::time_point now) {
  auto it = seen_.find(id);
  if (!value) {  // nothing known: both clocks start over
    if (it != seen_.end()) it->second.beat_since = it->second.moving_since = now;
    return false;
  }
  const ProgressToken token = parse_progress(*value);
  if (it == seen_.end()) {
    seen_[id] = Seen{*value, token.beat, token.moving, now, now, ""};
    return false;
  }
  Seen& s = it->second;
  s.value = *value;
  if (s.beat != token.beat) s.beat = token.beat, s.beat_since = now;
  if (s.moving != token.moving) s.moving = token.moving, s.moving_since = now;
  if (token.phase == Phase::kFinished) return false;  // done, not hung
  // Never beaten in this attempt: still starting (a stopped or dead one's launcher reports it).
  const bool started = *value != kAbsentBeat;
  // A process still setting up has no beats to be late by yet: the setup phase's allowance.
  const std::chrono::milliseconds beat_bound = started && token.phase != Phase::kSetup
                                                   ? beat_allowance(token.beat_gap_ms, hang_detect_)
                                                   : phase_allowance(Phase::kSetup, hang_detect_);
  if (now - s.beat_since >= beat_bound) {  // the process stopped or died
    s.verdict =
        "beat still for " +
        std::to_string(
            std::chrono::duration_cast<std::chrono::milliseconds>(now - s.beat_since).count()) +
        " ms";
    return true;
  }
  // How long progress has stood still: by the worker's own clock where its token says (a watcher
  // or a beat running late on a loaded host stretches nothing), else for as long as beats kept
  // saying so, from when it was last seen to move to when the latest beat was first seen (not to
  // now: a late beat says nothing new of the progress; the beat's allowance above bounds it).
  const Clock::duration confirmed =
      token.still_ms ? Clock::duration(std::chrono::milliseconds(*token.still_ms))
                     : s.beat_since - s.moving_since;
  // A long phase's allowance for a starved thread, or one not yet started.
  const Phase allowed = token.starved || !started ? Phase::kSetup : token.phase;
  if (token.waiting || confirmed < phase_allowance(allowed, hang_detect_)) return false;
  s.verdict = describe_stillness(token);
  return true;
}

}  // namespace ntp::elastic
