// Agreement on a real file store, members as threads: three epochs agreed in a row (the third
// member reported gone after the first), and what each epoch leaves in the store. The decider of
// an epoch collects the per-member keys (done keys, announcement stream) of the epochs below it
// once its own re-formation is done, and keeps what a member's walk reads (lists, fail keys), so
// that a member away since the first epoch is still fenced.
#include "elastic/agreement.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <thread>

#include "comm/exit_notice.h"

namespace ntp::elastic {
namespace {

constexpr const char* kGroup = "train/a0";

class AgreementTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("ntp-agreement-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    Result<std::shared_ptr<comm::Store>> store = comm::open_store("file:" + dir_.string(), "run");
    ASSERT_TRUE(store.ok()) << store.status().message();
    store_ = *store;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  AgreementConfig config(int id, Progress* progress) {
    AgreementConfig c;
    c.store = store_;
    c.group = kGroup;
    c.me = id;
    c.progress = progress;
    c.hang_detect = std::chrono::milliseconds(2000);  // no member is convicted of stillness
    c.window = std::chrono::milliseconds(10000);
    c.incarnation = [](int, const MemberList&) { return std::string("0.0"); };
    return c;
  }

  // Members `ids` agree from their own `last[id]` at the same time, then each marks the agreed
  // list done: what the re-formation of train/reformation.cpp does once its state is moved.
  std::vector<Result<MemberList>> agree(const std::vector<int>& ids,
                                        std::vector<MemberList>& last) {
    std::vector<Result<MemberList>> out(ids.size(), Result<MemberList>(MemberList{}));
    std::vector<std::thread> threads;
    for (size_t k = 0; k < ids.size(); ++k) {
      threads.emplace_back([&, k] {
        const int id = ids[k];
        Progress progress;
        Agreement agreement(config(id, &progress));
        out[k] = agreement.agree(last[static_cast<size_t>(id)], {0, 0}, false, {},
                                 [] { return std::string("layout"); });
        if (out[k].ok()) {
          const Status done = agreement.mark_done(*out[k]);
          if (!done.ok()) out[k] = done;
        }
      });
    }
    for (std::thread& t : threads) t.join();
    return out;
  }

  bool present(const std::string& key) {
    Result<bool> there = store_->exists(key);
    return there.ok() && *there;
  }
  std::string epoch_key(int epoch, const std::string& what) {
    return std::string(kGroup) + "/e" + std::to_string(epoch) + "/" + what;
  }

  std::filesystem::path dir_;
  std::shared_ptr<comm::Store> store_;
};

TEST_F(AgreementTest, EachDeciderCollectsThePerMemberKeysOfTheEpochsBelowItsOwn) {
  std::vector<MemberList> last(3, initial_list({0, 1, 2}, 3));
  for (const Result<MemberList>& list : agree({0, 1, 2}, last)) {
    ASSERT_TRUE(list.ok()) << list.status().message();
    EXPECT_EQ(list->epoch, 1);
    EXPECT_EQ(list->members, (std::vector<int>{0, 1, 2}));
  }
  // Epoch 1 is the lowest with keys: nothing below it to collect.
  EXPECT_FALSE(present(std::string(kGroup) + "/collected"));
  const MemberList away = last[2];  // member 2 is gone from here on
  ASSERT_TRUE(comm::post_exit_notice(*store_, 2, "0.0").ok());
  for (int epoch : {2, 3}) {
    for (const Result<MemberList>& list : agree({0, 1}, last)) {
      ASSERT_TRUE(list.ok()) << list.status().message();
      EXPECT_EQ(list->epoch, epoch);
      EXPECT_EQ(list->members, (std::vector<int>{0, 1}));
      EXPECT_EQ(list->base_epoch, epoch - 1);  // the done keys of its base were all there
    }
  }
  const Result<std::string> collected = store_->get(std::string(kGroup) + "/collected");
  ASSERT_TRUE(collected.ok()) << collected.status().message();
  EXPECT_EQ(*collected, "3");
  for (int epoch : {1, 2}) {
    for (int id : {0, 1, 2}) EXPECT_FALSE(present(done_key(kGroup, epoch, id))) << epoch;
    EXPECT_FALSE(present(epoch_key(epoch, "alive/n"))) << epoch;  // FileStore's stream length
    EXPECT_TRUE(present(epoch_key(epoch, "list"))) << epoch;
    EXPECT_TRUE(present(epoch_key(epoch, "ticket"))) << epoch;
  }
  for (int id : {0, 1}) EXPECT_TRUE(present(done_key(kGroup, 3, id)));
  EXPECT_TRUE(present(epoch_key(3, "alive/n")));

  // Member 2 comes back with the list of epoch 1: its walk finds epoch 2's list, without it.
  Progress progress;
  Agreement agreement(config(2, &progress));
  MemberList stale = away;
  Result<MemberList> back =
      agreement.agree(stale, {0, 0}, false, {}, [] { return std::string("layout"); });
  ASSERT_FALSE(back.ok());
  EXPECT_EQ(back.status().code(), StatusCode::kAborted);
  EXPECT_EQ(back.status().message(), "fenced at epoch 2");
}

}  // namespace
}  // namespace ntp::elastic
