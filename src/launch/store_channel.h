// Store notices of `ntp launch` off its main loop: one thread of its own does every store call
// (exit notices, step resets and step reads, "left" and "finished" reports, probes), so that a
// store outage (redis down or cut off for 10-20 s, each call riding it out for outage_ms) never
// stops the launcher relaying output, reaping workers or injecting faults on time.
//
// Contracts:
// * Writes (post) run in the order posted, each once. Queries (ask, probe) return a future that
//   is ready once the call ran; the main loop polls it and never blocks on the store.
// * While step watching is on, the thread reads "launch/step/<rank>" of every watched rank every
//   20 ms (between queued calls); steps() returns the last values read. reset_step(rank) writes
//   "-1" and drops every reading of `rank` taken before it (generation numbers), so a fresh
//   worker is never judged by its predecessor's step.
// * The destructor drops writes not yet started and joins the thread: it can wait for the call
//   in flight, which the store bounds (outage_ms for redis).
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "comm/store.h"
#include "core/non_copyable.h"

namespace ntp::launch {

struct StepReading {
  long long step = -1;
  int generation = 0;  // reset_step calls for the rank applied before this reading
};

class StoreChannel : NonCopyable {
 public:
  // `spec`/`run_id`: how to open the store afresh after an outage (probe).
  StoreChannel(std::shared_ptr<comm::Store> store, std::string spec, std::string run_id,
               std::vector<int> ranks);
  ~StoreChannel();

  void post(std::function<void(comm::Store&)> write);

  template <class T>
  std::future<T> ask(std::function<T(comm::Store&)> query) {
    auto promise = std::make_shared<std::promise<T>>();
    std::future<T> answer = promise->get_future();
    enqueue([promise, query = std::move(query)](comm::Store& store) {
      promise->set_value(query(store));
    });
    return answer;
  }

  // One round trip; on failure the store is opened afresh (a connection broken by an outage may
  // not recover by itself) and tried once more. True when the store answered.
  std::future<bool> probe();

  void watch_steps(bool on);
  void reset_step(int rank);
  std::map<int, StepReading> steps() const;

 private:
  void enqueue(std::function<void(comm::Store&)> call);
  void serve();
  void read_steps();

  std::shared_ptr<comm::Store> store_;  // used by the thread only
  const std::string spec_;
  const std::string run_id_;
  const std::vector<int> ranks_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::function<void(comm::Store&)>> calls_;
  bool watching_ = false;
  bool closing_ = false;
  std::map<int, StepReading> readings_;
  std::map<int, int> generations_;  // reset_step calls applied, per rank (thread side)
  std::thread thread_;
};

// Whether `future` holds its value already (no wait).
template <class T>
bool is_ready(const std::future<T>& future) {
  return future.valid() && future.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
}

}  // namespace ntp::launch
