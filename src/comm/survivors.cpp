#include "comm/survivors.h"

#include <algorithm>
#include <map>
#include <random>
#include <sstream>

namespace ntp::comm {
namespace {

std::string epoch_key(const std::string& group, int epoch, const std::string& what) {
  return "members/" + group + "/e" + std::to_string(epoch) + "/" + what;
}

std::string encode(const std::vector<int>& ids) {
  std::string out;
  for (int id : ids) out += (out.empty() ? "" : ",") + std::to_string(id);
  return out;
}

Result<std::vector<int>> decode(const std::string& text) {
  std::vector<int> ids;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    try {
      ids.push_back(std::stoi(item));
    } catch (const std::exception&) {
      return internal_error("corrupt member list '" + text + "'");
    }
  }
  return ids;
}

// The decider's loop: returns the ids that announced, once every other candidate is dead
// (heartbeat stale, or known_dead) or the window is over.
Result<std::vector<int>> decide(Store& store, const std::string& group, int epoch,
                                const std::vector<int>& candidates,
                                const AgreementOptions& options) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  struct Beat {
    std::string value;
    Clock::time_point since;
  };
  std::map<int, Beat> beats;
  for (;;) {
    std::vector<int> announced;
    bool undecided = false;
    const auto now = Clock::now();
    for (int id : candidates) {
      NTP_ASSIGN_OR_RETURN(bool here,
                           store.exists(epoch_key(group, epoch, "alive/" + std::to_string(id))));
      if (here) {
        announced.push_back(id);
        continue;
      }
      if (options.known_dead && options.known_dead(id)) continue;
      if (options.stale_after.count() <= 0) {
        undecided = true;
        continue;
      }
      Result<std::string> beat = store.get(Heartbeat::key(group, id));
      const std::string value = beat.ok() ? *beat : std::string("absent");
      auto it = beats.find(id);
      if (it == beats.end() || it->second.value != value) {
        beats[id] = Beat{value, now};
        undecided = true;
      } else if (now - it->second.since < options.stale_after) {
        undecided = true;
      }
    }
    if (!undecided || now - start >= options.window) return announced;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

}  // namespace

Result<Membership> agree_on_survivors(Store& store, const std::string& group, int epoch, int my_id,
                                      const std::vector<int>& candidates,
                                      const AgreementOptions& options) {
  if (std::find(candidates.begin(), candidates.end(), my_id) == candidates.end()) {
    return invalid_argument("agree_on_survivors: id " + std::to_string(my_id) +
                            " is not among the candidates");
  }
  const std::string list_key = epoch_key(group, epoch, "list");
  NTP_ASSIGN_OR_RETURN(bool decided, store.exists(list_key));
  if (!decided) {
    NTP_RETURN_IF_ERROR(store.set(epoch_key(group, epoch, "alive/" + std::to_string(my_id)), "1"));
    NTP_ASSIGN_OR_RETURN(std::int64_t ticket, store.add(epoch_key(group, epoch, "claim"), 1));
    if (ticket == 1) {
      NTP_ASSIGN_OR_RETURN(std::vector<int> members,
                           decide(store, group, epoch, candidates, options));
      std::sort(members.begin(), members.end());
      NTP_RETURN_IF_ERROR(store.set(list_key, encode(members)));
    }
  }
  const auto margin = options.window + options.stale_after + std::chrono::milliseconds(2000);
  Status waited = store.wait({list_key}, margin);
  if (!waited.ok()) {
    return unavailable("no member list for group '" + group + "' epoch " + std::to_string(epoch) +
                       " (the deciding process may have died): retry with epoch " +
                       std::to_string(epoch + 1));
  }
  NTP_ASSIGN_OR_RETURN(std::string text, store.get(list_key));
  NTP_ASSIGN_OR_RETURN(std::vector<int> members, decode(text));
  const auto it = std::find(members.begin(), members.end(), my_id);
  if (it == members.end()) {
    return Status(StatusCode::kAborted, "id " + std::to_string(my_id) +
                                            " arrived too late for group '" + group + "' epoch " +
                                            std::to_string(epoch));
  }
  Membership membership;
  membership.epoch = epoch;
  membership.new_rank = static_cast<int>(it - members.begin());
  membership.members = std::move(members);
  return membership;
}

std::string Heartbeat::key(const std::string& group, int id) {
  return "hb/" + group + "/" + std::to_string(id);
}

Heartbeat::Heartbeat(std::shared_ptr<Store> store, const std::string& group, int id,
                     std::chrono::milliseconds interval, std::function<std::string()> payload)
    : store_(std::move(store)),
      key_(key(group, id)),
      interval_(interval),
      payload_(std::move(payload)) {
  thread_ = std::thread([this] {
    // A plain set of a counter (not add): no lock to wait for behind other processes' beats, so a
    // busy store cannot make a live process look still. A missed beat only makes it look slower.
    // The values are this process's own (a random prefix), so a replacement never repeats a value
    // its predecessor was last seen with.
    const std::string self = std::to_string(std::random_device{}()) + ".";
    std::unique_lock<std::mutex> lock(mutex_);
    for (std::int64_t beat = 1; !stop_; ++beat) {
      beat_now_ = false;
      lock.unlock();
      std::string value = self + std::to_string(beat);
      if (payload_) value += "|" + payload_();
      (void)store_->set(key_, value);
      lock.lock();
      wake_.wait_for(lock, interval_, [this] { return stop_ || beat_now_; });
    }
  });
}

void Heartbeat::beat_now() {
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    beat_now_ = true;
  }
  wake_.notify_one();
}

Heartbeat::~Heartbeat() {
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_one();
  thread_.join();
}

}  // namespace ntp::comm
