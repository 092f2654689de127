// A store connection that a bench member can lose at once, as a SIGKILLed worker loses its own:
// after kill(), every call fails (kUnavailable) without reaching the server, so the member's
// threads, wherever they are, write nothing more.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
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
  Result<bool> claim(const std::string& key, const std::string& value) override {
    if (dead_) return gone();
    return store_->claim(key, value);
  }
  Result<std::vector<std::optional<std::string>>> get_many(
      const std::vector<std::string>& keys) override {
    if (dead_) return gone();
    return store_->get_many(keys);
  }
  Status set_many(const std::vector<std::pair<std::string, std::string>>& entries) override {
    return dead_ ? gone() : store_->set_many(entries);
  }
  Status erase(const std::vector<std::string>& keys) override {
    return dead_ ? gone() : store_->erase(keys);
  }
  Status append(const std::string& stream, const std::string& value) override {
    return dead_ ? gone() : store_->append(stream, value);
  }
  std::unique_ptr<comm::StreamReader> open_reader() override {
    return std::make_unique<Reader>(store_->open_reader(), dead_);
  }
  std::string describe() const override { return store_->describe(); }

 private:
  // The wrapped store's reader, cut off as the store is.
  class Reader final : public comm::StreamReader {
   public:
    Reader(std::unique_ptr<comm::StreamReader> reader, const std::atomic<bool>& dead)
        : reader_(std::move(reader)), dead_(dead) {}
    Result<std::vector<comm::StreamEvent>> read(std::vector<comm::StreamCursor>& cursors,
                                                std::chrono::milliseconds block) override {
      if (dead_) return gone();
      return reader_->read(cursors, block);
    }
    Status prepare() override { return dead_ ? gone() : reader_->prepare(); }
    void wake() override { reader_->wake(); }

   private:
    std::unique_ptr<comm::StreamReader> reader_;
    const std::atomic<bool>& dead_;
  };

  static Status gone() { return unavailable("this member was killed"); }
  std::shared_ptr<comm::Store> store_;
  std::atomic<bool> dead_{false};
};

}  // namespace ntp::bench
