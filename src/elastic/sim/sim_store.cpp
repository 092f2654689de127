#include "elastic/sim/sim_store.h"

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <type_traits>

namespace ntp::elastic::sim {
namespace {

std::size_t extra_keys(const io::Op& op) {
  return std::visit(
      [](const auto& o) -> std::size_t {
        using T = std::decay_t<decltype(o)>;
        std::size_t n = 0;
        if constexpr (std::is_same_v<T, io::GetMany> || std::is_same_v<T, io::Erase>) {
          n = o.keys.size();
        } else if constexpr (std::is_same_v<T, io::SetMany>) {
          n = o.entries.size();
        } else if constexpr (std::is_same_v<T, io::ReadStreams>) {
          n = o.cursors.size();
        } else if constexpr (std::is_same_v<T, io::EraseStreams>) {
          n = o.streams.size();
        }
        return n > 1 ? n - 1 : 0;
      },
      op);
}

std::size_t position(const std::string& cursor) {
  return cursor.empty() ? 0 : static_cast<std::size_t>(std::strtoull(cursor.c_str(), nullptr, 10));
}

}  // namespace

Duration SimStore::service_time(const io::Op& op) const {
  const double ops = 1.0 + model_.per_extra_key * static_cast<double>(extra_keys(op));
  return Duration(static_cast<std::int64_t>(1e9 * ops / model_.ops_per_s));
}

const std::string* SimStore::value(const std::string& key) const {
  const auto it = keys_.find(key);
  return it == keys_.end() ? nullptr : &it->second;
}

void SimStore::submit(io::Op op, std::function<void(io::Reply)> done, const void* reader) {
  if (const auto* sleep = std::get_if<io::Sleep>(&op)) {
    loop_.after(sleep->duration, [this, done = std::move(done)] {
      io::Reply r;
      r.now = loop_.now();
      done(std::move(r));
    });
    return;
  }
  // Half a round trip to the server, then the queue: the server takes ops in arrival order.
  // Every op travels the same half round trip, so ops arrive in the order they are sent, and the
  // op's place in the queue is known now: one event (its service's end), not two.
  const Time arrival = loop_.now() + model_.round_trip / 2;
  const Duration service = service_time(op);
  queue_service(arrival, service,
                [this, op = std::move(op), done = std::move(done), reader]() mutable {
                  ++counts_.ops;
                  ++ops_by_index_[op.index()];
                  serve(std::move(op), std::move(done), reader);
                });
}

void SimStore::queue_service(Time arrival, Duration service, std::function<void()> served) {
  while (!finishing_.empty() && finishing_.front() <= arrival) finishing_.pop_front();
  free_at_ = std::max(arrival, free_at_) + service;
  finishing_.push_back(free_at_);
  counts_.peak_queue = std::max(counts_.peak_queue, static_cast<std::int64_t>(finishing_.size()));
  loop_.at(free_at_, std::move(served));
}

void SimStore::answer_empty(Waiter& w) {
  if (w.answered) return;
  w.answered = true;
  if (w.reader != nullptr) blocked_by_reader_.erase(w.reader);
  io::Reply empty;
  empty.cursors = w.read.cursors;
  reply(std::move(empty), std::move(w.done));  // answered once
}

void SimStore::wake(const void* reader) {
  const auto it = blocked_by_reader_.find(reader);
  if (it == blocked_by_reader_.end()) {
    woken_[reader] = true;
    return;
  }
  const std::shared_ptr<Waiter> w = it->second;
  answer_empty(*w);
}

StoreCounts SimStore::counts() const {
  StoreCounts out = counts_;
  for (std::size_t i = 0; i < ops_by_index_.size(); ++i) {
    if (ops_by_index_[i] == 0) continue;
    // io::name of an op of the variant's i-th kind
    const char* kind = "";
    [&]<std::size_t... k>(std::index_sequence<k...>) {
      ((i == k ? (kind = io::name(io::Op(std::in_place_index<k>))) : kind), ...);
    }
    (std::make_index_sequence<std::variant_size_v<io::Op>>{});
    out.by_kind[kind] = ops_by_index_[i];
  }
  return out;
}

void SimStore::reply(io::Reply r, std::function<void(io::Reply)> done) {
  loop_.after(model_.round_trip / 2, [this, r = std::move(r), done = std::move(done)]() mutable {
    r.now = loop_.now();
    done(std::move(r));
  });
}

io::Reply SimStore::read_now(const io::ReadStreams& read) const {
  io::Reply r;
  r.cursors = read.cursors;
  for (std::size_t s = 0; s < read.cursors.size(); ++s) {
    const auto it = streams_.find(read.cursors[s].stream);
    if (it == streams_.end()) continue;
    const std::size_t from = position(read.cursors[s].position);
    for (std::size_t i = from; i < it->second.size(); ++i) {
      r.events.push_back(comm::StreamEvent{s, it->second[i]});
    }
    if (it->second.size() > from) r.cursors[s].position = std::to_string(it->second.size());
  }
  return r;
}

void SimStore::wake_readers(const std::string& stream) {
  const auto it = blocked_.find(stream);
  if (it == blocked_.end()) return;
  std::vector<std::shared_ptr<Waiter>> waiters = std::move(it->second);
  blocked_.erase(it);
  for (const std::shared_ptr<Waiter>& w : waiters) {
    if (w->answered) continue;
    w->answered = true;
    if (w->reader != nullptr) blocked_by_reader_.erase(w->reader);
    if (!model_.woken_reads_cost_service) {
      reply(read_now(w->read), std::move(w->done));
      continue;
    }
    // In the queue like any op; not counted again in `ops` (one request of the client's).
    queue_service(loop_.now(), service_time(io::Op{w->read}),
                  [this, w] { reply(read_now(w->read), std::move(w->done)); });
  }
}

void SimStore::serve(io::Op op, std::function<void(io::Reply)> done, const void* reader) {
  io::Reply r;
  std::visit(
      [&](auto& o) {
        using T = std::decay_t<decltype(o)>;
        if constexpr (std::is_same_v<T, io::GetMany>) {
          for (const std::string& k : o.keys) {
            const auto it = keys_.find(k);
            r.values.push_back(it == keys_.end() ? std::nullopt
                                                 : std::optional<std::string>(it->second));
          }
        } else if constexpr (std::is_same_v<T, io::SetMany>) {
          for (auto& [k, v] : o.entries) {
            if (observer_) observer_(k, v);
            keys_[k] = std::move(v);
          }
        } else if constexpr (std::is_same_v<T, io::Add>) {
          std::string& v = keys_[o.key];
          r.number = (v.empty() ? 0 : std::atoll(v.c_str())) + o.delta;
          v = std::to_string(r.number);
        } else if constexpr (std::is_same_v<T, io::Claim>) {
          const auto [it, inserted] = keys_.try_emplace(o.key, o.value);
          if (inserted && observer_) observer_(o.key, o.value);
          r.number = it->second == o.value ? 1 : 0;
        } else if constexpr (std::is_same_v<T, io::Append>) {
          streams_[o.stream].push_back(std::move(o.value));
          wake_readers(o.stream);
        } else if constexpr (std::is_same_v<T, io::ReadStreams>) {
          r = read_now(o);
          const bool woken = reader != nullptr && woken_.erase(reader) > 0;
          if (r.events.empty() && o.block.count() > 0 && !woken) {  // wait at the server
            const Time deadline = loop_.now() + o.block;
            auto w = std::make_shared<Waiter>(
                Waiter{std::move(o), std::move(done), deadline, reader, false});
            for (const comm::StreamCursor& c : w->read.cursors) blocked_[c.stream].push_back(w);
            if (reader != nullptr) blocked_by_reader_[reader] = w;
            loop_.at(deadline, [this, w] { answer_empty(*w); });
            return;
          }
        } else if constexpr (std::is_same_v<T, io::Erase>) {
          for (const std::string& k : o.keys) keys_.erase(k);
        } else if constexpr (std::is_same_v<T, io::EraseStreams>) {
          for (const std::string& s : o.streams) streams_.erase(s);
        }
      },
      op);
  if (done) reply(std::move(r), std::move(done));
}

}  // namespace ntp::elastic::sim
