#include "comm/progress_thread.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

namespace ntp::comm {
namespace {

TEST(ProgressThreadTest, RunsOperationsInSubmissionOrder) {
  ProgressThread thread;
  std::vector<int> order;
  std::vector<WorkPtr> works;
  for (int i = 0; i < 50; ++i) {
    works.push_back(thread.submit([&order, i] {
      order.push_back(i);
      return i % 7 == 3 ? unavailable("op " + std::to_string(i)) : ok_status();
    }));
  }
  for (int i = 49; i >= 0; --i) {
    Status s = works[static_cast<std::size_t>(i)]->wait();
    EXPECT_EQ(s.ok(), i % 7 != 3) << i;
    EXPECT_TRUE(works[static_cast<std::size_t>(i)]->done());
  }
  ASSERT_EQ(order.size(), 50U);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(order[static_cast<std::size_t>(i)], i);
}

TEST(ProgressThreadTest, WaitForGivesUpWithDeadlineExceededWhileTheOpRuns) {
  ProgressThread thread;
  std::atomic<bool> release{false};
  WorkPtr work = thread.submit([&] {
    while (!release.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return ok_status();
  });
  EXPECT_EQ(work->wait_for(std::chrono::milliseconds(30)).code(), StatusCode::kDeadlineExceeded);
  EXPECT_FALSE(work->done());
  release.store(true);
  EXPECT_TRUE(work->wait().ok());
  EXPECT_TRUE(work->wait_for(std::chrono::milliseconds(0)).ok());
}

TEST(ProgressThreadTest, DestructionFinishesTheRunningOpAndFailsQueuedOnes) {
  std::atomic<bool> started{false};
  std::atomic<bool> release{false};
  std::atomic<bool> queued_ran{false};
  WorkPtr running;
  WorkPtr queued;
  std::thread releaser;
  {
    ProgressThread thread;
    running = thread.submit([&] {
      started.store(true);
      while (!release.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      return ok_status();
    });
    queued = thread.submit([&] {
      queued_ran.store(true);
      return ok_status();
    });
    while (!started.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    // The destructor below blocks on the running op until this releases it.
    releaser = std::thread([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      release.store(true);
    });
  }
  releaser.join();
  EXPECT_TRUE(running->wait().ok());
  EXPECT_EQ(queued->wait().code(), StatusCode::kUnavailable);
  EXPECT_FALSE(queued_ran.load());
}

TEST(ProgressThreadTest, RunOrWaitRunsInlineWhenIdleAndInOrderOtherwise) {
  ProgressThread thread;
  const std::thread::id caller = std::this_thread::get_id();
  std::thread::id ran_on;
  EXPECT_TRUE(thread
                  .run_or_wait([&] {
                    ran_on = std::this_thread::get_id();
                    return ok_status();
                  })
                  .ok());
  EXPECT_EQ(ran_on, caller);  // idle: no hand-off

  std::atomic<bool> release{false};
  std::vector<int> order;
  WorkPtr first = thread.submit([&] {
    while (!release.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    order.push_back(1);
    return ok_status();
  });
  std::thread releaser([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    release.store(true);
  });
  Status second = thread.run_or_wait([&] {
    order.push_back(2);
    return unavailable("second");
  });
  releaser.join();
  EXPECT_EQ(second.code(), StatusCode::kUnavailable);
  EXPECT_TRUE(first->wait().ok());
  EXPECT_EQ(order, (std::vector<int>{1, 2}));
}

TEST(ProgressThreadTest, FinishedWorkIsDone) {
  WorkPtr work = finished_work(invalid_argument("bad"));
  EXPECT_TRUE(work->done());
  EXPECT_EQ(work->wait().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ntp::comm
