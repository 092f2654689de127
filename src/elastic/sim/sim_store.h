// A modeled store for the simulator: the keys, counters and event streams of comm::Store, served
// by one server with a FIFO queue, as one redis-server serves its clients. An op travels half a
// round trip to the server, waits for the server to be free, takes its service time, and its
// reply travels half a round trip back. A saturated store is therefore slow, as a real one is:
// the queue grows and every reply waits behind it. A blocking stream read that finds nothing
// waits at the server until an append to one of its streams (then answers) or its block passes.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "elastic/io.h"
#include "elastic/sim/event_loop.h"

namespace ntp::elastic::sim {

struct StoreModel {
  double ops_per_s = 100000;  // single-key operations the server completes a second
  Duration round_trip = std::chrono::microseconds(100);  // client -> server -> client, unloaded
  // Each key or entry of a multi-key op past the first costs this share of one op (a redis
  // MGET of k keys costs about 1 + 0.1 (k - 1) GETs when the values are small).
  double per_extra_key = 0.1;
  // A blocked read woken by an append is run again by the server (redis re-executes a blocked
  // XREAD when its stream grows): one service time each, in turn after the append. False: it is
  // answered at the append at no cost (the model before this was measured against redis; kept
  // for the regression tests whose interleavings were found with it).
  bool woken_reads_cost_service = true;
};

struct StoreCounts {
  std::int64_t ops = 0;         // ops served (a blocking read once, when it is served)
  std::int64_t peak_queue = 0;  // ops at the server (queued or in service), at most
  std::map<std::string, std::int64_t> by_kind;
};

class SimStore {
 public:
  SimStore(EventLoop& loop, StoreModel model) : loop_(loop), model_(model) {}

  // Performs `op` as a client's request sent now; `done` runs when the reply reaches the client
  // (reply.now set). Sleep ops are not sent: `done` runs after the sleep. `reader` names the
  // client's stream reader for wake().
  void submit(io::Op op, std::function<void(io::Reply)> done, const void* reader = nullptr);
  // comm::StreamReader::wake: `reader`'s blocked read answers now (empty), or, when none is
  // blocked at the server, its next one does.
  void wake(const void* reader);

  StoreCounts counts() const;
  // From now on the server completes `ops_per_s` single-key ops a second (a slowed store: a
  // busy host, a failing disk under AOF, a noisy neighbour). Ops already sent keep their time.
  void set_service_rate(double ops_per_s) { model_.ops_per_s = ops_per_s; }
  // Called with every key and value the server sets (SetMany), as it sets them.
  void observe_writes(std::function<void(const std::string&, const std::string&)> observer) {
    observer_ = std::move(observer);
  }
  // A key's value as the server holds it now (tests and invariants).
  const std::string* value(const std::string& key) const;

 private:
  struct Waiter {
    io::ReadStreams read;
    std::function<void(io::Reply)> done;
    Time deadline;
    const void* reader = nullptr;
    bool answered = false;
  };
  Duration service_time(const io::Op& op) const;
  void serve(io::Op op, std::function<void(io::Reply)> done, const void* reader);
  void answer_empty(Waiter& w);
  // The events after each cursor; the cursors moved past them.
  io::Reply read_now(const io::ReadStreams& read) const;
  void reply(io::Reply reply, std::function<void(io::Reply)> done);
  void wake_readers(const std::string& stream);
  // Queues `service` of the server's time for work arriving at `arrival`, behind all work taken
  // so far (its place is fixed when it is queued), and runs `served` when it ends.
  void queue_service(Time arrival, Duration service, std::function<void()> served);

  EventLoop& loop_;
  StoreModel model_;
  StoreCounts counts_;  // by_kind filled by counts() from ops_by_index_
  std::array<std::int64_t, std::variant_size_v<io::Op>> ops_by_index_{};
  std::function<void(const std::string&, const std::string&)> observer_;
  Time free_at_{};  // when the server finishes what it has taken
  // When each op at the server (arrived or on its way, in arrival order) finishes: the queue.
  std::deque<Time> finishing_;
  std::unordered_map<std::string, std::string> keys_;
  std::unordered_map<std::string, std::vector<std::string>> streams_;
  // stream -> readers blocked on it (a reader of several streams is under each).
  std::unordered_map<std::string, std::vector<std::shared_ptr<Waiter>>> blocked_;
  std::unordered_map<const void*, std::shared_ptr<Waiter>> blocked_by_reader_;
  std::unordered_map<const void*, bool> woken_;  // a wake() that found no blocked read
};

}  // namespace ntp::elastic::sim
