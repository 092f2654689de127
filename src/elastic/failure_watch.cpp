#include "elastic/failure_watch.h"

#include <algorithm>

#include "comm/exit_notice.h"
#include "comm/survivors.h"
#include "elastic/agreement.h"

namespace ntp::elastic {
namespace {

using Clock = std::chrono::steady_clock;

// How long one read of the event streams blocks when nothing happens: a wake (arm, stop) or a
// notice ends it sooner, so this only sets the idle cost (0.5 reads a second).
constexpr std::chrono::milliseconds kNoticeBlock{2000};

// The members next to `me` in the ring of `members` (none when alone).
std::vector<int> ring_neighbours(const std::vector<int>& members, int me) {
  const auto n = static_cast<long>(members.size());
  const auto it = std::find(members.begin(), members.end(), me);
  if (n < 2 || it == members.end()) return {};
  const long i = it - members.begin();
  std::vector<int> out{members[static_cast<size_t>((i + 1) % n)]};
  if (n > 2) out.push_back(members[static_cast<size_t>((i + n - 1) % n)]);
  return out;
}

}  // namespace

FailureWatch::FailureWatch(std::shared_ptr<comm::Store> store, std::chrono::milliseconds poll,
                           std::chrono::milliseconds hang_detect, const Progress* own_progress,
                           std::function<void()> on_fenced)
    : store_(std::move(store)),
      reader_(store_->open_reader()),
      poll_(poll),
      hang_detect_(hang_detect),
      own_progress_(own_progress),
      on_fenced_(std::move(on_fenced)),
      stillness_(hang_detect) {
  notices_ = std::thread([this] { notice_thread(); });
  liveness_ = std::thread([this] { liveness_thread(); });
}

FailureWatch::~FailureWatch() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
    armed_ = false;
  }
  wake_.notify_all();
  reader_->wake();
  notices_.join();
  liveness_.join();
}

void FailureWatch::arm(WatchedEpoch epoch) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    current_ = std::move(epoch);
    armed_ = true;
    fired_ = false;
    ++generation_;
  }
  wake_.notify_all();
  reader_->wake();  // a read blocked for the last epoch looks at this one now
}

void FailureWatch::disarm() {
  std::lock_guard<std::mutex> lock(mutex_);
  armed_ = false;
  ++generation_;
}

bool FailureWatch::wait_armed(std::unique_lock<std::mutex>& lock, WatchedEpoch& e,
                              std::uint64_t& generation) {
  wake_.wait(lock, [this] { return stop_ || armed_; });
  if (stop_) return false;
  e = current_;  // a copy: the store is read without the lock
  generation = generation_;
  return true;
}

void FailureWatch::fire(std::uint64_t generation, const std::string& reason) {
  if (reason.empty()) return;
  std::lock_guard<std::mutex> lock(mutex_);
  if (generation != generation_ || !armed_ || fired_) return;
  fired_ = true;
  if (current_.abort) current_.abort(reason);  // under the lock: disarm waits for it
}

void FailureWatch::notice_thread() {
  std::unique_lock<std::mutex> lock(mutex_);
  WatchedEpoch e;
  std::uint64_t generation = 0, looked = 0;
  while (wait_armed(lock, e, generation)) {
    lock.unlock();
    if (cursors_.size() != 2 || cursors_[1].stream != job_events(e.group)) {
      cursors_ = {{comm::kLaunchEvents, ""}, {job_events(e.group), ""}};  // from their start
      failed_epochs_.clear();
      join_notices_ = 0;
    }
    std::string reason;
    if (generation != looked) {  // a new epoch: what arrived before it counts too
      looked = generation;
      reason = known_notice(e);
    }
    if (reason.empty()) {
      Result<std::vector<comm::StreamEvent>> events = reader_->read(cursors_, kNoticeBlock);
      if (events.ok()) {
        for (const comm::StreamEvent& event : *events) remember(event);
        reason = known_notice(e);
      } else {
        std::this_thread::sleep_for(poll_);  // the store is away: look again shortly
      }
    }
    fire(generation, reason);  // a no-op once this epoch fired
    lock.lock();
  }
}

