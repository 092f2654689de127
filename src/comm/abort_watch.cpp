#include "comm/abort_watch.h"

#include <utility>

namespace ntp::comm {

Status post_abort(Store& store, const std::string& key, const std::string& reason) {
  return store.set(key, reason);
}

AbortWatch::AbortWatch(std::shared_ptr<Store> store, std::string key,
                       std::chrono::milliseconds interval,
                       std::function<void(const std::string& reason)> on_abort)
    : store_(std::move(store)),
      key_(std::move(key)),
      interval_(interval),
      on_abort_(std::move(on_abort)),
      thread_([this] { run(); }) {}

AbortWatch::~AbortWatch() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void AbortWatch::run() {
  std::unique_lock lock(mutex_);
  while (!stop_) {
    lock.unlock();
    // The store is polled without the lock, so the destructor never waits on a slow store for
    // longer than one call.
    Result<std::string> value = store_->get(key_);
    if (value.ok()) {
      fired_.store(true);
      on_abort_(*value);
      return;
    }
    lock.lock();
    wake_.wait_for(lock, interval_, [this] { return stop_; });
  }
}

}  // namespace ntp::comm
