#include "elastic/store_driver.h"

#include <thread>
#include <type_traits>

namespace ntp::elastic {
namespace {

// Fills `reply` from a store call's Result.
template <typename T>
void take(Result<T>&& result, io::Reply& reply, T io::Reply::*field) {
  reply.status = result.status();
  if (result.ok()) reply.*field = std::move(result).value();
}

}  // namespace

comm::StreamReader& StoreDriver::reader() {
  if (!reader_) reader_ = store_.open_reader();
  return *reader_;
}

io::Reply StoreDriver::perform(io::Op op) {
  io::Reply reply;
  comm::Store& store = store_;
  std::visit(
      [&](auto& o) {
        using T = std::decay_t<decltype(o)>;
        if constexpr (std::is_same_v<T, io::GetMany>) {
          take(store.get_many(o.keys), reply, &io::Reply::values);
        } else if constexpr (std::is_same_v<T, io::SetMany>) {
          // One key is a plain SET, as the protocol wrote it before it had machines.
          reply.status = o.entries.size() == 1 ? store.set(o.entries[0].first, o.entries[0].second)
                                               : store.set_many(o.entries);
        } else if constexpr (std::is_same_v<T, io::Add>) {
          take(store.add(o.key, o.delta), reply, &io::Reply::number);
        } else if constexpr (std::is_same_v<T, io::Claim>) {
          Result<bool> claimed = store.claim(o.key, o.value);
          reply.status = claimed.status();
          if (claimed.ok()) reply.number = *claimed ? 1 : 0;
        } else if constexpr (std::is_same_v<T, io::Append>) {
          reply.status = store.append(o.stream, o.value);
        } else if constexpr (std::is_same_v<T, io::ReadStreams>) {
          take(reader().read(o.cursors, o.block), reply, &io::Reply::events);
          reply.cursors = std::move(o.cursors);  // moved past the events (kept on an error)
        } else if constexpr (std::is_same_v<T, io::Erase>) {
          reply.status = store.erase(o.keys);
        } else if constexpr (std::is_same_v<T, io::EraseStreams>) {
          reply.status = store.erase_streams(o.streams);
        } else if constexpr (std::is_same_v<T, io::Sleep>) {
          std::this_thread::sleep_for(o.duration);
        }
      },
      op);
  reply.now = Clock::now();
  return reply;
}

}  // namespace ntp::elastic
