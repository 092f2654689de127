// Event streams in a Store: append-only logs that readers block on, so that one notice (a worker
// gone, an epoch failed, a member list published) reaches every waiting process in one round trip
// of the store instead of at its next poll.
//
//   store->append("launch/events", "exit 5 0.1");          // any process
//
//   std::unique_ptr<StreamReader> reader = store->open_reader();
//   std::vector<StreamCursor> at = {{"launch/events", ""}};   // "": from the stream's start
//   Result<std::vector<StreamEvent>> news = reader->read(at, 500ms);  // blocks <= 500 ms
//
// A reader has its own connection (RedisStore: a second socket, XREAD BLOCK), so a read that
// blocks holds up none of the store's other calls. Every event appended after a cursor is returned
// exactly once by the reads that carry that cursor forward, in append order per stream. Streams
// are small (notices are rare) and live as long as the store's keys; a restarted store without
// persistence loses them as it loses every key (docs/comm.md, "Stores").
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"

namespace ntp::comm {

class Store;

struct StreamCursor {
  std::string stream;
  std::string position;  // opaque; "" = before the first event
};

struct StreamEvent {
  std::size_t stream = 0;  // index into the cursors of the read
  std::string value;
};

class StreamReader {
 public:
  virtual ~StreamReader() = default;
  // Blocks until some stream has events after its cursor, `block` has passed, or wake(): the
  // events (none on a timeout or a wake), with the cursors moved past them. kUnavailable when the
  // store cannot be reached (the cursors are kept: the next read resumes there).
  virtual Result<std::vector<StreamEvent>> read(std::vector<StreamCursor>& cursors,
                                                std::chrono::milliseconds block) = 0;
  // Makes the read in progress, or the next one if none is, return at once. Any thread.
  virtual void wake() = 0;
  // Sets up now what the first read would (a connection), so that a read on a recovery's path
  // does not pay it; ok where there is nothing to set up. Not final: a read whose connection
  // broke since connects again. The reading thread's, as read() is.
  virtual Status prepare() { return ok_status(); }
};

// The portable implementation over any Store's set/get/add (FileStore, test stores): the stream's
// length under "<stream>/n" (add), event i under "<stream>/<i>"; a reader polls the length every
// few milliseconds. An event whose number was drawn but whose value never appeared (its appender
// died in between) is skipped after a second.
Status append_by_keys(Store& store, const std::string& stream, const std::string& value);
// Erases the streams that append_by_keys wrote: their lengths and events.
Status erase_by_keys(Store& store, const std::vector<std::string>& streams);
// The reader must not outlive `store`.
std::unique_ptr<StreamReader> open_polling_reader(Store& store);

}  // namespace ntp::comm
