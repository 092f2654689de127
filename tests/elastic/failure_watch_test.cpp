// FailureWatch on a real file store: each of its three signs (a member's failure notice, the
// launcher's exit notice for a member's current incarnation, a ring neighbour whose progress stands
// still, whether its heartbeat stops or only its training thread does) aborts the armed epoch
// once; nothing else does, and nothing after disarm(). Join notices are counted.
#include "elastic/failure_watch.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>

#include "comm/exit_notice.h"
#include "comm/survivors.h"
#include "elastic/agreement.h"
#include "file_store_test_base.h"

namespace ntp::elastic {
namespace {

using std::chrono::milliseconds;

class FailureWatchTest : public FileStoreTestBase {
 protected:
  FailureWatchTest() : FileStoreTestBase("failure-watch") {}

  // Epoch 3 of members {0, 2, 5, 7} as seen by member 2; every member at incarnation "0.1".
  WatchedEpoch epoch() {
    return {"train/a0",
            3,
            2,
            {0, 2, 5, 7},
            std::vector<std::string>(8, "0.1"),
            [this](const std::string& reason) {
              reason_ = reason;
              aborts_.fetch_add(1);
            }};
  }
  // A watch of epoch() that checks this worker's own record against `own` at every poll (10 ms)
  // and watches no neighbour; its on_fenced calls are counted in fenced_.
  std::unique_ptr<FailureWatch> self_checking_watch(Progress* own) {
    auto watch = std::make_unique<FailureWatch>(store_, milliseconds(10), milliseconds(0), own,
                                                [this] { fenced_.fetch_add(1); });
    watch->arm(epoch());
    return watch;
  }
  // Waits up to `limit` for an abort.
  bool aborted_within(milliseconds limit) {
    const auto end = std::chrono::steady_clock::now() + limit;
    while (aborts_.load() == 0 && std::chrono::steady_clock::now() < end) {
      std::this_thread::sleep_for(milliseconds(2));
    }
    return aborts_.load() > 0;
  }
  // Keeps the heartbeats of `ids` moving for `how_long`.
  void beat(const std::vector<int>& ids, milliseconds how_long) {
    const auto end = std::chrono::steady_clock::now() + how_long;
    for (int n = 0; std::chrono::steady_clock::now() < end; ++n) {
      for (int id : ids) {
        ASSERT_TRUE(store_->set(comm::Heartbeat::key("train/a0", id), std::to_string(n)).ok());
      }
      std::this_thread::sleep_for(milliseconds(20));
    }
  }

  // A thread that, until `stop`, beats every 20 ms for member 5 with its progress fixed at
  // `five_progress` and for member 0 with its progress moving.
  std::thread beat_with_five_at(const std::string& five_progress, std::atomic<bool>& stop) {
    return std::thread([this, five_progress, &stop] {
      for (int n = 0; !stop.load(); ++n) {
        (void)store_->set(comm::Heartbeat::key("train/a0", 0),
                          "p." + std::to_string(n) + "|" + std::to_string(n) + ":2:9:0");
        (void)store_->set(comm::Heartbeat::key("train/a0", 5),
                          "q." + std::to_string(n) + "|" + five_progress);
        std::this_thread::sleep_for(milliseconds(20));
      }
    });
  }

  // Seconds from arming `watch` on epoch() until it aborts, expected within `limit`, while
  // beat_with_five_at(`five_progress`) beats.
  double seconds_to_abort(FailureWatch& watch, const std::string& five_progress,
                          milliseconds limit) {
    watch.arm(epoch());
    const auto start = std::chrono::steady_clock::now();
    std::atomic<bool> stop{false};
    std::thread beats = beat_with_five_at(five_progress, stop);
    EXPECT_TRUE(aborted_within(limit));
    const double after =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    stop.store(true);
    beats.join();
    return after;
  }

  // A watch of hang bound `hang` takes member 5, beating with progress `five_progress`, as hung
  // no sooner than `allowance_s` after arming and within 1 s more (a few polls and beats on a
  // loaded machine).
  void expect_five_hung_after(milliseconds hang, const std::string& five_progress,
                              double allowance_s) {
    FailureWatch watch(store_, milliseconds(10), hang);
    const double after = seconds_to_abort(
        watch, five_progress, milliseconds(static_cast<int>((allowance_s + 3.0) * 1000)));
    EXPECT_NE(reason_.find("rank 5"), std::string::npos) << reason_;
    EXPECT_GE(after, allowance_s);
    EXPECT_LE(after, allowance_s + 1.0);
  }

  void report_failure(int epoch) {
    ASSERT_TRUE(post_failure_notice(*store_, "train/a0", epoch).ok());
  }

