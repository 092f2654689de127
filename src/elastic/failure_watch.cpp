#include "elastic/failure_watch.h"

#include <algorithm>

#include "comm/exit_notice.h"
#include "comm/survivors.h"
#include "elastic/agreement.h"

namespace ntp::elastic {
namespace {

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

constexpr int kSelfCheckEvery = 25;  // polls (0.5 s at the trainer's 20 ms)

}  // namespace

FailureWatch::FailureWatch(std::shared_ptr<comm::Store> store, std::chrono::milliseconds poll,
                           std::chrono::milliseconds hang_detect, const Progress* own_progress,
                           std::function<void()> on_fenced)
    : store_(std::move(store)),
      poll_(poll),
      hang_detect_(hang_detect),
      own_progress_(own_progress),
      on_fenced_(std::move(on_fenced)),
      stillness_(hang_detect) {
  thread_ = std::thread([this] { run(); });
}

FailureWatch::~FailureWatch() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
    armed_ = false;
  }
  wake_.notify_all();
  thread_.join();
}

void FailureWatch::arm(WatchedEpoch epoch) {
  std::lock_guard<std::mutex> lock(mutex_);
  current_ = std::move(epoch);
  armed_ = true;
  fired_ = false;
  ++generation_;
}

void FailureWatch::disarm() {
  std::lock_guard<std::mutex> lock(mutex_);
  armed_ = false;
  ++generation_;
}

void FailureWatch::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_) {
    if (armed_) {
      const WatchedEpoch e = current_;  // a copy: the store is read without the lock
      const std::uint64_t generation = generation_;
      const bool fired = fired_;
      lock.unlock();
      if (generation != checked_generation_) {  // a new epoch: look at everything afresh
        checked_generation_ = generation;
        exits_seen_ = -1;  // every member's exit notice once: one may have died while rebuilding
        stillness_.clear();
      }
      const std::string reason = fired ? std::string() : check(e);
      // Also after firing: a worker whose training thread is stuck never disarms.
      const bool fenced = ++polls_ % kSelfCheckEvery == 0 && fenced_while_stuck(e);
      lock.lock();
      if (generation == generation_ && armed_ && !fired_ && !reason.empty()) {
        fired_ = true;
        if (current_.abort) current_.abort(reason);  // under the lock: disarm waits for it
      }
      if (fenced && on_fenced_) on_fenced_();
    }
    wake_.wait_for(lock, poll_, [this] { return stop_; });
  }
}

std::string FailureWatch::check(const WatchedEpoch& e) {
  if (Result<bool> failed = store_->exists(fail_key(e.group, e.epoch)); failed.ok() && *failed) {
    return "a member's step failed (epoch " + std::to_string(e.epoch) + ")";
  }
  const std::int64_t exits = comm::exit_notice_count(*store_);
  if (exits != exits_seen_) {
    exits_seen_ = exits;
    for (int id : e.members) {
      if (id != e.me && comm::has_exited(*store_, id, e.incarnations[static_cast<size_t>(id)])) {
        return "the launcher reported rank " + std::to_string(id) + " gone";
      }
    }
  }
  if (hang_detect_.count() <= 0) return "";
  const auto now = std::chrono::steady_clock::now();
  for (int id : ring_neighbours(e.members, e.me)) {
    Result<std::string> beat = store_->get(comm::Heartbeat::key(e.group, id));
    std::optional<std::string> value;
    if (beat.ok()) value = *beat;
    if (!beat.ok() && beat.status().code() == StatusCode::kNotFound) value = "absent";
    // A store that did not answer tells nothing of the neighbour: its stillness starts over.
    if (stillness_.still(id, value, now)) {
      (void)store_->set(silent_key(e.group, id), stillness_.last_value(id));
      (void)store_->set(fail_key(e.group, e.epoch), "1");
      return "rank " + std::to_string(id) + " made no progress";
    }
  }
  return "";
}

bool FailureWatch::fenced_while_stuck(const WatchedEpoch& e) {
  if (own_progress_ == nullptr) return false;
  Result<std::string> seen = store_->get(silent_key(e.group, e.me));
  if (!seen.ok()) return false;
  const std::string mine = own_progress_->token();
  return parse_progress(*seen).moving == mine.substr(0, mine.find(':'));
}

}  // namespace ntp::elastic
