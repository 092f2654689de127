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
    agenda_.push_back(Entry{when < now_ ? now_ : when, next_order_++, std::move(event)});
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
      Entry e = std::move(agenda_.back());
      agenda_.pop_back();
      now_ = e.when;
      e.event();
      ++ran;
      if (stop()) break;
    }
    return ran;
  }

 private:
  struct Entry {
    Time when;
    std::uint64_t order;
    std::function<void()> event;
  };
  // A heap whose front is the earliest entry (then the first scheduled).
  struct Later {
    bool operator()(const Entry& a, const Entry& b) const {
      return a.when != b.when ? a.when > b.when : a.order > b.order;
    }
  };
  std::vector<Entry> agenda_;
  Time now_{};
  std::uint64_t next_order_ = 0;
};

}  // namespace ntp::elastic::sim
