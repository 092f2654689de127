// The leader's look for repairs at every step boundary (train/admission.h): while no join request
// was made since its last look found none pending, the look is one store read; a request is found
// and stays found until its admission is written, then the look is one read again.
#include "train/admission.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "comm/store.h"
#include "shard/fold_sync_strategy.h"
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
  Result<std::int64_t> add(const std::string& key, std::int64_t delta) override {
    ++ops;
    return inner_->add(key, delta);
  }
  std::string describe() const override { return inner_->describe(); }
  int ops = 0;

 private:
  std::shared_ptr<comm::Store> inner_;
};

TEST(AdmissionTest, TheLeadersLookIsOneStoreReadWhileNoJoinRequestArrives) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("ntp-admission-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  auto file = comm::open_store("file:" + dir.string(), "admission");
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  auto store = std::make_shared<CountingStore>(*file);
  WorkerContext ctx;
  ctx.store = store;

  TrainConfig c;
  c.domains = 2;
  c.tp = 4;
  c.model.n_head = 8;
  c.model.n_embd = 32;
  c.model.ffn_unit = 4;
  shard::ClusterSpec spec = cluster_spec(c);
  spec.failed = {{1, 1}, {1, 2}};  // slots 5 and 6 are out of the job
  auto layout = shard::plan_cluster(spec, shard::FoldSyncStrategy());
  ASSERT_TRUE(layout.ok()) << layout.status().to_string();
  Job job;
  job.layout = *layout;
  const std::string group = "train/a0";

  int64_t seen = -1;
  store->ops = 0;
  EXPECT_TRUE(joiners_asking(ctx, group, job, seen).empty());
  EXPECT_EQ(store->ops, 1 + 2);  // the count, then each slot out of the job: one read when absent
  store->ops = 0;
  EXPECT_TRUE(joiners_asking(ctx, group, job, seen).empty());
  EXPECT_EQ(store->ops, 1);  // nothing new: the count alone

  // Slot 6's replacement asks (what wait_for_admission writes: its request, then the count).
  ASSERT_TRUE(store->set(join_key(group, 6), "1").ok());
  ASSERT_TRUE(store->add(join_requests_key(group), 1).ok());
  EXPECT_EQ(joiners_asking(ctx, group, job, seen), (std::vector<int>{6}));
  // Not admitted yet (say the re-formation failed before admit): found again.
  EXPECT_EQ(joiners_asking(ctx, group, job, seen), (std::vector<int>{6}));
  ASSERT_TRUE(store->set(join_key(group, 6) + "/taken", "1").ok());
  EXPECT_TRUE(joiners_asking(ctx, group, job, seen).empty());
  store->ops = 0;
  EXPECT_TRUE(joiners_asking(ctx, group, job, seen).empty());
  EXPECT_EQ(store->ops, 1);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ntp::train
