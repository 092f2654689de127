#include "shard/cluster_spec.h"

#include <gtest/gtest.h>

namespace ntp::shard {
namespace {

ClusterSpec base_spec() {
  ClusterSpec spec;
  spec.domains = 4;
  spec.domain_size = 8;
  spec.min_tp = 6;
  spec.spaces = model_unit_spaces({.heads = 16, .hidden = 64, .ffn = 64, .vocab = 100});
  return spec;
}

// Validates and returns the error message ("" when valid), checking the code is kInvalidArgument.
std::string error_of(ClusterSpec spec) {
  Status s = validate_cluster_spec(spec);
  if (s.ok()) return "";
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  return s.message();
}

TEST(ParseSlotList, AcceptsListsAndRejectsMalformedItems) {
  auto ok = parse_slot_list("3:5,0:0", "--failed");
  ASSERT_TRUE(ok.ok());
  ASSERT_EQ(ok->size(), 2u);
  EXPECT_EQ((*ok)[0], (SlotRef{3, 5}));
  EXPECT_TRUE(parse_slot_list("", "--failed")->empty());
  for (const char* bad : {"3", "3:", ":4", "a:1", "1:2,", "1:2,,3:4", "1:2:3", "1 :2"}) {
    auto r = parse_slot_list(bad, "--failed");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("--failed"), std::string::npos) << bad;
    EXPECT_NE(r.status().message().find("DOMAIN:SLOT"), std::string::npos) << bad;
  }
}

TEST(ValidateClusterSpec, AcceptsAValidSpecAndSortsFailures) {
  ClusterSpec spec = base_spec();
  spec.failed = {{2, 1}, {0, 7}};
  ASSERT_TRUE(validate_cluster_spec(spec).ok());
  EXPECT_EQ(spec.failed.front(), (SlotRef{0, 7}));
  EXPECT_EQ(spec.degree(0), 7);
  EXPECT_EQ(spec.degree(1), 8);
  EXPECT_EQ(spec.healthy_slots(2), (std::vector<int>{0, 2, 3, 4, 5, 6, 7}));
}

TEST(ValidateClusterSpec, NamesTheBadValue) {
  ClusterSpec spec = base_spec();
  spec.failed = {{4, 0}};
  EXPECT_NE(error_of(spec).find("domain 4 is out of range"), std::string::npos);
  spec.failed = {{0, 8}};
  EXPECT_NE(error_of(spec).find("slot 8 is out of range"), std::string::npos);
  spec.failed = {{1, 2}, {1, 2}};
  EXPECT_NE(error_of(spec).find("1:2 is listed twice"), std::string::npos);
  spec.failed = {{1, 0}, {1, 1}, {1, 2}};
  EXPECT_NE(error_of(spec).find("TP degree 5, below --min-tp 6"), std::string::npos);
  spec = base_spec();
  spec.min_tp = 1;
  for (int l = 0; l < 8; ++l) spec.failed.push_back({3, l});
  EXPECT_NE(error_of(spec).find("domain 3 has every one of its 8 slots failed"), std::string::npos);
  spec = base_spec();
  spec.spaces[0].units = 5;
  EXPECT_NE(error_of(spec).find("heads has 5 units, fewer than TP degree 8"), std::string::npos);
  spec = base_spec();
  spec.min_tp = 9;
  EXPECT_NE(error_of(spec).find("--min-tp 9"), std::string::npos);
}

TEST(LeaveDomainsWithoutSlots, ADomainWhoseEverySlotFailedLeftTheJob) {
  ClusterSpec spec = base_spec();
  spec.min_tp = 1;
  for (int l = 0; l < 8; ++l) spec.failed.push_back({3, l});
  spec.failed.push_back({1, 2});
  spec.failed.push_back({9, 0});  // out of range: not counted, validation names it
  leave_domains_without_slots(spec);
  EXPECT_EQ(spec.left, std::vector<int>{3});
  leave_domains_without_slots(spec);  // once only
  EXPECT_EQ(spec.left, std::vector<int>{3});
  spec.failed.pop_back();
  ASSERT_TRUE(validate_cluster_spec(spec).ok()) << validate_cluster_spec(spec).message();
  EXPECT_EQ(spec.degree(3), 0);
  EXPECT_EQ(spec.degree(1), 7);
  // Every domain lost: no replica would run.
  spec = base_spec();
  spec.min_tp = 1;
  for (int d = 0; d < spec.domains; ++d) {
    for (int l = 0; l < 8; ++l) spec.failed.push_back({d, l});
  }
  leave_domains_without_slots(spec);
  EXPECT_NE(error_of(spec).find("at least one replica must run"), std::string::npos);
}

TEST(ValidateModelShape, RejectsIndivisibleShapes) {
  EXPECT_TRUE(validate_model_shape({.heads = 4, .hidden = 64, .ffn = 256, .ffn_block = 4}).ok());
  EXPECT_NE(
      validate_model_shape({.heads = 5, .hidden = 64, .ffn = 256}).message().find("--hidden 64"),
      std::string::npos);
  EXPECT_NE(validate_model_shape({.heads = 4, .hidden = 64, .ffn = 250, .ffn_block = 4})
                .message()
                .find("--ffn-block 4"),
            std::string::npos);
  EXPECT_NE(validate_model_shape({.heads = 0, .hidden = 64, .ffn = 64}).message().find("--heads"),
            std::string::npos);
}

TEST(ModelUnitSpaces, CountsParametersPerUnit) {
  const auto spaces = model_unit_spaces(
      {.heads = 4, .hidden = 64, .ffn = 256, .ffn_block = 2, .vocab = 100, .layers = 3});
  ASSERT_EQ(spaces.size(), 3u);
  // head_dim 16: Q,K,V columns (3 x 16 x 64) + biases (3 x 16) + output rows (16 x 64), x 3 layers.
  EXPECT_EQ(spaces[0].params_per_unit, 3 * (4 * 16 * 64 + 3 * 16));
  EXPECT_EQ(spaces[1].units, 128);
  EXPECT_EQ(spaces[1].params_per_unit, 3 * 2 * (2 * 64 + 1));
  EXPECT_EQ(spaces[2].params_per_unit, 64);
  // The unit spaces hold every TP-split parameter of the model exactly once.
  const std::int64_t per_layer = 64 * 3 * 64 + 3 * 64 + 64 * 64 + 64 * 256 + 256 + 256 * 64;
  EXPECT_EQ(
      spaces[0].units * spaces[0].params_per_unit + spaces[1].units * spaces[1].params_per_unit,
      3 * per_layer);
}

// A grouped-query shape (the Llama family): 8 query heads of size 12 (not hidden / heads) in 2 KV
// groups, gated FFN, untied head.
TEST(ModelUnitSpaces, GroupedQueryShapeHasADerivedKvSpace) {
  const ModelShape shape{.heads = 8,
                         .hidden = 64,
                         .ffn = 96,
                         .ffn_block = 4,
                         .vocab = 100,
                         .layers = 3,
                         .kv_heads = 2,
                         .head_dim = 12};
  ASSERT_TRUE(validate_model_shape(shape).ok());
  const auto spaces = model_unit_spaces(shape);
  ASSERT_EQ(spaces.size(), 5u);
  EXPECT_EQ(spaces[0].params_per_unit, 3 * 2 * 12 * 64);  // q rows + o columns
  EXPECT_EQ(spaces[1].params_per_unit, 3 * 4 * 3 * 64);   // gate, up rows + down columns
  EXPECT_EQ(spaces[2].params_per_unit, 64);
  EXPECT_EQ(spaces[3].units, 2);
  EXPECT_EQ(spaces[3].params_per_unit, 3 * 2 * 12 * 64);  // k and v rows
  EXPECT_TRUE(spaces[3].derived());
  EXPECT_EQ(spaces[3].derived_from, 0);
  EXPECT_EQ(spaces[3].source_stride, 4);
  EXPECT_EQ(spaces[4].name, "head_rows");
  EXPECT_FALSE(spaces[4].derived());
  // Together: every matrix of the model once (q 96x64, k, v 24x64, o 64x96, gate, up 96x64, down
  // 64x96 per layer; embedding and head 100x64).
  const std::int64_t per_layer = 96 * 64 + 2 * 24 * 64 + 64 * 96 + 3 * 96 * 64;
  std::int64_t total = 0;
  for (const UnitSpace& s : spaces) total += s.units * s.params_per_unit;
  EXPECT_EQ(total, 3 * per_layer + 2 * 100 * 64);

  // A derived space may have fewer units than ranks: degree 4 over 2 KV groups is valid.
  ClusterSpec spec;
  spec.domains = 2;
  spec.domain_size = 4;
  spec.spaces = spaces;
  EXPECT_TRUE(validate_cluster_spec(spec).ok());

  ModelShape bad = shape;
  bad.kv_heads = 3;
  EXPECT_NE(validate_model_shape(bad).message().find("--kv-heads 3"), std::string::npos);
}

}  // namespace
}  // namespace ntp::shard
