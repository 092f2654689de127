// The leader's look for repairs at a step boundary (train/admission.h): while no join notice
// arrived since its last look left none to admit, the look is no store I/O; a notice makes it
// one get_many; a request is found and stays found until its admission is written.
#include "train/admission.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "comm/store.h"
#include "core/check.h"
#include "shard/fold_sync_strategy.h"
#include "text_files.h"
#include "train/train_config.h"

namespace ntp::train {
namespace {

// Forwards to a file store and counts the operations.
class CountingStore : public comm::Store {
 public:
  explicit CountingStore(std::shared_ptr<comm::Store> inner) : inner_(std::move(inner)) {}
  Status set(const std::string& key, const std::string& value) override {
    ++ops;
    return inner_->set(key, value);
  }
  Result<std::string> get(const std::string& key) override {
    ++ops;
    return inner_->get(key);
  }
  Result<bool> exists(const std::string& key) override {
    ++ops;
    return inner_->exists(key);
  }
  Result<bool> claim(const std::string& key, const std::string& value) override {
    ++ops;
    return inner_->claim(key, value);
  }
  Result<std::int64_t> add(const std::string& key, std::int64_t delta) override {
    ++ops;
    return inner_->add(key, delta);
  }
  Result<std::vector<std::optional<std::string>>> get_many(
      const std::vector<std::string>& keys) override {
    ++ops;
    return inner_->get_many(keys);
  }
  std::string describe() const override { return inner_->describe(); }
  int ops = 0;

 private:
  std::shared_ptr<comm::Store> inner_;
};

// The cluster of a 2 x 4 job of a small model.
shard::ClusterSpec two_by_four() {
  TrainConfig c;
  c.domains = 2;
  c.tp = 4;
  c.model.n_head = 8;
  c.model.n_embd = 32;
  c.model.ffn_unit = 4;
  return cluster_spec(c);
}

// A file store in `dir` (removed with it).
std::shared_ptr<comm::Store> file_store(const ntp::testing::TempDir& dir) {
  Result<std::shared_ptr<comm::Store>> store = comm::open_store("file:" + dir.path(), "admission");
  NTP_CHECK_MSG(store.ok(), store.status().to_string());
  return *store;
}

TEST(AdmissionTest, TheLeadersLookIsNoStoreIoWhileNoJoinNoticeArrives) {
  const ntp::testing::TempDir dir("ntp-admission");
  auto store = std::make_shared<CountingStore>(file_store(dir));
  WorkerContext ctx;
  ctx.store = store;

  shard::ClusterSpec spec = two_by_four();
  spec.failed = {{1, 1}, {1, 2}};  // slots 5 and 6 are out of the job
  auto layout = shard::plan_cluster(spec, shard::FoldSyncStrategy());
  ASSERT_TRUE(layout.ok()) << layout.status().to_string();
  Job job;
  job.layout = *layout;
  const std::string group = "train/a0";

  int64_t seen = -1, notices = 0;  // `notices`: what the leader's failure watch has counted
  store->ops = 0;
  EXPECT_TRUE(joiners_asking(ctx, group, job, /*min_tp=*/1, notices, seen).empty());
  EXPECT_EQ(store->ops, 1);  // a first look: the requests and admissions of slots 5 and 6
  store->ops = 0;
  EXPECT_TRUE(joiners_asking(ctx, group, job, /*min_tp=*/1, notices, seen).empty());
  EXPECT_EQ(store->ops, 0);  // no notice since: nothing read

  // Slot 6's replacement asks (what wait_for_admission writes: its request, then the notice).
  ASSERT_TRUE(store->set(join_key(group, 6), "1").ok());
  ++notices;
  store->ops = 0;
  EXPECT_EQ(joiners_asking(ctx, group, job, /*min_tp=*/1, notices, seen), (std::vector<int>{6}));
  EXPECT_EQ(store->ops, 1);
  // Not admitted yet (say the re-formation failed before admit): found again.
  EXPECT_EQ(joiners_asking(ctx, group, job, /*min_tp=*/1, notices, seen), (std::vector<int>{6}));
  ASSERT_TRUE(store->set(join_key(group, 6) + "/taken", "1").ok());
  EXPECT_TRUE(joiners_asking(ctx, group, job, /*min_tp=*/1, notices, seen).empty());
  store->ops = 0;
  EXPECT_TRUE(joiners_asking(ctx, group, job, /*min_tp=*/1, notices, seen).empty());
  EXPECT_EQ(store->ops, 0);
}

// A domain that left the job (its survivors parked below --min-tp) comes back only whole enough:
// its joiners are held back while fewer than min_tp of them ask, and admitted together after.
TEST(AdmissionTest, JoinersOfADomainThatLeftAreHeldBackUntilMinTpOfThemAsk) {
  const ntp::testing::TempDir dir("ntp-admission-left");
  WorkerContext ctx;
  ctx.store = file_store(dir);
  shard::ClusterSpec spec = two_by_four();
  spec.left = {1};  // slots 4..7 are out of the job
  auto layout = shard::plan_cluster(spec, shard::FoldSyncStrategy());
  ASSERT_TRUE(layout.ok()) << layout.status().to_string();
  Job job;
  job.layout = *layout;
  const std::string group = "train/a0";
  int64_t notices = 0;
  auto ask = [&](int rank, const std::string& ticket) {
    ASSERT_TRUE(ctx.store->set(join_key(group, rank), ticket).ok());
    ++notices;
  };
  ask(4, "0.p3");  // three parked survivors ask at once
  ask(5, "0.p3");
  ask(7, "0.p3");
  int64_t seen = -1;
  EXPECT_TRUE(joiners_asking(ctx, group, job, /*min_tp=*/4, notices, seen).empty());
  EXPECT_EQ(seen, notices);  // held back: looked for again at the next notice, not before
  int64_t seen_at_min_tp_3 = -1;
  EXPECT_EQ(joiners_asking(ctx, group, job, /*min_tp=*/3, notices, seen_at_min_tp_3),
            (std::vector<int>{4, 5, 7}));
  ask(6, "1");  // the repaired slot's replacement
  EXPECT_EQ(joiners_asking(ctx, group, job, /*min_tp=*/4, notices, seen),
            (std::vector<int>{4, 5, 6, 7}));
}

}  // namespace
}  // namespace ntp::train
