// The simulator's clock and agenda: single-threaded, virtual time, events in (time, order of
// scheduling), so that a run is a function of its inputs and its seed.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "elastic/io.h"

namespace ntp::elastic::sim {

using Duration = std::chrono::nanoseconds;

class EventLoop {
 public:
  Time now() const { return now_; }
  // Runs `event` at `when` (not before now).
  void at(Time when, std::function<void()> event) {
    std::uint32_t slot;
    if (free_.empty()) {
      slot = static_cast<std::uint32_t>(events_.size());
      events_.push_back(std::move(event));
    } else {
      slot = free_.back();
      free_.pop_back();
      events_[slot] = std::move(event);
    }
    agenda_.push_back(Entry{when < now_ ? now_ : when, next_order_++, slot});
    std::push_heap(agenda_.begin(), agenda_.end(), Later{});
  }
  void after(Duration delay, std::function<void()> event) { at(now_ + delay, std::move(event)); }
  // Runs events in order until none is left, the next is after `end`, or `stop()` returns true
  // (asked after each event). Returns the count of events run.
  template <typename Stop>
  std::int64_t run_until(Time end, Stop&& stop) {
    std::int64_t ran = 0;
    while (!agenda_.empty() && agenda_.front().when <= end) {
      std::pop_heap(agenda_.begin(), agenda_.end(), Later{});
      const Entry e = agenda_.back();
      agenda_.pop_back();
      now_ = e.when;
      std::function<void()> event = std::move(events_[e.slot]);
      free_.push_back(e.slot);
      event();
      ++ran;
      if (stop()) break;
    }
    return ran;
  }

 private:
  // The agenda holds small entries (a heap of them moves often); the events wait in a slab.
  struct Entry {
    Time when;
    std::uint64_t order;
    std::uint32_t slot;  // in events_
  };
  // A heap whose front is the earliest entry (then the first scheduled).
  struct Later {
    bool operator()(const Entry& a, const Entry& b) const {
      return a.when != b.when ? a.when > b.when : a.order > b.order;
    }
  };
  std::vector<Entry> agenda_;
  std::vector<std::function<void()>> events_;
  std::vector<std::uint32_t> free_;
  Time now_{};
  std::uint64_t next_order_ = 0;
};

}  // namespace ntp::elastic::sim
