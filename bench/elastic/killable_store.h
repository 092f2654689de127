// A store connection that a bench member can lose at once, as a SIGKILLed worker loses its own:
// after kill(), every call fails (kUnavailable) without reaching the server, so the member's
// threads, wherever they are, write nothing more.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "comm/store.h"

namespace ntp::bench {

class KillableStore final : public comm::Store {
 public:
  explicit KillableStore(std::shared_ptr<comm::Store> store) : store_(std::move(store)) {}
  void kill() { dead_.store(true); }

  Status set(const std::string& key, const std::string& value) override {
    return dead_ ? gone() : store_->set(key, value);
  }
  Result<std::string> get(const std::string& key) override {
    if (dead_) return gone();
    return store_->get(key);
  }
  Result<bool> exists(const std::string& key) override {
    if (dead_) return gone();
    return store_->exists(key);
  }
  Result<std::int64_t> add(const std::string& key, std::int64_t delta) override {
    if (dead_) return gone();
    return store_->add(key, delta);
  }
  std::string describe() const override { return store_->describe(); }

 private:
  static Status gone() { return unavailable("this member was killed"); }
  std::shared_ptr<comm::Store> store_;
  std::atomic<bool> dead_{false};
};

}  // namespace ntp::bench
