#include "train/batch_split.h"

#include <gtest/gtest.h>

#include <algorithm>
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
    EXPECT_EQ(b.micro_batches, (b.samples + micro - 1) / micro);
    EXPECT_GE(b.micro_batches, 1);
    begin += b.samples;
  }
}

TEST(BatchSplitTest, KeepGivesEveryReplicaTheSameShare) {
  auto split = split_global_batch(BatchPolicy::kKeep, {1, 0.75, 0.5}, 24, 2);
  ASSERT_TRUE(split.ok());
  expect_consecutive(*split, 2);
  for (const ReplicaBatch& b : *split) EXPECT_EQ(b.samples, 8);
  auto uneven = split_global_batch(BatchPolicy::kKeep, {1, 1, 1}, 10, 2);  // 5 micro-batches
  ASSERT_TRUE(uneven.ok());
  EXPECT_EQ(total(*uneven), 10);
  EXPECT_EQ((*uneven)[0].micro_batches, 2);
  EXPECT_EQ((*uneven)[2].micro_batches, 1);
}

// A replica that left the job (pace 0) takes nothing; the others split the whole batch exactly as
// they would without it, under every policy.
TEST(BatchSplitTest, AReplicaThatLeftTakesNoSamplesAndTheOthersSplitTheBatch) {
  for (BatchPolicy policy : {BatchPolicy::kKeep, BatchPolicy::kScale, BatchPolicy::kBoost}) {
    auto with = split_global_batch(policy, {1, 0, 0.5}, 24, 2);
    auto without = split_global_batch(policy, {1, 0.5}, 24, 2);
    ASSERT_TRUE(with.ok() && without.ok());
    ASSERT_EQ(with->size(), 3u);
    EXPECT_EQ((*with)[1].samples, 0);
    EXPECT_EQ((*with)[1].micro_batches, 0);
    for (size_t k : {0u, 1u}) {
      const ReplicaBatch& a = (*with)[k == 0 ? 0 : 2];
      EXPECT_EQ(a.begin, (*without)[k].begin);
      EXPECT_EQ(a.samples, (*without)[k].samples);
      EXPECT_EQ(a.micro_batches, (*without)[k].micro_batches);
    }
  }
}

TEST(BatchSplitTest, ScaleIsProportionalToPaceAndKeepsTheGlobalBatch) {
  // 72 samples over paces 1 + 0.75 + 0.5 = 2.25: 32, 24, 16 (16, 12, 8 micro-batches of 2).
  auto split = split_global_batch(BatchPolicy::kScale, {1, 0.75, 0.5}, 72, 2);
  ASSERT_TRUE(split.ok());
  expect_consecutive(*split, 2);
  EXPECT_EQ((*split)[0].micro_batches, 16);
  EXPECT_EQ((*split)[1].micro_batches, 12);
  EXPECT_EQ((*split)[2].micro_batches, 8);
  // Shares never change the global batch; a faster replica never gets fewer samples.
  for (int64_t batch : {6, 12, 14, 26, 100}) {
    auto s = split_global_batch(BatchPolicy::kScale, {1, 7 / 8.0, 1, 5 / 8.0}, batch, 1);
    ASSERT_TRUE(s.ok()) << batch;
    EXPECT_EQ(total(*s), batch);
    expect_consecutive(*s, 1);
    EXPECT_GE((*s)[0].samples, (*s)[1].samples) << batch;
    EXPECT_GE((*s)[1].samples, (*s)[3].samples) << batch;
  }
  // Every replica degraded: shares still sum to the batch.
  auto all = split_global_batch(BatchPolicy::kScale, {0.75, 0.5, 0.25}, 10, 1);
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(total(*all), 10);
  EXPECT_GE((*all)[0].samples, (*all)[2].samples);
  // Uniform degrees: the same as keep.
  auto uniform = split_global_batch(BatchPolicy::kScale, {1, 1}, 8, 2);
  ASSERT_TRUE(uniform.ok());
  EXPECT_EQ((*uniform)[0].samples, 4);
}

