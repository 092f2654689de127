// The I/O vocabulary of the recovery protocol's machines (elastic/task.h): what a machine asks its
// driver to do, and the reply it gets back. The machines never touch a store, a socket or a clock;
// a driver performs each op and hands back its reply with the time it arrived. Two drivers exist:
// the runtime's (elastic/store_driver.h: a comm::Store and the wall clock) and the simulator's
// (elastic/sim/: a modeled store and virtual time). One protocol, two drivers.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "comm/stream.h"
#include "core/status.h"

namespace ntp::elastic {

// A point in time as the driver keeps it: the wall clock's steady time in the runtime, virtual
// time in the simulator (its origin is the simulation's start).
using Clock = std::chrono::steady_clock;
using Time = Clock::time_point;

namespace io {

// comm::Store::get_many: one round trip, reply.values[i] for keys[i] (nullopt: absent).
struct GetMany {
  std::vector<std::string> keys;
};
// comm::Store::set_many.
struct SetMany {
  std::vector<std::pair<std::string, std::string>> entries;
};
// comm::Store::add: reply.number is the new value.
struct Add {
  std::string key;
  std::int64_t delta = 1;
};
// comm::Store::claim: reply.number is 1 when the key holds `value` afterwards, else 0.
struct Claim {
  std::string key, value;
};
// comm::Store::append to an event stream.
struct Append {
  std::string stream, value;
};
// comm::StreamReader::read: blocks until an event after a cursor, or `block`; reply.events and
// reply.cursors (moved past them).
struct ReadStreams {
  std::vector<comm::StreamCursor> cursors;
  std::chrono::milliseconds block{0};
};
// comm::Store::erase and ::erase_streams.
struct Erase {
  std::vector<std::string> keys;
};
struct EraseStreams {
  std::vector<std::string> streams;
};
// Nothing to do for `duration` (a retry's back-off while the store is away).
struct Sleep {
  std::chrono::milliseconds duration{0};
};

using Op =
    std::variant<GetMany, SetMany, Add, Claim, Append, ReadStreams, Erase, EraseStreams, Sleep>;

// GetMany of a few keys, and SetMany of one. (Ops built in a machine's co_await expression
// must not hold a braced list: GCC 12 cannot keep its array in a coroutine frame.)
template <typename... Keys>
GetMany get(Keys&&... keys) {
  GetMany op;
  op.keys.reserve(sizeof...(keys));
  (op.keys.emplace_back(std::forward<Keys>(keys)), ...);
  return op;
}
inline SetMany set(std::string key, std::string value) {
  SetMany op;
  op.entries.emplace_back(std::move(key), std::move(value));
  return op;
}

// What came back. `status` is the op's (kUnavailable: the store did not answer); the other fields
// are those of the op's kind.
struct Reply {
  Status status;
  std::vector<std::optional<std::string>> values;
  std::int64_t number = 0;
  std::vector<comm::StreamEvent> events;
  std::vector<comm::StreamCursor> cursors;
  Time now{};  // when the reply reached the machine
};

// A short name for logs and counts ("get_many", "append", ...).
const char* name(const Op& op);

}  // namespace io
}  // namespace ntp::elastic