void FailureWatch::remember(const comm::StreamEvent& event) {
  if (event.stream == 0) {
    if (std::optional<comm::ExitEvent> exit = comm::parse_exit_event(event.value)) {
      exited_[exit->rank].insert(exit->who);
    }
  } else if (std::optional<int> epoch = parse_failure_event(event.value)) {
    failed_epochs_.insert(*epoch);
  } else if (is_join_event(event.value)) {
    ++join_notices_;
  }
}

std::string FailureWatch::known_notice(const WatchedEpoch& e) const {
  if (failed_epochs_.count(e.epoch) > 0) {
    return "a member's step failed (epoch " + std::to_string(e.epoch) + ")";
  }
  for (int id : e.members) {
    const auto it = exited_.find(id);
    if (id != e.me && it != exited_.end() &&
        it->second.count(e.incarnations[static_cast<size_t>(id)]) > 0) {
      return "the launcher reported rank " + std::to_string(id) + " gone";
    }
  }
  return "";
}

void FailureWatch::liveness_thread() {
  std::unique_lock<std::mutex> lock(mutex_);
  WatchedEpoch e;
  std::uint64_t generation = 0;
  while (wait_armed(lock, e, generation)) {
    lock.unlock();
    if (generation != looked_generation_) {  // a new epoch: every neighbour's stillness afresh
      looked_generation_ = generation;
      stillness_.clear();
    }
    bool fenced = false;
    const std::optional<int> still = look_at_neighbours(e, &fenced);
    if (still) {
      // Fired before the notice goes out: this watch's abort names the hung neighbour, not the
      // notice that its own notice thread would read back.
      (void)store_->set(silent_key(e.group, *still), stillness_.last_value(*still));
      fire(generation, "rank " + std::to_string(*still) + " made no progress");
      (void)post_failure_notice(*store_, e.group, e.epoch);
    }
    lock.lock();
    // Also after firing: a worker whose training thread is stuck never disarms.
    if (fenced && on_fenced_) on_fenced_();
    wake_.wait_for(lock, poll_, [this] { return stop_; });
  }
}

std::optional<int> FailureWatch::look_at_neighbours(const WatchedEpoch& e, bool* fenced) {
  const std::vector<int> neighbours =
      hang_detect_.count() > 0 ? ring_neighbours(e.members, e.me) : std::vector<int>();
  std::vector<std::string> keys;
  for (int id : neighbours) keys.push_back(comm::Heartbeat::key(e.group, id));
  if (own_progress_ != nullptr) keys.push_back(silent_key(e.group, e.me));
  if (keys.empty()) return std::nullopt;
  const auto asked = Clock::now();
  Result<std::vector<std::optional<std::string>>> values = store_->get_many(keys);
  const auto now = Clock::now();
  // A look that took longer than a beat's period tells nothing of the neighbours: the store is
  // saturated, their beats may be queued behind it, and a slow store must not convict anyone.
  const bool fresh = values.ok() && now - asked <= poll_;
  if (own_progress_ != nullptr && values.ok() && values->back()) {
    const std::string mine = own_progress_->token();
    *fenced = parse_progress(*values->back()).moving == mine.substr(0, mine.find(':'));
  }
  for (size_t i = 0; i < neighbours.size(); ++i) {
    const int id = neighbours[i];
    // A store that did not answer (in time) tells nothing of the neighbour: its stillness starts
    // over.
    std::optional<std::string> value;
    if (fresh) value = (*values)[i] ? *(*values)[i] : std::string("absent");
    if (stillness_.still(id, value, now)) return id;
  }
  return std::nullopt;
}

}  // namespace ntp::elastic
