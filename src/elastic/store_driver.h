// The runtime's driver of the protocol's machines (elastic/task.h): performs each op a machine
// awaits on a real comm::Store (stream reads on one StreamReader, opened at the first), stamps
// the reply with the wall clock, and resumes the machine, until its task is done. The calling
// thread blocks in the store as the code before the machines did.
#pragma once

#include <memory>
#include <utility>

#include "comm/store.h"
#include "elastic/io.h"
#include "elastic/task.h"

namespace ntp::elastic {

class StoreDriver {
 public:
  // `store` must outlive the driver.
  explicit StoreDriver(comm::Store& store) : store_(store) {}

  // Does `op` now; reply.now is the time it returned.
  io::Reply perform(io::Op op);

  // Runs `task`, whose awaits go through `io`, to its end.
  template <typename T>
  T run(Task<T> task, IoSlot& io) {
    io.set_now(Clock::now());
    task.start();
    while (io.has_pending()) io.resume(perform(io.take_pending()));
    return std::move(task.result());
  }

  comm::Store& store() { return store_; }
  // The reader that ReadStreams ops use (opened here if not yet): open it before another thread
  // may call its wake().
  comm::StreamReader& reader();
  // The reader opened and connected (StreamReader::prepare), on the thread that runs the tasks.
  Status prepare_reader() { return reader().prepare(); }

 private:
  comm::Store& store_;
  std::unique_ptr<comm::StreamReader> reader_;
};

}  // namespace ntp::elastic
