// The simulator's clock and agenda: single-threaded, virtual time, events in (time, order of
// scheduling), so that a run is a function of its inputs and its seed.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "core/check.h"
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
    NTP_CHECK_MSG(next_order_ != UINT32_MAX, "the simulator's agenda ran out of event numbers");
    push(Entry{(when < now_ ? now_ : when).time_since_epoch().count(), next_order_++, slot});
  }
  void after(Duration delay, std::function<void()> event) { at(now_ + delay, std::move(event)); }
  // Runs events in order until none is left, the next is after `end`, or `stop()` returns true
  // (asked after each event). Returns the count of events run.
  template <typename Stop>
  std::int64_t run_until(Time end, Stop&& stop) {
    std::int64_t ran = 0;
    while (!agenda_.empty() && agenda_.front().when <= end.time_since_epoch().count()) {
      const Entry e = pop();
      now_ = Time(Time::duration(e.when));
      std::function<void()> event = std::move(events_[e.slot]);
      free_.push_back(e.slot);
      event();
      ++ran;
      if (stop()) break;
    }
    return ran;
  }

 private:
  // The agenda is a 4-ary heap of 16-byte entries, the earliest (then the first scheduled) at
  // the front: a node's four children fill one 64-byte cache line, and the heap is half as deep
  // as a binary one. At 100K GPUs it holds a few hundred thousand entries, past the L2 cache; with
  // a binary heap of 24-byte entries the run loop's own time was 13% of a 16,416-GPU profile,
  // most of it on the heap's compares (cache misses). The events themselves wait in a slab, so
  // that the heap moves only small entries.
  struct Entry {
    Time::rep when;
    std::uint32_t order;
    std::uint32_t slot;  // in events_
  };
  static_assert(sizeof(Entry) == 16);
  static constexpr std::size_t kArity = 4;
  static bool earlier(const Entry& a, const Entry& b) {
    return a.when != b.when ? a.when < b.when : a.order < b.order;
  }
  void push(Entry e) {
    std::size_t i = agenda_.size();
    agenda_.push_back(e);
    while (i > 0) {
      const std::size_t parent = (i - 1) / kArity;
      if (!earlier(e, agenda_[parent])) break;
      agenda_[i] = agenda_[parent];
      i = parent;
    }
    agenda_[i] = e;
  }
  Entry pop() {
    const Entry top = agenda_.front();
    const Entry last = agenda_.back();
    agenda_.pop_back();
    const std::size_t n = agenda_.size();
    std::size_t i = 0;
    while (n > 0) {
      const std::size_t first = kArity * i + 1;
      if (first >= n) break;
      std::size_t best = first;
      const std::size_t end = std::min(first + kArity, n);
      for (std::size_t c = first + 1; c < end; ++c) {
        if (earlier(agenda_[c], agenda_[best])) best = c;
      }
      if (!earlier(agenda_[best], last)) break;
      agenda_[i] = agenda_[best];
      i = best;
    }
    if (n > 0) agenda_[i] = last;
    return top;
  }
  std::vector<Entry> agenda_;
  std::vector<std::function<void()>> events_;
  std::vector<std::uint32_t> free_;
  Time now_{};
  std::uint32_t next_order_ = 0;
};

}  // namespace ntp::elastic::sim
