// Llama TP parity in-process: `degree` threads, each one rank's LlamaModel joined by a
// ThreadTpGroup, run forward/backward on the same batch; the loss, the replica's gradient norm and
// every logical gradient must equal the degree-1 model's. Layouts: 8 query heads in 2 KV groups
// (4 query heads per group), uneven and non-contiguous, so that at degrees 2, 3 and 4 KV groups
// span ranks (held by each, their gradient reduced inside the replica); a lopsided case leaves a
// rank without query heads, FFN units and LM-head rows; an accumulation case checks that two
// calls with loss_scale 0.5 equal one (a shared group's gradient is reduced once per call, never
// re-reduced).
//
// Per logical element: exactly one rank holds its counted copy (Param::counted); every other
// copy (KV groups) is bit-identical to it. Tolerances: the TP sums run in a different order than
// degree 1 (partial products over heads / FFN columns / vocabulary added by the all-reduce), so
// float32 results differ by rounding only: measured loss rel. error <= 8e-8 and per-tensor
// gradient rel. error <= 1.8e-6 (the printed figures); limits 1e-6 and 1e-5.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <ostream>
#include <thread>

#include "core/rng.h"
#include "kernels/cpu/gemm.h"
#include "model/llama_model.h"
#include "model/thread_tp_group.h"
#include "model_shapes.h"
#include "random_inputs.h"