TEST(BatchSplitTest, BadBatchesNameTheFlag) {
  auto not_multiple = split_global_batch(BatchPolicy::kKeep, {1, 1}, 9, 2);
  ASSERT_FALSE(not_multiple.ok());
  EXPECT_NE(not_multiple.status().message().find("--batch 9"), std::string::npos);
  auto too_small = split_global_batch(BatchPolicy::kKeep, {1, 1, 1}, 4, 2);
  ASSERT_FALSE(too_small.ok());
  EXPECT_NE(too_small.status().message().find("fewer than the 3 replicas"), std::string::npos);
  EXPECT_EQ(parse_batch_policy("fair").status().code(), StatusCode::kInvalidArgument);
}

TEST(BatchSplitTest, ScaleSharesToTheSampleWithAPartialLastMicroBatch) {
  // 24 samples in micro-batches of 4, paces 1, 1, 0.5: the least step is 10 (a tie of 10, 10, 4
  // and 10, 9, 5; the greedy split gives the former): micro-batches 4 + 4 + 2 and 4.
  auto split = split_global_batch(BatchPolicy::kScale, {1, 1, 0.5}, 24, 4);
  ASSERT_TRUE(split.ok());
  expect_consecutive(*split, 4);
  EXPECT_EQ((*split)[0].samples, 10);
  EXPECT_EQ((*split)[1].samples, 10);
  EXPECT_EQ((*split)[2].samples, 4);
  EXPECT_EQ((*split)[0].micro_batches, 3);
  EXPECT_EQ((*split)[0].micro_size(0, 4), 4);
  EXPECT_EQ((*split)[0].micro_size(2, 4), 2);
  // A replica at 0.9 of 12 samples over 3 keeps its 4: 5, 3, 4 would finish later (5 > 4 / 0.9).
  auto mild = split_global_batch(BatchPolicy::kScale, {1, 0.9, 1}, 12, 4);
  ASSERT_TRUE(mild.ok());
  for (const ReplicaBatch& b : *mild) EXPECT_EQ(b.samples, 4);
}

// The micro-batch grain (a MoE's): scale and boost move whole micro-batches, so every share
// starts at a multiple of the micro-batch and every forward holds the samples [j m, (j + 1) m) it
// holds in a failure-free run. 24 samples in micro-batches of 2 (12 units), paces 1, 0.75, 0.5:
// the least step over whole micro-batches is 6 units / 1 = 4.5 / 0.75 -> shares 6, 4, 2 units
// (step max(6, 5.33, 4) = 6; 5, 4, 3 would take 3 / 0.5 = 6 too, and the greedy's tie goes to the
// lower replica).
TEST(BatchSplitTest, TheMicroBatchGrainMovesWholeMicroBatchesOnly) {
  for (BatchPolicy policy : {BatchPolicy::kScale, BatchPolicy::kBoost}) {
    auto split = split_global_batch(policy, {1, 0.75, 0.5}, 24, 2, BatchGrain::kMicroBatch);
    ASSERT_TRUE(split.ok()) << split.status().to_string();
    expect_consecutive(*split, 2);
    EXPECT_EQ(total(*split), 24);
    double step = 0.0;
    const std::vector<double> pace = {1, 0.75, 0.5};
    for (size_t d = 0; d < 3; ++d) {
      EXPECT_EQ((*split)[d].begin % 2, 0) << d;
      EXPECT_EQ((*split)[d].samples % 2, 0) << d;
      step = std::max(step, static_cast<double>((*split)[d].samples / 2) / pace[d]);
    }
    EXPECT_EQ(step, 6.0);  // the least over whole micro-batches (8 / 1 would be the sample grain)
  }
  // At full pace, keep's split; fewer micro-batches than replicas is refused as under keep.
  auto equal = split_global_batch(BatchPolicy::kBoost, {1, 1, 1}, 10, 2, BatchGrain::kMicroBatch);
  auto keep = split_global_batch(BatchPolicy::kKeep, {1, 1, 1}, 10, 2);
  ASSERT_TRUE(equal.ok() && keep.ok());
  for (size_t d = 0; d < 3; ++d) EXPECT_EQ((*equal)[d].samples, (*keep)[d].samples);
  const auto few =
      split_global_batch(BatchPolicy::kScale, {1, 0.5, 1}, 12, 6, BatchGrain::kMicroBatch);
  ASSERT_FALSE(few.ok());
  EXPECT_NE(few.status().message().find("holds 2 micro-batches of 6, fewer than the 3 replicas"),
            std::string::npos)
      << few.status().message();
}

