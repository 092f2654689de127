// Agreement on a real file store, members as threads: three epochs agreed in a row (the third
// member reported gone after the first), and what each epoch leaves in the store. The decider of
// an epoch collects the epochs below it once its own re-formation is done: their done keys,
// announcement streams and decider keys go, their lists become tombstones naming it,
// their fail keys stay; a member away since the first epoch walks the tombstones and is fenced
// by the second epoch's list.
#include "elastic/agreement.h"

#include <gtest/gtest.h>

#include <thread>

#include "comm/exit_notice.h"
#include "file_store_test_base.h"

namespace ntp::elastic {
namespace {

constexpr const char* kGroup = "train/a0";

class AgreementTest : public FileStoreTestBase {
 protected:
  AgreementTest() : FileStoreTestBase("agreement") {}

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
  // Epoch 1 fails (the fault path of a member that saw it), epoch 2 does not (3 is agreed as an
  // admission would be).
  ASSERT_TRUE(post_failure_notice(*store_, kGroup, 1).ok());
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
    EXPECT_FALSE(present(epoch_key(epoch, "alive/1"))) << epoch;  // and its first event
    EXPECT_FALSE(present(epoch_key(epoch, "decider"))) << epoch;
    // Epoch 1 was collected by the decider of 2, epoch 2 by that of 3.
    const Result<std::string> list = store_->get(epoch_key(epoch, "list"));
    ASSERT_TRUE(list.ok()) << epoch;
    EXPECT_EQ(decode_tombstone(*list), std::optional<int>(epoch + 1)) << *list;
  }
  // Epoch 1's fail key stays.
  EXPECT_TRUE(present(fail_key(kGroup, 1)));
  for (int id : {0, 1}) EXPECT_TRUE(present(done_key(kGroup, 3, id)));
  EXPECT_TRUE(present(epoch_key(3, "alive/n")));
  const Result<MemberList> third = decode_member_list(*store_->get(epoch_key(3, "list")));
  ASSERT_TRUE(third.ok());
  // The claim that decided epoch 3 named its decider.
  EXPECT_EQ(*store_->get(epoch_key(3, "decider")), std::to_string(third->decider));

  // Member 2 comes back with the list of epoch 1: its walk passes the tombstone of 2 to 3, whose
  // list does not name it.
  Progress progress;
  Agreement agreement(config(2, &progress));
  MemberList stale = away;
  Result<MemberList> back =
      agreement.agree(stale, {0, 0}, false, {}, [] { return std::string("layout"); });
  ASSERT_FALSE(back.ok());
  EXPECT_EQ(back.status().code(), StatusCode::kAborted);
  EXPECT_EQ(back.status().message(), "fenced at epoch 3");
}

}  // namespace
}  // namespace ntp::elastic