namespace ntp::model {
namespace {

constexpr int64_t kB = 2, kT = 12;
constexpr uint64_t kSeed = 42;

// head_dim 4, 12 FFN units.
LlamaConfig parity_config() { return testing::tp_parity_llama(/*n_ffn=*/48, /*vocab_size=*/61); }

void make_batch(std::vector<int32_t>& tokens, std::vector<int32_t>& targets) {
  Rng rng(77);
  testdata::random_batch(rng, kB * kT, 61, tokens, targets);
}

void redraw_weights(LlamaModel& m) { testdata::redraw_logical_weights(m.params(), 1000, 0.3); }

struct RankResult {
  double loss = 0.0, norm = 0.0;
  std::vector<std::vector<float>> logical;    // per param: logical gradient, NaN where not held
  std::vector<std::vector<uint8_t>> counted;  // per param: 1 where this rank's copy counts
};

// calls = 1: one forward_backward; 2: two with loss_scale 0.5 each.
RankResult run_rank(const LlamaConfig& c, const LlamaShard& shard, TpGroup* group, int calls) {
  auto m = LlamaModel::create(c, shard, kSeed, group);
  NTP_CHECK(m.ok());
  redraw_weights(*m);
  std::vector<int32_t> tokens, targets;
  make_batch(tokens, targets);
  RankResult r;
  BackwardOptions opt;
  opt.loss_scale = 1.0f / static_cast<float>(calls);
  for (int i = 0; i < calls; ++i) {
    auto loss = m->forward_backward(tokens, targets, kB, kT, opt);
    NTP_CHECK(loss.ok());
    r.loss = *loss;
  }
  r.norm = m->grad_norm().value();
  for (const Param& p : m->params()) {
    const auto n = static_cast<size_t>(shape_numel(p.logical_shape));
    std::vector<float> logical(n, NAN);
    std::vector<uint8_t> counted(n, 0);
    p.scatter_to_logical(p.grad.span(), logical);
    for (int64_t i = 0; i < p.grad.numel(); ++i) {
      if (p.counted(i)) counted[static_cast<size_t>(p.logical_offset(i))] = 1;
    }
    r.logical.push_back(std::move(logical));
    r.counted.push_back(std::move(counted));
  }
  return r;
}

std::vector<RankResult> run_replica(const LlamaConfig& c, const std::vector<LlamaShard>& layout,
                                    int calls) {
  auto group = ThreadTpGroup::create(static_cast<int>(layout.size()));
  std::vector<RankResult> results(layout.size());
  std::vector<std::thread> threads;
  for (size_t r = 0; r < layout.size(); ++r) {
    threads.emplace_back([&, r] { results[r] = run_rank(c, layout[r], group[r].get(), calls); });
  }
  for (std::thread& t : threads) t.join();
  return results;
}

struct ParityCase {
  const char* name;
  std::vector<std::vector<int64_t>> heads;  // per rank; the other spaces are shuffled
  int calls = 1;
  bool lopsided = false;  // the last rank holds no FFN unit and no LM-head row either
};

void PrintTo(const ParityCase& pc, std::ostream* os) { *os << pc.name; }

class LlamaTpParityTest : public ::testing::TestWithParam<ParityCase> {};

TEST_P(LlamaTpParityTest, LossAndLogicalGradientsMatchDegreeOne) {
  kernels::cpu::set_blas_threads(1);  // ranks are threads: no shared kernel pool
  const ParityCase pc = GetParam();
  const LlamaConfig c = parity_config();
  const int degree = static_cast<int>(pc.heads.size());
  std::vector<LlamaShard> layout = shuffled_layout(c, degree, 5);
  for (int r = 0; r < degree; ++r)
    layout[static_cast<size_t>(r)].heads = pc.heads[static_cast<size_t>(r)];
  if (pc.lopsided) {
    LlamaShard& last = layout.back();
    LlamaShard& first = layout.front();
    first.ffn_units.insert(first.ffn_units.end(), last.ffn_units.begin(), last.ffn_units.end());
    first.head_rows.insert(first.head_rows.end(), last.head_rows.begin(), last.head_rows.end());
    last.ffn_units.clear();
    last.head_rows.clear();
  }
  ASSERT_TRUE(validate_layout(c, layout).ok());
  int shared = 0;
  for (int64_t g = 0; g < c.n_kv_head; ++g) {
    int holders = 0;
    for (const LlamaShard& s : layout) {
      const auto groups = kv_groups(c, s);
      holders += std::count(groups.begin(), groups.end(), g) > 0 ? 1 : 0;
    }
    shared += holders > 1 ? 1 : 0;
  }

  const std::vector<RankResult> ref = run_replica(c, {full_shard(c)}, 1);
  const std::vector<RankResult> tp = run_replica(c, layout, pc.calls);

  double worst_loss = 0.0, worst_grad = 0.0;
  for (const RankResult& r : tp) {
    const double e = std::abs(r.loss - ref[0].loss) / ref[0].loss;
    worst_loss = std::max(worst_loss, e);
    EXPECT_LT(e, 1e-6);
    EXPECT_LT(std::abs(r.norm - ref[0].norm) / ref[0].norm, 1e-5) << "gradient norm";
  }
  auto model = LlamaModel::create(c, full_shard(c), kSeed);
  ASSERT_TRUE(model.ok());
  for (size_t k = 0; k < ref[0].logical.size(); ++k) {
    const std::string& name = model->params()[k].name;
    const std::vector<float>& want = ref[0].logical[k];
    std::vector<float> merged(want.size(), NAN);
    for (size_t i = 0; i < want.size(); ++i) {
      int counted = 0;
      for (const RankResult& r : tp) {
        if (r.counted[k][i] == 0) continue;
        ++counted;
        merged[i] = r.logical[k][i];
      }
      ASSERT_EQ(counted, model->params()[k].replicated() ? degree : 1)
          << name << " element " << i << ": counted copies";
      for (const RankResult& r : tp) {  // every copy (KV groups, replicated) equals the counted
        if (std::isnan(r.logical[k][i])) continue;
        ASSERT_EQ(r.logical[k][i], merged[i]) << name << " " << i;
      }
    }
    double diff = 0.0, norm = 0.0;
    for (size_t i = 0; i < want.size(); ++i) {
      diff += (merged[i] - want[i]) * static_cast<double>(merged[i] - want[i]);
      norm += static_cast<double>(want[i]) * want[i];
    }
    const double e = std::sqrt(diff) / std::max(std::sqrt(norm), 1e-30);
    worst_grad = std::max(worst_grad, e);
    EXPECT_LT(e, 1e-5) << name;
  }
  std::printf(
      "%s: degree %d, %d shared KV group(s), loss %.6f, worst loss rel. error %.2e, "
      "worst gradient rel. error %.2e\n",
      pc.name, degree, shared, ref[0].loss, worst_loss, worst_grad);
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, LlamaTpParityTest,
    ::testing::Values(ParityCase{"degree2_groups_whole", {{0, 1, 2, 3}, {4, 5, 6, 7}}},
                      ParityCase{"degree2_both_groups_split", {{6, 0, 2, 5, 1}, {3, 7, 4}}},
                      ParityCase{"degree3_contiguous", {{0, 1, 2}, {3, 4, 5}, {6, 7}}},
                      ParityCase{"degree3_scattered", {{7, 0, 4}, {2, 5}, {1, 6, 3}}},
                      ParityCase{"degree4_scattered", {{5, 0}, {3, 6}, {1, 7}, {4, 2}}},
                      ParityCase{"degree4_uneven", {{0, 1, 2, 3, 4}, {5}, {6, 7}, {}}, 1, true},
                      ParityCase{
                          "degree3_two_calls_half_scale", {{0, 1, 2}, {3, 4, 5}, {6, 7}}, 2}),
    [](const ::testing::TestParamInfo<ParityCase>& case_info) {
      return std::string(case_info.param.name);
    });

}  // namespace
}  // namespace ntp::model
