// The bridge from a ClusterLayout to each worker: every worker's view of the sync plan must agree
// with every other's, and together they must cover the model exactly once per replica.
#include "train/worker_role.h"

#include <gtest/gtest.h>

#include <map>
#include <numeric>

#include "model/llama_shard.h"
#include "model/model_factory.h"
#include "shard/fold_sync_strategy.h"
#include "shard/native_sync_strategy.h"
#include "train/unit_blocks.h"

namespace ntp::train {
namespace {

// The layout of `domains` replicas of `tp` slots over `config`'s unit spaces, planned with the
// native strategy or the fold.
shard::ClusterLayout plan_model(const model::ModelConfig& config, int domains, int tp,
                                std::vector<shard::SlotRef> failed, bool native,
                                std::vector<std::vector<double>> speeds = {}) {
  shard::ClusterSpec spec;
  spec.domains = domains;
  spec.domain_size = tp;
  spec.failed = std::move(failed);
  spec.speeds = std::move(speeds);
  spec.spaces = shard::model_unit_spaces(model_shape(config));
  shard::FoldSyncStrategy fold;
  shard::NativeSyncStrategy nat(tp);
  auto layout = shard::plan_cluster(spec, native ? static_cast<const shard::SyncStrategy&>(nat)
                                                 : static_cast<const shard::SyncStrategy&>(fold));
  EXPECT_TRUE(layout.ok()) << layout.status().to_string();
  return *layout;
}

shard::ClusterLayout plan(int domains, int tp, std::vector<shard::SlotRef> failed, bool native) {
  const model::GptConfig c{.n_head = 8, .n_embd = 32, .vocab_size = 259, .ffn_unit = 4};
  return plan_model(c, domains, tp, std::move(failed), native);
}

void check_roles(const shard::ClusterLayout& layout) {
  const std::vector<shard::SlotRef> slots = active_slots(layout);
  std::vector<WorkerRole> roles;
  for (const shard::SlotRef& s : slots) {
    auto role = worker_role(layout, s);
    ASSERT_TRUE(role.ok());
    roles.push_back(*role);
  }
  const size_t spaces = layout.spec.spaces.size();
  std::map<std::string, const DpSet*> first_seen;
  // covered[space][domain-agnostic unit]: DP sets reducing it (each must be exactly one).
  std::vector<std::vector<int>> reduced(spaces);
  for (size_t sp = 0; sp < spaces; ++sp) reduced[sp].assign(layout.spec.spaces[sp].units, 0);
  std::vector<int> parts_seen;
  for (const WorkerRole& r : roles) {
    EXPECT_EQ(r.world_size, static_cast<int>(slots.size()));
    EXPECT_EQ(slots[static_cast<size_t>(r.world_rank)], r.slot);
    EXPECT_EQ(r.replica_world_ranks[static_cast<size_t>(r.tp_rank)], r.world_rank);
    // Fold links are symmetric: what I send to q, q receives from me.
    for (const FoldLink& out : r.fold_out) {
      const WorkerRole& peer =
          roles[static_cast<size_t>(r.replica_world_ranks[static_cast<size_t>(out.peer)])];
      bool matched = false;
      for (const FoldLink& in : peer.fold_in) {
        matched |= in.peer == r.tp_rank && in.space == out.space && in.units == out.units;
      }
      EXPECT_TRUE(matched);
      EXPECT_EQ(intersect(out.units, r.units[static_cast<size_t>(out.space)]), out.units);
    }
    for (const DpSet& set : r.dp_sets) {
      EXPECT_EQ(set.world_ranks[static_cast<size_t>(set.my_index)], r.world_rank);
      EXPECT_EQ(set.world_ranks.size(), layout.replicas.size());  // one member per replica
      auto [it, inserted] = first_seen.emplace(set.name, &set);
      if (!inserted) {
        EXPECT_EQ(it->second->world_ranks, set.world_ranks) << set.name;
        ASSERT_EQ(it->second->slices.size(), set.slices.size()) << set.name;
        for (size_t i = 0; i < set.slices.size(); ++i) {
          EXPECT_EQ(it->second->slices[i].space, set.slices[i].space);
          EXPECT_EQ(it->second->slices[i].units, set.slices[i].units);
          EXPECT_EQ(it->second->slices[i].part, set.slices[i].part);
        }
        continue;
      }
      for (const DpSlice& slice : set.slices) {
        if (slice.space == DpSlice::kReplicated) {
          parts_seen.push_back(slice.part);
          continue;
        }
        for (int64_t u : slice.units.ids())
          ++reduced[static_cast<size_t>(slice.space)][static_cast<size_t>(u)];
      }
    }
  }
  for (size_t sp = 0; sp < spaces; ++sp) {
    for (int count : reduced[sp]) ASSERT_EQ(count, 1) << "space " << sp;
  }
  std::sort(parts_seen.begin(), parts_seen.end());
  for (size_t p = 0; p < parts_seen.size(); ++p) EXPECT_EQ(parts_seen[p], static_cast<int>(p));
  EXPECT_EQ(static_cast<int>(parts_seen.size()), roles.front().replicated_parts);
}

TEST(WorkerRoleTest, EveryWorkerAgreesOnTheSyncPlanAndItCoversTheModelOnce) {
  for (bool native : {false, true}) {
    check_roles(plan(3, 4, {}, native));
    check_roles(plan(3, 4, {{1, 3}, {2, 2}, {2, 3}}, native));
    check_roles(plan(2, 8, {{1, 5}, {1, 6}, {1, 7}}, native));
    check_roles(plan(4, 5, {{0, 0}, {1, 4}, {1, 2}, {3, 1}}, native));
    check_roles(plan(1, 3, {{0, 1}}, native));
  }
}

TEST(WorkerRoleTest, FailedSlotsHaveNoRole) {
  const shard::ClusterLayout layout = plan(2, 4, {{1, 2}}, false);
  EXPECT_EQ(worker_role(layout, {1, 2}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(worker_role(layout, {2, 0}).status().code(), StatusCode::kInvalidArgument);
  auto role = worker_role(layout, {1, 3});
  ASSERT_TRUE(role.ok());
  EXPECT_EQ(role->degree, 3);
  EXPECT_EQ(role->world_rank, 6);  // slots 0:0-3, 1:0, 1:1, then 1:3
}

// Llama with 8 query heads in 2 KV groups (4 query heads each), as issue 21's parity asks.
model::ModelConfig llama_config() {
  return model::LlamaConfig{
      .n_head = 8, .n_kv_head = 2, .n_embd = 32, .n_ffn = 48, .vocab_size = 259, .ffn_unit = 4};
}

shard::ClusterLayout plan_llama(int domains, int tp, std::vector<shard::SlotRef> failed,
                                bool native, std::vector<std::vector<double>> speeds = {}) {
  return plan_model(llama_config(), domains, tp, std::move(failed), native, std::move(speeds));
}

// Expects every sharded parameter of m in the layout space its UnitSpaceId numbers, with that
// space's unit count, and the spaces' parameter counts plus the replicated ones to add up to
// num_params; returns the replicated parameters' count.
int64_t params_outside_spaces(const model::Model& m, const std::vector<shard::UnitSpace>& spaces,
                              int64_t num_params) {
  int64_t replicated = 0;
  for (const model::Param& p : m.params()) {
    const ParamGeometry g = ParamGeometry::of(p);
    if (g.space < 0) {
      replicated += shape_numel(p.logical_shape);
      continue;
    }
    EXPECT_LT(g.space, static_cast<int>(spaces.size())) << p.name;
    if (g.space >= static_cast<int>(spaces.size())) continue;
    EXPECT_EQ(g.units, spaces[static_cast<size_t>(g.space)].units) << p.name;
  }
  int64_t sharded = 0;
  for (const shard::UnitSpace& s : spaces) sharded += s.units * s.params_per_unit;
  EXPECT_EQ(sharded + replicated, num_params);
  return replicated;
}

TEST(WorkerRoleTest, LlamaSpacesAreTheModelsInUnitSpaceIdOrder) {
  const model::ModelConfig c = llama_config();
  const std::vector<shard::UnitSpace> spaces = shard::model_unit_spaces(model_shape(c));
  ASSERT_EQ(spaces.size(), 5u);
  const char* names[] = {"heads", "ffn", "vocab", "kv", "head_rows"};
  for (size_t i = 0; i < spaces.size(); ++i) EXPECT_EQ(spaces[i].name, names[i]);
  EXPECT_EQ(spaces[3].derived_from, 0);
  EXPECT_EQ(spaces[3].source_stride, 4);  // group g goes with query head 4 g
  // Every parameter of the model lies in the layout space its UnitSpaceId numbers, with that
  // space's unit count, and the spaces' parameter counts add up to the model's (the RMSNorm
  // weights, 2 C per layer + C, being the replicated rest).
  Result<std::unique_ptr<model::Model>> m = model::create_model(
      c,
      [&] {
        const model::LlamaShard f = model::full_shard(c.llama());
        return model::ModelShard{f.heads, f.ffn_units, f.vocab_rows, f.head_rows, {}};
      }(),
      1);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(params_outside_spaces(**m, spaces, c.num_params()),
            2 * c.n_embd * c.n_layer + c.n_embd);
}

// The MoE family: Llama's five spaces with the dense FFN's empty (derived, so no rank must hold
// one), plus the experts; every parameter lies in the space its UnitSpaceId numbers with that
// space's unit count, and the counts add up (replicated: the norms and each layer's router).
TEST(WorkerRoleTest, MoeSpacesAddTheExpertsAfterLlamas) {
  model::ModelConfig c = llama_config();
  c.family = model::ModelFamily::kMoe;
  c.n_ffn = 24;
  c.n_experts = 5;
  const std::vector<shard::UnitSpace> spaces = shard::model_unit_spaces(model_shape(c));
  ASSERT_EQ(spaces.size(), 6u);
  const char* names[] = {"heads", "ffn", "vocab", "kv", "head_rows", "experts"};
  for (size_t i = 0; i < spaces.size(); ++i) EXPECT_EQ(spaces[i].name, names[i]);
  EXPECT_EQ(spaces[1].units, 0);
  EXPECT_TRUE(spaces[1].derived());
  EXPECT_EQ(spaces[5].units, 5);
  model::ModelShard shard;
  const model::LlamaShard f = model::full_shard(c.llama());
  shard.heads = f.heads;
  shard.vocab_rows = f.vocab_rows;
  shard.head_rows = f.head_rows;
  shard.experts = {0, 1, 2, 3, 4};
  Result<std::unique_ptr<model::Model>> m = model::create_model(c, shard, 1);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  // Replicated: the norms and each layer's router [E, C].
  EXPECT_EQ(params_outside_spaces(**m, spaces, c.num_params()),
            (2 * c.n_embd + 5 * c.n_embd) * c.n_layer + c.n_embd);

  // With 2 shared experts the FFN space holds their columns: 2 x 24 / ffn_unit 4 = 12 units.
  c.n_shared_experts = 2;
  const std::vector<shard::UnitSpace> with_shared = shard::model_unit_spaces(model_shape(c));
  ASSERT_EQ(with_shared.size(), 6u);
  EXPECT_EQ(with_shared[1].units, 12);
  EXPECT_FALSE(with_shared[1].derived());
  shard.ffn_units.resize(12);
  std::iota(shard.ffn_units.begin(), shard.ffn_units.end(), int64_t{0});
  m = model::create_model(c, shard, 1);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ(params_outside_spaces(**m, with_shared, c.num_params()),
            (2 * c.n_embd + 5 * c.n_embd) * c.n_layer + c.n_embd);
}

// Mixed degrees {4, 3, 2} (and speed-weighted replicas): in every replica the KV space's owners
// are the ranks of each group's first query head, the same ranks the model marks as owners
// (Param::unit_copy clear), every worker agrees on the sync plan and it reduces each unit of each
// space exactly once.
TEST(WorkerRoleTest, LlamaKvOwnersFollowTheQueryHeadsAtMixedDegrees) {
  const model::ModelConfig c = llama_config();
  for (bool native : {false, true}) {
    for (bool weighted : {false, true}) {
      std::vector<std::vector<double>> speeds;
      if (weighted) speeds = {{1, 1, 1, 1}, {1, 0.5, 1, 1}, {0.4, 1, 1, 1}};
      const shard::ClusterLayout layout =
          plan_llama(3, 4, {{1, 3}, {2, 2}, {2, 3}}, native, speeds);
      check_roles(layout);
      for (const shard::SlotRef& slot : active_slots(layout)) {
        Result<WorkerRole> role = worker_role(layout, slot);
        ASSERT_TRUE(role.ok());
        const model::LlamaShard shard{role->shard.heads, role->shard.ffn_units,
                                      role->shard.vocab_rows, role->shard.head_rows};
        std::vector<int64_t> owned;
        for (int64_t g : model::kv_groups(c.llama(), shard)) {
          if (model::owns_kv_group(c.llama(), shard, g)) owned.push_back(g);
        }
        EXPECT_EQ(role->units[3].ids(), owned) << slot.domain << ":" << slot.slot;
        EXPECT_EQ(role->units[4].ids(), role->shard.head_rows);
        Result<std::unique_ptr<model::Model>> m = model::create_model(c, role->shard, 1);
        ASSERT_TRUE(m.ok()) << m.status().to_string();
        const model::Param* k = (*m)->find("model.layers.0.self_attn.k_proj.weight");
        ASSERT_NE(k, nullptr);
        std::vector<int64_t> counted;
        for (size_t u = 0; u < k->logical_index.size() / static_cast<size_t>(c.head_size()); ++u) {
          if (k->unit_copy.empty() || k->unit_copy[u] == 0) {
            counted.push_back(k->logical_index[u * static_cast<size_t>(c.head_size())] /
                              c.head_size());
          }
        }
        EXPECT_EQ(counted, owned);
      }
    }
  }
}

}  // namespace
}  // namespace ntp::train
