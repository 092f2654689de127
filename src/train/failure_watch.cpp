#include "train/failure_watch.h"

#include <algorithm>

#include "comm/exit_notice.h"
#include "comm/survivors.h"

namespace ntp::train {
namespace {

std::string fail_key(const std::string& group, int epoch) {
  return group + "/fail/" + std::to_string(epoch);
}

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

std::string silent_key(const std::string& group, int id) {
  return group + "/silent/" + std::to_string(id);
}

}  // namespace

bool FailureWatch::still_silent(comm::Store& store, const std::string& group, int id) {
  Result<std::string> seen = store.get(silent_key(group, id));
  if (!seen.ok()) return false;
  Result<std::string> now = store.get(comm::Heartbeat::key(group, id));
  return now.ok() && *now == *seen;
}

FailureWatch::FailureWatch(std::shared_ptr<comm::Store> store, std::chrono::milliseconds poll,
                           std::chrono::milliseconds stale_after)
    : store_(std::move(store)), poll_(poll), stale_after_(stale_after) {
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
  exits_seen_ = -1;  // look at every member's exit notice once: one may have died while rebuilding
  beats_.clear();
}

void FailureWatch::disarm() {
  std::lock_guard<std::mutex> lock(mutex_);
  armed_ = false;
}

void FailureWatch::report_failure(const std::string& group, int epoch) {
  (void)store_->set(fail_key(group, epoch), "1");
}

void FailureWatch::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_) {
    if (armed_ && !fired_) check_locked();
    wake_.wait_for(lock, poll_, [this] { return stop_; });
  }
}

void FailureWatch::check_locked() {
  const WatchedEpoch& e = current_;
  if (Result<bool> failed = store_->exists(fail_key(e.group, e.epoch)); failed.ok() && *failed) {
    return fire_locked("a member's step failed (epoch " + std::to_string(e.epoch) + ")");
  }
  const std::int64_t exits = comm::exit_notice_count(*store_);
  if (exits != exits_seen_) {
    exits_seen_ = exits;
    for (int id : e.members) {
      if (id != e.me && comm::has_exited(*store_, id, e.incarnation(id))) {
        return fire_locked("the launcher reported rank " + std::to_string(id) + " gone");
      }
    }
  }
  if (stale_after_.count() <= 0) return;
  const auto now = std::chrono::steady_clock::now();
  for (int id : ring_neighbours(e.members, e.me)) {
    Result<std::string> beat = store_->get(comm::Heartbeat::key(e.group, id));
    auto it = beats_.find(id);
    if (!beat.ok() && beat.status().code() != StatusCode::kNotFound) {
      // The store did not answer: nothing is known of the neighbour, so its silence starts over.
      if (it != beats_.end()) it->second.since = now;
      continue;
    }
    const std::string value = beat.ok() ? *beat : std::string("absent");
    if (it == beats_.end() || it->second.value != value) {
      beats_[id] = Beat{value, now};
    } else if (now - it->second.since >= stale_after_) {
      (void)store_->set(silent_key(e.group, id), value);
      (void)store_->set(fail_key(e.group, e.epoch), "1");
      return fire_locked("rank " + std::to_string(id) + "'s heartbeat stopped");
    }
  }
}

void FailureWatch::fire_locked(const std::string& reason) {
  fired_ = true;
  if (current_.abort) current_.abort(reason);
}

}  // namespace ntp::train
