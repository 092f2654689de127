#include "elastic/failure_watch.h"

#include "elastic/agreement_machine.h"

namespace ntp::elastic {

FailureWatch::FailureWatch(std::shared_ptr<comm::Store> store, std::chrono::milliseconds poll,
                           std::chrono::milliseconds hang_detect, const Progress* own_progress,
                           std::function<void()> on_fenced)
    : store_(std::move(store)),
      poll_(poll),
      on_fenced_(std::move(on_fenced)),
      notice_driver_(*store_),
      notices_machine_(notice_io_),
      liveness_driver_(*store_),
      liveness_machine_(liveness_io_, poll, hang_detect, own_progress) {
  notice_driver_.reader();  // opened before arm() or the destructor may wake it
  notices_ = std::thread([this] { notice_thread(); });
  liveness_ = std::thread([this] { liveness_thread(); });
}

FailureWatch::~FailureWatch() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
    armed_ = false;
  }
  wake_.notify_all();
  notice_driver_.reader().wake();
  notices_.join();
  liveness_.join();
}

void FailureWatch::arm(WatchedEpoch epoch) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    current_ = std::move(epoch);
    armed_ = true;
    fired_ = false;
    ++generation_;
  }
  wake_.notify_all();
  notice_driver_.reader().wake();  // a read blocked for the last epoch looks at this one now
}

void FailureWatch::disarm() {
  std::lock_guard<std::mutex> lock(mutex_);
  armed_ = false;
  ++generation_;
}

bool FailureWatch::next_look(std::unique_lock<std::mutex>& lock, EpochLook& look) {
  wake_.wait(lock, [this] { return stop_ || armed_; });
  if (stop_) return false;
  look.epoch = current_;
  look.new_epoch = generation_ != look.generation;
  look.generation = generation_;
  lock.unlock();
  return true;
}

void FailureWatch::fire(std::uint64_t generation, const std::string& reason) {
  if (reason.empty()) return;
  std::lock_guard<std::mutex> lock(mutex_);
  if (generation != generation_ || !armed_ || fired_) return;
  fired_ = true;
  if (current_.abort) current_.abort(reason);  // under the lock: disarm waits for it
}

void FailureWatch::notice_thread() {
  std::unique_lock<std::mutex> lock(mutex_);
  EpochLook e;
  while (next_look(lock, e)) {
    const std::string reason =
        notice_driver_.run(notices_machine_.round(e.epoch, e.new_epoch, poll_), notice_io_);
    join_notices_ = notices_machine_.join_notices();
    fire(e.generation, reason);  // a no-op once this epoch fired
    lock.lock();
  }
}

void FailureWatch::liveness_thread() {
  std::unique_lock<std::mutex> lock(mutex_);
  EpochLook e;
  while (next_look(lock, e)) {
    const LivenessMachine::Look look =
        liveness_driver_.run(liveness_machine_.round(e.epoch, e.new_epoch), liveness_io_);
    if (look.still) {
      // Fired before the notice goes out: this watch's abort names the hung neighbour, not the
      // notice that its own notice thread would read back.
      fire(e.generation, still_reason(*look.still, look.why));
      (void)liveness_driver_.run(
          post_failure(liveness_io_, e.epoch.group, e.epoch.epoch, FailurePoster::kWitness),
          liveness_io_);
    }
    lock.lock();
    // Also after firing: a worker whose training thread is stuck never disarms.
    if (look.fenced && on_fenced_) on_fenced_();
    wake_.wait_for(lock, poll_, [this] { return stop_; });
  }
}

}  // namespace ntp::elastic
