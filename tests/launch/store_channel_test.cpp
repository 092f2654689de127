// The launcher's store thread: calls never run on the caller's thread, so a store that does not
// answer cannot stall the caller; writes keep their order; stale step readings are dropped.
#include "launch/store_channel.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <map>
#include <mutex>

#include "launch/step_report.h"

namespace ntp::launch {
namespace {

// An in-memory store whose calls block while it is "down" (as a SIGSTOPped redis does).
class GateStore : public comm::Store {
 public:
  void set_down(bool down) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      down_ = down;
    }
    up_.notify_all();
  }
  std::vector<std::string> writes() {
    std::lock_guard<std::mutex> lock(mutex_);
    return writes_;
  }

  Status set(const std::string& key, const std::string& value) override {
    std::unique_lock<std::mutex> lock(mutex_);
    up_.wait(lock, [this] { return !down_; });
    values_[key] = value;
    writes_.push_back(key + "=" + value);
    return ok_status();
  }
  Result<std::string> get(const std::string& key) override {
    std::unique_lock<std::mutex> lock(mutex_);
    up_.wait(lock, [this] { return !down_; });
    const auto it = values_.find(key);
    if (it == values_.end()) return not_found("no " + key);
    return it->second;
  }
  Result<bool> exists(const std::string& key) override {
    std::unique_lock<std::mutex> lock(mutex_);
    up_.wait(lock, [this] { return !down_; });
    return values_.count(key) > 0;
  }
  Result<std::int64_t> add(const std::string&, std::int64_t delta) override { return delta; }
  Result<bool> claim(const std::string&, const std::string&) override { return true; }
  std::string describe() const override { return "gate"; }

 private:
  std::mutex mutex_;
  std::condition_variable up_;
  bool down_ = false;
  std::map<std::string, std::string> values_;
  std::vector<std::string> writes_;
};

bool eventually(const std::function<bool()>& ready) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!ready()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

TEST(StoreChannelTest, ADownStoreNeverBlocksTheCaller) {
  auto store = std::make_shared<GateStore>();
  StoreChannel channel(store, "unused", "unused", {0, 1});
  store->set_down(true);
  const auto before = std::chrono::steady_clock::now();
  channel.post([](comm::Store& s) { (void)s.set("a", "1"); });
  channel.post([](comm::Store& s) { (void)s.set("b", "2"); });
  std::future<bool> asked = channel.ask<bool>([](comm::Store& s) { return s.exists("a").ok(); });
  channel.watch_steps(true);
  channel.reset_step(0);
  (void)channel.steps();
  // Every call above returned without the store: well under the time any store call would take.
  EXPECT_LT(std::chrono::steady_clock::now() - before, std::chrono::milliseconds(500));
  EXPECT_FALSE(is_ready(asked));
  store->set_down(false);
  ASSERT_TRUE(eventually([&] { return is_ready(asked); }));
  EXPECT_TRUE(asked.get());
  ASSERT_TRUE(eventually([&] { return store->writes().size() >= 3; }));
  const std::vector<std::string> writes = store->writes();
  EXPECT_EQ(writes[0], "a=1");  // in the order posted
  EXPECT_EQ(writes[1], "b=2");
  EXPECT_EQ(writes[2], step_key(0) + "=-1");
}

TEST(StoreChannelTest, StepReadingsFromBeforeAResetAreDropped) {
  auto store = std::make_shared<GateStore>();
  ASSERT_TRUE(report_step(*store, 1, 7).ok());
  StoreChannel channel(store, "unused", "unused", {1});
  channel.watch_steps(true);
  ASSERT_TRUE(eventually([&] {
    const auto steps = channel.steps();
    return steps.count(1) == 1 && steps.at(1).step == 7;
  }));
  EXPECT_EQ(channel.steps().at(1).generation, 0);
  channel.reset_step(1);  // a fresh worker: readings of generation 0 are its predecessor's
  ASSERT_TRUE(eventually([&] { return channel.steps().at(1).generation == 1; }));
  EXPECT_EQ(channel.steps().at(1).step, -1);
  ASSERT_TRUE(report_step(*store, 1, 2).ok());
  ASSERT_TRUE(eventually([&] { return channel.steps().at(1).step == 2; }));
  EXPECT_EQ(channel.steps().at(1).generation, 1);
}

}  // namespace
}  // namespace ntp::launch
