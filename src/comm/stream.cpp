#include "comm/stream.h"

#include <condition_variable>
#include <map>
#include <mutex>
#include <stdexcept>

#include "comm/store.h"

namespace ntp::comm {
namespace {

using Clock = std::chrono::steady_clock;
constexpr std::chrono::milliseconds kPoll{5};
// How long an event number may stand without its value before a reader skips it.
constexpr std::chrono::seconds kLostEventAfter{1};

std::string length_key(const std::string& stream) { return stream + "/n"; }
std::string event_key(const std::string& stream, std::int64_t i) {
  return stream + "/" + std::to_string(i);
}

std::int64_t number_or_zero(const std::string& text) {
  try {
    return text.empty() ? 0 : std::stoll(text);
  } catch (const std::exception&) {
    return 0;
  }
}

class PollingReader final : public StreamReader {
 public:
  explicit PollingReader(Store& store) : store_(store) {}

  Result<std::vector<StreamEvent>> read(std::vector<StreamCursor>& cursors,
                                        std::chrono::milliseconds block) override {
    const Clock::time_point deadline = Clock::now() + block;
    for (;;) {
      std::vector<StreamEvent> events;
      for (std::size_t s = 0; s < cursors.size(); ++s) {
        NTP_RETURN_IF_ERROR(collect(s, cursors[s], events));
      }
      std::unique_lock lock(mutex_);
      if (!events.empty() || woken_ || Clock::now() >= deadline) {
        woken_ = false;
        return events;
      }
      wake_.wait_for(lock, std::min<Clock::duration>(kPoll, deadline - Clock::now()),
                     [this] { return woken_; });
    }
  }

  void wake() override {
    {
      std::lock_guard lock(mutex_);
      woken_ = true;
    }
    wake_.notify_all();
  }

 private:
  // Appends the events of cursor `s` that are there, moving its position past them.
  Status collect(std::size_t s, StreamCursor& cursor, std::vector<StreamEvent>& events) {
    Result<std::string> length = store_.get(length_key(cursor.stream));
    if (!length.ok() && length.status().code() != StatusCode::kNotFound) return length.status();
    const std::int64_t n = length.ok() ? number_or_zero(*length) : 0;
    std::int64_t at = number_or_zero(cursor.position);
    while (at < n) {
      Result<std::string> value = store_.get(event_key(cursor.stream, at + 1));
      if (value.ok()) {
        events.push_back({s, *value});
      } else if (value.status().code() != StatusCode::kNotFound) {
        return value.status();
      } else if (!lost_for_long(cursor.stream, at + 1)) {
        break;  // being written: wait for it, to keep the order
      }
      ++at;
    }
    cursor.position = std::to_string(at);
    return ok_status();
  }

  bool lost_for_long(const std::string& stream, std::int64_t i) {
    const auto [it, fresh] = missing_since_.try_emplace(event_key(stream, i), Clock::now());
    return !fresh && Clock::now() - it->second >= kLostEventAfter;
  }

  Store& store_;
  std::map<std::string, Clock::time_point> missing_since_;  // the reading thread's only
  std::mutex mutex_;
  std::condition_variable wake_;
  bool woken_ = false;
};

}  // namespace

Status append_by_keys(Store& store, const std::string& stream, const std::string& value) {
  NTP_ASSIGN_OR_RETURN(std::int64_t i, store.add(length_key(stream), 1));
  return store.set(event_key(stream, i), value);
}

Status erase_by_keys(Store& store, const std::vector<std::string>& streams) {
  std::vector<std::string> lengths;
  for (const std::string& stream : streams) lengths.push_back(length_key(stream));
  NTP_ASSIGN_OR_RETURN(std::vector<std::optional<std::string>> counts, store.get_many(lengths));
  std::vector<std::string> keys;
  for (size_t s = 0; s < streams.size(); ++s) {
    const std::int64_t n = counts[s] ? number_or_zero(*counts[s]) : 0;
    for (std::int64_t i = 1; i <= n; ++i) keys.push_back(event_key(streams[s], i));
  }
  // The length last: were the erase cut short, what is left is still found by a later one.
  NTP_RETURN_IF_ERROR(store.erase(keys));
  return store.erase(lengths);
}

std::unique_ptr<StreamReader> open_polling_reader(Store& store) {
  return std::make_unique<PollingReader>(store);
}

}  // namespace ntp::comm
