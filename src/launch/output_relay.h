// Output relay: each line a worker writes goes to the launcher's stdout or stderr (the same
// stream) as "[rank R] line" (without the prefix when prefix is off), and to LOG_DIR/rank_R.log
// when a log directory is given (a header line per worker process). A last line without a
// newline is relayed when the stream ends.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "launch/worker_slot.h"

namespace ntp::launch {

class OutputRelay {
 public:
  OutputRelay(bool prefix, std::string log_dir) : prefix_(prefix), log_dir_(std::move(log_dir)) {}

  // A new worker process holds `slot`: relays its pipes from now on (and opens its log file).
  void attach(Slot& slot, int out_fd, int err_fd);
  // Waits up to `wait` for output of any slot and relays what came.
  void pump(std::vector<Slot>& slots, std::chrono::milliseconds wait);
  // After a worker exited its pipes may still be held open by its children: relays what is
  // there now and stops listening.
  void drain(Slot& slot);

 private:
  void emit(Slot& slot, bool is_err, const std::string& line);
  // Reads what is available on `stream`; false at EOF or error (then the fd is closed).
  bool read_stream(Slot& slot, Stream& stream, bool is_err);

  bool prefix_;
  std::string log_dir_;
};

}  // namespace ntp::launch