  std::atomic<int> aborts_{0}, fenced_{0};
  std::string reason_;
};

TEST_F(FailureWatchTest, AMembersFailureNoticeAbortsOnce) {
  FailureWatch watch(store_, milliseconds(10), milliseconds(0));
  watch.arm(epoch());
  EXPECT_FALSE(aborted_within(milliseconds(100)));
  report_failure(2);  // an ended epoch: no news for epoch 3
  EXPECT_FALSE(aborted_within(milliseconds(100)));
  report_failure(3);
  EXPECT_TRUE(aborted_within(milliseconds(1000)));
  std::this_thread::sleep_for(milliseconds(100));
  EXPECT_EQ(aborts_.load(), 1);
  EXPECT_NE(reason_.find("epoch 3"), std::string::npos) << reason_;
}

TEST_F(FailureWatchTest, AnExitNoticeAbortsOnlyForAMembersCurrentIncarnation) {
  FailureWatch watch(store_, milliseconds(10), milliseconds(0));
  watch.arm(epoch());
  ASSERT_TRUE(comm::post_exit_notice(*store_, 5, "0.0").ok());  // its predecessor
  ASSERT_TRUE(comm::post_exit_notice(*store_, 4, "0.1").ok());  // not a member
  EXPECT_FALSE(aborted_within(milliseconds(150)));
  ASSERT_TRUE(comm::post_exit_notice(*store_, 5, "0.1").ok());
  EXPECT_TRUE(aborted_within(milliseconds(1000)));
  EXPECT_NE(reason_.find("rank 5"), std::string::npos) << reason_;
}

TEST_F(FailureWatchTest, AnExitNoticePostedBeforeArmingIsSeen) {
  ASSERT_TRUE(comm::post_exit_notice(*store_, 7, "0.1").ok());
  FailureWatch watch(store_, milliseconds(10), milliseconds(0));
  watch.arm(epoch());
  EXPECT_TRUE(aborted_within(milliseconds(1000)));
}

// Join notices are counted, each once, those posted before arming too, and abort nothing.
TEST_F(FailureWatchTest, JoinNoticesAreCountedOnceAndAbortNothing) {
  ASSERT_TRUE(post_join_notice(*store_, "train/a0", 5).ok());
  FailureWatch watch(store_, milliseconds(10), milliseconds(0));
  watch.arm(epoch());
  ASSERT_TRUE(post_join_notice(*store_, "train/a0", 6).ok());
  report_failure(2);  // an ended epoch's failure: not a join
  ASSERT_TRUE(post_join_notice(*store_, "train/a0", 6).ok());
  const auto end = std::chrono::steady_clock::now() + milliseconds(2000);
  while (watch.join_notices() < 3 && std::chrono::steady_clock::now() < end) {
    std::this_thread::sleep_for(milliseconds(2));
  }
  std::this_thread::sleep_for(milliseconds(100));  // a double count would show by now
  EXPECT_EQ(watch.join_notices(), 3);
  EXPECT_EQ(aborts_.load(), 0);
}

// A slot's new process forgets the record of its hung predecessor: a record of a progress count
// the new process reaches later would otherwise read as this one's (LiveRun::start, a repair).
TEST_F(FailureWatchTest, AForgottenSilentRecordMatchesNoProgress) {
  const std::string beat = "7|12:1:3:0";  // a heartbeat carrying progress token 12:1:3:0
  ASSERT_TRUE(store_->set(silent_key("train/a0", 5), beat).ok());
  ASSERT_TRUE(store_->set(comm::Heartbeat::key("train/a0", 5), beat).ok());
  EXPECT_TRUE(still_silent(*store_, "train/a0", 5));  // the record matches the beat
  forget_silent_record(*store_, "train/a0", 5);
  EXPECT_FALSE(still_silent(*store_, "train/a0", 5));
  EXPECT_FALSE(store_->exists(silent_key("train/a0", 5)).value());
}

// A new process of a slot counts its marks from zero again: after as many marks as its hung
// predecessor had made, its token still differs (the incarnation leads it), so the predecessor's
// silent record neither fences it nor makes it look still.
TEST_F(FailureWatchTest, APreviousIncarnationsSilentRecordMatchesNotTheNextOne) {
  Progress hung(0), repair(1);
  for (int k = 0; k < 37; ++k) {
    hung.mark(Phase::kStep, k);
    repair.mark(Phase::kStep, k);
  }
  ASSERT_TRUE(store_->set(silent_key("train/a0", 2), "r.9|" + hung.token()).ok());
  ASSERT_TRUE(store_->set(comm::Heartbeat::key("train/a0", 2), "s.1|" + repair.token()).ok());
  EXPECT_FALSE(still_silent(*store_, "train/a0", 2));
  ASSERT_TRUE(store_->set(comm::Heartbeat::key("train/a0", 2), "s.2|" + hung.token()).ok());
  EXPECT_TRUE(still_silent(*store_, "train/a0", 2));  // the same process's progress does match
  const auto watch = self_checking_watch(&repair);
  // A second is ~100 looks at its own record (with its own progress as the hung one's,
  // AWorkerRecordedSilentAtItsOwnProgressLeaves is fenced within one).
  std::this_thread::sleep_for(milliseconds(1000));
  EXPECT_EQ(fenced_.load(), 0);
}

TEST_F(FailureWatchTest, AStillRingNeighbourAbortsAndIsRecordedSilent) {
  // Member 2's ring neighbours are 0 and 5; member 7 is no neighbour and may stay still.
  // (Still for 500 ms against beats every 20 ms: a loaded machine's scheduling does not reach it.)
  FailureWatch watch(store_, milliseconds(10), milliseconds(500));
  watch.arm(epoch());
  beat({0, 5}, milliseconds(1000));
  EXPECT_EQ(aborts_.load(), 0) << reason_;
  EXPECT_FALSE(still_silent(*store_, "train/a0", 5));
  std::thread keep_zero([this] { beat({0}, milliseconds(2000)); });
  EXPECT_TRUE(aborted_within(milliseconds(2000)));
  keep_zero.join();
  EXPECT_NE(reason_.find("rank 5"), std::string::npos) << reason_;
  // The agreement may take 5 as gone while its heartbeat stays where the watch saw it still.
  EXPECT_TRUE(still_silent(*store_, "train/a0", 5));
  ASSERT_TRUE(store_->set(comm::Heartbeat::key("train/a0", 5), "moved").ok());
  EXPECT_FALSE(still_silent(*store_, "train/a0", 5));
}

TEST_F(FailureWatchTest, NothingAbortsAfterDisarm) {
  FailureWatch watch(store_, milliseconds(10), milliseconds(50));
  watch.arm(epoch());
  watch.disarm();
  report_failure(3);
  ASSERT_TRUE(comm::post_exit_notice(*store_, 5, "0.1").ok());
  EXPECT_FALSE(aborted_within(milliseconds(300)));  // heartbeats absent too: still nothing
}

TEST_F(FailureWatchTest, ALiveNeighbourWhoseTrainingThreadIsStuckAborts) {
  // Member 5 beats every 20 ms but its progress stays at sequence 7 (a stuck training thread);
  // member 0 makes progress. The allowance of a step's phase is the hang bound itself (500 ms).
  expect_five_hung_after(milliseconds(500), "7:2:9", 0.5);
  EXPECT_TRUE(still_silent(*store_, "train/a0", 5));
}

TEST_F(FailureWatchTest, AStarvedNeighbourGetsTheLongAllowanceAndNoMore) {
  // Member 5 beats every 20 ms with its progress at sequence 7 and its token saying starved (its
  // training thread runs, slowly: elastic/progress.h): the long allowance, 10 x 100 ms, instead of
  // the step's 100 ms. Past it, it is taken as hung all the same.
  // Not before the long allowance (1 s; the step's own would have fired at 0.1 s).
  expect_five_hung_after(milliseconds(100), "7:2:9:0:1", 1.0);
}

TEST_F(FailureWatchTest, ANeighbourWaitingOnItsPeersIsNotHung) {
  // Member 5's training thread waits in a collective (its token's last field is 1) for a peer
  // that is stuck: its progress stands still but its beat moves. Only the collective's timeout
  // bounds that wait; the watch does not blame it.
  FailureWatch watch(store_, milliseconds(10), milliseconds(200));
  watch.arm(epoch());
  std::atomic<bool> stop{false};
  std::thread beats = beat_with_five_at("7:2:9:1", stop);
  EXPECT_FALSE(aborted_within(milliseconds(1000))) << reason_;
  stop.store(true);
  beats.join();
}

TEST_F(FailureWatchTest, AFinishedNeighbourIsNotHung) {
  // Member 5's last beat says its job is done (phase 6, finished): no abort, however long.
  FailureWatch watch(store_, milliseconds(10), milliseconds(100));
  watch.arm(epoch());
  ASSERT_TRUE(store_->set(comm::Heartbeat::key("train/a0", 5), "q.1|40:6:99").ok());
  ASSERT_TRUE(store_->set(comm::Heartbeat::key("train/a0", 0), "p.1|40:6:99").ok());
  EXPECT_FALSE(aborted_within(milliseconds(600)));
}

TEST_F(FailureWatchTest, AWorkerRecordedSilentAtItsOwnProgressLeaves) {
  // This worker's training thread is stuck at its current progress, and a watcher recorded it
  // silent there: its own watch calls on_fenced at its next look. It calls it at every look while
  // the record matches (a worker's on_fenced ends the process at the first), and no more once
  // the progress moved.
  Progress mine;
  mine.mark(Phase::kStep, 4);
  const auto watch = self_checking_watch(&mine);
  std::this_thread::sleep_for(milliseconds(400));
  EXPECT_EQ(fenced_.load(), 0);
  ASSERT_TRUE(store_->set(silent_key("train/a0", 2), "r.5|" + mine.token()).ok());
  const auto end = std::chrono::steady_clock::now() + milliseconds(2000);
  while (fenced_.load() == 0 && std::chrono::steady_clock::now() < end) {
    std::this_thread::sleep_for(milliseconds(5));
  }
  ASSERT_GT(fenced_.load(), 0);
  mine.mark(Phase::kStep, 5);  // it moved after all: the record is not about its present
  const int at_move = fenced_.load();
  std::this_thread::sleep_for(milliseconds(300));
  EXPECT_LE(fenced_.load(), at_move + 1);  // a look in flight when it moved, then none
}

}  // namespace
}  // namespace ntp::elastic