// The split's step time max(samples / pace) is the least any split of whole samples (at least one
// each) reaches: against brute force over every split of up to 14 samples over 3 replicas.
TEST(BatchSplitTest, ScaleFinishesNoLaterThanAnyOtherSplit) {
  const std::vector<std::vector<double>> cases = {
      {1, 0.75, 0.5}, {0.3, 1, 1}, {0.9, 0.8, 0.7}, {1, 0.51, 0.49}, {0.2, 0.2, 1}};
  for (const std::vector<double>& pace : cases) {
    for (int64_t batch = 3; batch <= 14; ++batch) {
      auto split = split_global_batch(BatchPolicy::kScale, pace, batch, 1);
      ASSERT_TRUE(split.ok());
      ASSERT_EQ(total(*split), batch);
      double got = 0.0;
      for (size_t d = 0; d < 3; ++d) {
        got = std::max(got, static_cast<double>((*split)[d].samples) / pace[d]);
      }
      double best = 1e300;
      for (int64_t a = 1; a <= batch - 2; ++a) {
        for (int64_t b = 1; a + b <= batch - 1; ++b) {
          const int64_t c = batch - a - b;
          const auto t = [&](int64_t n, size_t d) { return static_cast<double>(n) / pace[d]; };
          best = std::min(best, std::max({t(a, 0), t(b, 1), t(c, 2)}));
        }
      }
      EXPECT_DOUBLE_EQ(got, best) << "batch " << batch << " pace " << pace[0] << "," << pace[1]
                                  << "," << pace[2];
    }
  }
}

TEST(BatchSplitTest, BoostSplitsLikeScaleOnTheBoostedPaceAndEqualPacesLikeKeep) {
  // The split itself only sees paces: boost's are already boosted (train/replica_pace.h).
  for (BatchPolicy p : {BatchPolicy::kScale, BatchPolicy::kBoost}) {
    auto a = split_global_batch(p, {1, 0.8, 1}, 30, 2);
    ASSERT_TRUE(a.ok());
    EXPECT_EQ((*a)[1].samples, 8);  // 11, 8, 11 (11, 9, 10 takes 9 / 0.8 = 11.25 > 11)
    EXPECT_EQ(total(*a), 30);
    auto equal = split_global_batch(p, {1, 1, 1}, 10, 2);  // all at full pace: keep's split
    auto keep = split_global_batch(BatchPolicy::kKeep, {1, 1, 1}, 10, 2);
    ASSERT_TRUE(equal.ok() && keep.ok());
    for (size_t d = 0; d < 3; ++d) EXPECT_EQ((*equal)[d].samples, (*keep)[d].samples);
  }
  // Fewer micro-batches than replicas: keep refuses, the others split samples.
  EXPECT_FALSE(split_global_batch(BatchPolicy::kKeep, {1, 1, 1}, 12, 12).ok());
  auto one_micro = split_global_batch(BatchPolicy::kBoost, {1, 1, 1}, 12, 12);
  ASSERT_TRUE(one_micro.ok());
  for (const ReplicaBatch& b : *one_micro) EXPECT_EQ(b.samples, 4);
  EXPECT_FALSE(split_global_batch(BatchPolicy::kScale, {1, 1, 1}, 2, 2).ok());
  EXPECT_EQ(*parse_batch_policy("boost"), BatchPolicy::kBoost);
  EXPECT_STREQ(batch_policy_name(BatchPolicy::kBoost), "boost");
}

}  // namespace
}  // namespace ntp::train
