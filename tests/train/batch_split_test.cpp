#include "train/batch_split.h"

#include <gtest/gtest.h>

#include <numeric>

namespace ntp::train {
namespace {

int64_t total(const std::vector<ReplicaBatch>& batches) {
  int64_t n = 0;
  for (const ReplicaBatch& b : batches) n += b.samples;
  return n;
}

void expect_consecutive(const std::vector<ReplicaBatch>& batches, int64_t micro) {
  int64_t begin = 0;
  for (const ReplicaBatch& b : batches) {
    EXPECT_EQ(b.begin, begin);
    EXPECT_EQ(b.samples, b.micro_batches * micro);
    EXPECT_GE(b.micro_batches, 1);
    begin += b.samples;
  }
}

TEST(BatchSplitTest, KeepGivesEveryReplicaTheSameShare) {
  auto split = split_global_batch(BatchPolicy::kKeep, {4, 3, 2}, 4, 24, 2);
  ASSERT_TRUE(split.ok());
  expect_consecutive(*split, 2);
  for (const ReplicaBatch& b : *split) EXPECT_EQ(b.samples, 8);
  auto uneven = split_global_batch(BatchPolicy::kKeep, {4, 4, 4}, 4, 10, 2);  // 5 micro-batches
  ASSERT_TRUE(uneven.ok());
  EXPECT_EQ(total(*uneven), 10);
  EXPECT_EQ((*uneven)[0].micro_batches, 2);
  EXPECT_EQ((*uneven)[2].micro_batches, 1);
}

TEST(BatchSplitTest, ScaleIsProportionalToActiveDevicesAndKeepsTheGlobalBatch) {
  // 36 micro-batches over 4+3+2 = 9 devices: 16, 12, 8 -> degraded get 12 and 8, healthy 16.
  auto split = split_global_batch(BatchPolicy::kScale, {4, 3, 2}, 4, 72, 2);
  ASSERT_TRUE(split.ok());
  expect_consecutive(*split, 2);
  EXPECT_EQ((*split)[0].micro_batches, 16);
  EXPECT_EQ((*split)[1].micro_batches, 12);
  EXPECT_EQ((*split)[2].micro_batches, 8);
  // Rounding leftovers go to the healthy replicas, never change the global batch.
  for (int64_t batch : {6, 12, 14, 26, 100}) {
    auto s = split_global_batch(BatchPolicy::kScale, {8, 7, 8, 5}, 8, batch, 1);
    ASSERT_TRUE(s.ok()) << batch;
    EXPECT_EQ(total(*s), batch);
    expect_consecutive(*s, 1);
    EXPECT_GE((*s)[0].samples, (*s)[1].samples) << batch;
    EXPECT_GE((*s)[1].samples, (*s)[3].samples) << batch;
  }
  // Every replica degraded: shares still sum to the batch.
  auto all = split_global_batch(BatchPolicy::kScale, {3, 2, 1}, 4, 10, 1);
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(total(*all), 10);
  EXPECT_GE((*all)[0].samples, (*all)[2].samples);
  // Uniform degrees: the same as keep.
  auto uniform = split_global_batch(BatchPolicy::kScale, {4, 4}, 4, 8, 2);
  ASSERT_TRUE(uniform.ok());
  EXPECT_EQ((*uniform)[0].samples, 4);
}

TEST(BatchSplitTest, BadBatchesNameTheFlag) {
  auto not_multiple = split_global_batch(BatchPolicy::kKeep, {4, 4}, 4, 9, 2);
  ASSERT_FALSE(not_multiple.ok());
  EXPECT_NE(not_multiple.status().message().find("--batch 9"), std::string::npos);
  auto too_small = split_global_batch(BatchPolicy::kKeep, {4, 4, 4}, 4, 4, 2);
  ASSERT_FALSE(too_small.ok());
  EXPECT_NE(too_small.status().message().find("fewer than the 3 replicas"), std::string::npos);
  auto no_room = split_global_batch(BatchPolicy::kScale, {1, 1, 1, 3, 4}, 4, 5, 1);
  ASSERT_FALSE(no_room.ok());
  EXPECT_EQ(parse_batch_policy("fair").status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ntp::train
