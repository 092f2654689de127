// Llama TP parity across real processes: `degree` forked processes, each one rank's LlamaModel
// over a Gloo communicator (model::CommTpGroup, the machinery of tp_parity_test.cpp), run one
// forward/backward; the loss, the replica gradient norm and every logical gradient must equal the
// single-process model's. 8 query heads in 2 KV groups, so KV groups span ranks at both degrees.
// Children write their loss, norm and gradients (scattered into logical tensors, NaN where not
// held, plus which elements they count) to files; the parent checks each element has exactly one
// counted copy, every copy equals it, and compares. Tolerances as in llama_tp_parity_test.cpp
// (float32 rounding of differently ordered sums): loss 1e-6, gradients 1e-5 per tensor.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <ostream>
#include <thread>

#include "comm/gloo_communicator.h"
#include "comm/store.h"
#include "core/rng.h"
#include "kernels/cpu/gemm.h"
#include "model/comm_tp_group.h"
#include "model/llama_model.h"
#include "model_shapes.h"
#include "multiprocess.h"
#include "random_inputs.h"

namespace ntp::model {
namespace {

constexpr int64_t kB = 2, kT = 10;

LlamaConfig process_config() { return testing::tp_parity_llama(/*n_ffn=*/40, /*vocab_size=*/53); }

void redraw_weights(LlamaModel& m) { testdata::redraw_logical_weights(m.params(), 500, 0.3); }

// {loss, norm} of one forward/backward, or the first error.
Result<std::array<double, 2>> run(LlamaModel& m) {
  Rng rng(88);
  std::vector<int32_t> tokens, targets;
  testdata::random_batch(rng, kB * kT, 53, tokens, targets);
  redraw_weights(m);
  std::array<double, 2> out{};
  NTP_ASSIGN_OR_RETURN(out[0], m.forward_backward(tokens, targets, kB, kT));
  NTP_ASSIGN_OR_RETURN(out[1], m.grad_norm());
  return out;
}

int run_rank(const std::string& dir, const std::vector<LlamaShard>& layout, int rank) {
  kernels::cpu::set_blas_threads(1);
  auto store = comm::open_store("file:" + dir, "llama");
  if (!store.ok()) return 10;
  auto communicator = comm::testing::connect_rank(*store, rank, static_cast<int>(layout.size()),
                                                  "tp", std::chrono::seconds(30));
  if (!communicator.ok()) return 11;
  CommTpGroup group(**communicator);
  auto model = LlamaModel::create(process_config(), layout[static_cast<size_t>(rank)], 3, &group);
  if (!model.ok()) return 12;
  auto result = run(*model);
  if (!result.ok()) return comm::testing::child_failure(rank, result.status(), 13);
  std::ofstream out(dir + "/rank" + std::to_string(rank) + ".bin", std::ios::binary);
  out.write(reinterpret_cast<const char*>(result->data()), sizeof(double) * 2);
  for (const Param& p : model->params()) {
    const auto n = static_cast<size_t>(shape_numel(p.logical_shape));
    std::vector<float> logical(n, NAN), counted(n, 0.0f);
    p.scatter_to_logical(p.grad.span(), logical);
    for (int64_t i = 0; i < p.grad.numel(); ++i) {
      if (p.counted(i)) counted[static_cast<size_t>(p.logical_offset(i))] = 1.0f;
    }
    out.write(reinterpret_cast<const char*>(logical.data()),
              static_cast<std::streamsize>(n * sizeof(float)));
    out.write(reinterpret_cast<const char*>(counted.data()),
              static_cast<std::streamsize>(n * sizeof(float)));
  }
  return out ? 0 : 14;
}

struct ProcessCase {
  const char* name;
  std::vector<std::vector<int64_t>> heads;  // per rank; the other spaces shuffled
};
void PrintTo(const ProcessCase& pc, std::ostream* os) { *os << pc.name; }

class LlamaTpProcessTest : public ::testing::TestWithParam<ProcessCase> {};

TEST_P(LlamaTpProcessTest, LossAndLogicalGradientsMatchOneProcess) {
  const ProcessCase pc = GetParam();
  const LlamaConfig c = process_config();
  const int degree = static_cast<int>(pc.heads.size());
  std::vector<LlamaShard> layout = shuffled_layout(c, degree, 9);
  for (int r = 0; r < degree; ++r) {
    layout[static_cast<size_t>(r)].heads = pc.heads[static_cast<size_t>(r)];
  }
  ASSERT_TRUE(validate_layout(c, layout).ok());
  std::string dir = (std::filesystem::temp_directory_path() / "ntp-llama-tp-XXXXXX").string();
  ASSERT_NE(mkdtemp(dir.data()), nullptr);

  const std::vector<pid_t> pids =
      comm::testing::spawn_ranks(degree, [&](int r) { return run_rank(dir, layout, r); });
  for (const comm::testing::ChildExit& e :
       comm::testing::wait_all(pids, std::chrono::seconds(120))) {
    ASSERT_TRUE(e.exited && e.code == 0) << "rank process " << e.pid << " failed (exit code "
                                         << e.code << ", signal " << e.signal << ")";
  }

  // The single-process reference, after the children are gone (no fork with BLAS threads).
  auto ref = LlamaModel::create(c, full_shard(c), 3);
  ASSERT_TRUE(ref.ok());
  const std::array<double, 2> want = run(*ref).value();
  std::vector<std::ifstream> files;
  double worst_loss = 0.0, worst_grad = 0.0;
  for (int r = 0; r < degree; ++r) {
    files.emplace_back(dir + "/rank" + std::to_string(r) + ".bin", std::ios::binary);
    double header[2] = {0.0, 0.0};
    files.back().read(reinterpret_cast<char*>(header), sizeof(header));
    ASSERT_TRUE(files.back().good());
    worst_loss = std::max(worst_loss, std::abs(header[0] - want[0]) / want[0]);
    EXPECT_LT(std::abs(header[0] - want[0]) / want[0], 1e-6) << "rank " << r;
    EXPECT_LT(std::abs(header[1] - want[1]) / want[1], 1e-5) << "gradient norm, rank " << r;
  }
  for (const Param& p : ref->params()) {
    const auto n = static_cast<size_t>(p.grad.numel());
    std::vector<float> merged(n, NAN), grad(n), counted(n);
    std::vector<std::vector<float>> held(static_cast<size_t>(degree));
    for (int r = 0; r < degree; ++r) {
      std::ifstream& f = files[static_cast<size_t>(r)];
      f.read(reinterpret_cast<char*>(grad.data()), static_cast<std::streamsize>(n * 4));
      f.read(reinterpret_cast<char*>(counted.data()), static_cast<std::streamsize>(n * 4));
      ASSERT_TRUE(f.good());
      held[static_cast<size_t>(r)] = grad;
      for (size_t i = 0; i < n; ++i) {
        if (counted[i] == 0.0f) continue;
        if (p.replicated() && r > 0)
          continue;  // replicated: rank 0's copy, the rest compared below
        ASSERT_TRUE(std::isnan(merged[i])) << p.name << " element " << i << " counted twice";
        merged[i] = grad[i];
      }
    }
    double diff = 0.0, norm = 0.0;
    for (size_t i = 0; i < n; ++i) {
      ASSERT_FALSE(std::isnan(merged[i])) << p.name << " element " << i << " counted by no rank";
      for (const std::vector<float>& h : held) {
        if (std::isnan(h[i])) continue;
        ASSERT_EQ(h[i], merged[i]) << p.name << " copy of element " << i;
      }
      const double g = p.grad[static_cast<int64_t>(i)];
      diff += (merged[i] - g) * (merged[i] - g);
      norm += g * g;
    }
    const double e = std::sqrt(diff) / std::max(std::sqrt(norm), 1e-30);
    worst_grad = std::max(worst_grad, e);
    EXPECT_LT(e, 1e-5) << p.name;
  }
  std::printf("%s: worst loss rel. error %.2e, worst gradient rel. error %.2e\n", pc.name,
              worst_loss, worst_grad);
  std::filesystem::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, LlamaTpProcessTest,
    ::testing::Values(ProcessCase{"degree3_kv_groups_span_ranks", {{0, 1, 2}, {3, 4, 5}, {6, 7}}},
                      ProcessCase{"degree4_scattered", {{6, 1}, {0, 5, 3}, {7}, {2, 4}}}),
    [](const ::testing::TestParamInfo<ProcessCase>& case_info) {
      return std::string(case_info.param.name);
    });

}  // namespace
}  // namespace ntp::model
