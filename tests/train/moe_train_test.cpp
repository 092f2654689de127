// `ntp train --model moe` end to end with real worker processes over Gloo (`ntp launch`): a Llama
// decoder with Mixtral MoE FFNs, 4 experts of width 16, top-2, 8 query heads in 2 KV groups
// (docs/model.md, "Mixture of Experts: the model"). The experts are a unit space: at TP 3 the
// trainer deals them 2/1/1 over the ranks, and with two replicas the DP sync reduces each expert
// between its holders in the replicas, whatever layout each replica has.
//
//   one replica at TP 3 (replicated and ZeRO-1 optimizers) against one process, and {2,1}
//   (2 x 2 with slot 1:1 failed, fold and native, the half-pace replica taking 8 of the 24 samples
//   in whole micro-batches: the default policy) against 2 x 2: the first step's gradient within
//   1e-5 relative L2 per tensor, the loss within 1e-6 at each of 20 steps, each tensor's weight
//   change within 1e-4: the limits of llama_train_parity_test, whose argument carries over (only
//   float32 sums run in another order: the TP all-reduces, now also of the experts' partial
//   outputs and the router gradient; runs: gradient <= 3.6e-7, loss <= 3.1e-9, weight change
//   <= 1.8e-6). Every worker's dump must agree bit for bit (the replicated
//   router and norms; each expert is on one rank per replica) and every element must be held.
//   One shared expert (its columns the FFN units) at TP 3 with ZeRO-1 against one process, with the
//   same limits (runs: 4.0e-7, 4.5e-9, 5.8e-7).
//   The all-to-all dispatch at {3,2} (2 x 3, slot 1:1 failed, ZeRO-1) against the all-reduce one at
//   2 x 2, with the same limits (runs: 2.8e-7, 5.6e-9, 6.0e-6).
//   The loss falls: the mean of the last 5 steps is below the first step's by 0.2 nats at least.
//   Checkpoints: 10 steps at {2,1}, saved (each expert written once, by its holder in each
//   replica's layout), then 10 more at {2,1} (bit for bit) or at 2 x 3 (experts dealt 2/1/1:
//   loss within 1e-6 and weight change within 1e-4 of the uninterrupted run, as Llama's resume;
//   runs: 1.4e-9, 8.1e-8).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <numeric>

#include "child_process.h"
#include "job_scratch.h"
#include "model/moe_model.h"
#include "parity_jobs.h"

namespace ntp::train {
namespace {

namespace fs = std::filesystem;

constexpr int kSteps = 20;

model::MoeModelConfig moe_model(int64_t shared = 0) {
  model::MoeModelConfig c;
  c.n_shared = shared;
  c.llama = parity::parity_llama();
  c.llama.n_ffn = 16;  // one expert's width (4 units of ffn_unit 4: unused, no dense FFN)
  c.n_experts = 4;
  c.top_k = 2;
  return c;
}

using parity::describe;
using parity::JobSpec;
using parity::Worst;

// The full model at ntp train's seed (1234): the parameter list and initial values the dumps are
// read against.
model::MoeModel full_model(int64_t shared = 0) {
  const model::MoeModelConfig m = moe_model(shared);
  model::LlamaShard shard = model::full_shard(m.decoder());
  if (shared == 0) shard.ffn_units.clear();
  std::vector<int64_t> experts(static_cast<size_t>(m.n_experts));
  std::iota(experts.begin(), experts.end(), int64_t{0});
  return model::MoeModel::create(m, shard, experts, 1234).value();
}

parity::DumpedRun run_job(const JobSpec& spec, const std::string& name,
                          const std::vector<std::string>& extra = {}, int64_t shared = 0) {
  const fs::path dir = test_jobs::scratch_dir() / ("moe-" + name);
  const model::MoeModelConfig m = moe_model(shared);
  std::vector<std::string> args =
      parity::launch_args(spec.domains, spec.tp, spec.strategy, spec.optimizer, m.llama);
  args.insert(args.end(), {"--model", "moe", "--experts", std::to_string(m.n_experts), "--top-k",
                           std::to_string(m.top_k), "--kv-heads", std::to_string(m.llama.n_kv_head),
                           "--ffn", std::to_string(m.llama.n_ffn), "--shared-experts",
                           std::to_string(shared), "--no-live-recovery"});
  const std::vector<std::string> job = parity::job_flags(dir, kSteps, 24, 5, spec.failed, extra);
  args.insert(args.end(), job.begin(), job.end());
  const model::MoeModel model = full_model(shared);
  return parity::run_and_read(args, dir, model.params(), describe(spec));
}

// Loss per step within 1e-6, step-0 gradient 1e-5, weight change 1e-4: parity::compare_runs.
Worst compare(const parity::DumpedRun& got, const parity::DumpedRun& want, const std::string& label,
              int64_t shared = 0) {
  const model::MoeModel init = full_model(shared);
  return parity::compare_runs(got, want, init.params(), kSteps, label);
}

void expect_loss_falls(const parity::DumpedRun& run, const std::string& label) {
  ASSERT_EQ(run.losses.size(), static_cast<size_t>(kSteps)) << label;
  const double last5 = std::accumulate(run.losses.end() - 5, run.losses.end(), 0.0) / 5.0;
  std::printf("%s: loss %.4f at step 0, %.4f mean of the last 5\n", label.c_str(), run.losses[0],
              last5);
  EXPECT_LT(last5, run.losses[0] - 0.2) << label;
}

TEST(MoeTrainTest, OneReplicaAtTpThreeMatchesOneProcessAndLearns) {
  const parity::DumpedRun single = run_job({1, 1, "", "fold", "replicated"}, "single");
  expect_loss_falls(single, "moe one process");
  for (const char* optimizer : {"replicated", "sharded"}) {
    const JobSpec spec{1, 3, "", "fold", optimizer};
    const parity::DumpedRun tp3 = run_job(spec, std::string("tp3-") + optimizer);
    EXPECT_EQ(tp3.mismatches, 0) << describe(spec) << ": workers disagree";
    const Worst w = compare(tp3, single, describe(spec));
    std::printf("moe TP 3 %-10s vs one process: worst gradient %.2e, loss %.2e, update %.2e\n",
                optimizer, w.grad, w.loss, w.update);
  }
}

// One shared expert (16 columns in 4 FFN units, split 2/1/1 at TP 3 like Llama's FFN) next to
// the routed ones.
TEST(MoeTrainTest, SharedExpertsAtTpThreeMatchOneProcess) {
  const parity::DumpedRun single =
      run_job({1, 1, "", "fold", "replicated"}, "shared-single", {}, 1);
  expect_loss_falls(single, "moe + shared expert one process");
  const JobSpec spec{1, 3, "", "fold", "sharded"};
  const parity::DumpedRun tp3 = run_job(spec, "shared-tp3", {}, 1);
  EXPECT_EQ(tp3.mismatches, 0) << describe(spec) << ": workers disagree";
  const Worst w = compare(tp3, single, describe(spec), 1);
  std::printf(
      "moe + shared expert TP 3 vs one process: worst gradient %.2e, loss %.2e, update %.2e\n",
      w.grad, w.loss, w.update);
}

// Every step line of the job `name` reports each of its `replicas` replicas' routed load peak
// (model::Model::routed_load_peak): at least 1 (the busiest expert takes at least the mean) and at
// most E / k (an expert takes each token at most once).
void expect_routed_load_reported(const std::string& name, int replicas) {
  const model::MoeModelConfig m = moe_model();
  const double most = static_cast<double>(m.n_experts) / static_cast<double>(m.top_k);
  std::ifstream metrics(test_jobs::scratch_dir() / ("moe-" + name) / "out" / "metrics.jsonl");
  int steps = 0;
  for (std::string line; std::getline(metrics, line);) {
    const nlohmann::json j = nlohmann::json::parse(line);
    if (j["type"] != "step") continue;
    ++steps;
    ASSERT_EQ(j["replicas"].size(), static_cast<size_t>(replicas)) << line;
    for (const nlohmann::json& r : j["replicas"]) {
      ASSERT_TRUE(r.contains("routed_load_peak")) << line;
      EXPECT_GE(r["routed_load_peak"].get<double>(), 1.0) << line;
      EXPECT_LE(r["routed_load_peak"].get<double>(), most) << line;
    }
  }
  EXPECT_EQ(steps, kSteps) << name;
}

// The samples per replica the job `name` started with (its metrics' start line).
std::vector<int64_t> start_samples(const std::string& name) {
  std::ifstream metrics(test_jobs::scratch_dir() / ("moe-" + name) / "out" / "metrics.jsonl");
  for (std::string line; std::getline(metrics, line);) {
    const nlohmann::json j = nlohmann::json::parse(line);
    if (j["type"] == "start") return j["samples"].get<std::vector<int64_t>>();
  }
  return {};
}

// The default batch policy (boost; scale on CPU) moves whole micro-batches for a MoE
// (train/batch_split.h, BatchGrain::kMicroBatch): the replica at half pace takes 4 of the 12
// micro-batches of 2 (the least step over whole micro-batches: 8 / 1 = 4 / 0.5), and every
// forward holds the samples it holds at 2 x 2, so the losses agree as for any reordered sum.
TEST(MoeTrainTest, MixedDegreesMatchUniform) {
  const parity::DumpedRun uniform = run_job({2, 2, "", "fold", "replicated"}, "uniform2x2");
  ASSERT_EQ(uniform.mismatches, 0);
  expect_routed_load_reported("uniform2x2", 2);
  expect_loss_falls(uniform, "moe 2 x 2");
  EXPECT_EQ(start_samples("uniform2x2"), (std::vector<int64_t>{12, 12}));
  for (const char* strategy : {"fold", "native"}) {
    const JobSpec spec{2, 2, "1:1", strategy, "replicated"};
    const parity::DumpedRun mixed = run_job(spec, std::string("mixed-") + strategy);
    EXPECT_EQ(start_samples(std::string("mixed-") + strategy), (std::vector<int64_t>{16, 8}));
    EXPECT_EQ(mixed.mismatches, 0) << describe(spec) << ": workers disagree";
    const Worst w = compare(mixed, uniform, describe(spec));
    std::printf("moe {2,1} %-6s vs 2x2: worst gradient %.2e, loss %.2e, update %.2e\n", strategy,
                w.grad, w.loss, w.update);
  }
}

// --expert-dispatch alltoall (model/moe_exchange.h: each rank routes its slice of the tokens, the
// pairs travel by Gloo's alltoallv) at mixed degrees {3,2} against the all-reduce dispatch at 2 x
// 2: the same math with the float sums in another order, so compare_runs' limits hold as for the
// mixed-degree runs above.
TEST(MoeTrainTest, AllToAllDispatchAtMixedDegreesMatchesAllReduce) {
  const parity::DumpedRun uniform = run_job({2, 2, "", "fold", "replicated"}, "a2a-reference");
  ASSERT_EQ(uniform.mismatches, 0);
  const JobSpec spec{2, 3, "1:1", "fold", "sharded"};
  const parity::DumpedRun a2a = run_job(spec, "a2a-mixed", {"--expert-dispatch", "alltoall"});
  EXPECT_EQ(a2a.mismatches, 0) << describe(spec) << ": workers disagree";
  expect_routed_load_reported("a2a-mixed", 2);
  const Worst w = compare(a2a, uniform, describe(spec) + " alltoall");
  std::printf("moe {3,2} alltoall vs 2x2 allreduce: worst gradient %.2e, loss %.2e, update %.2e\n",
              w.grad, w.loss, w.update);
}

TEST(MoeTrainTest, ResumingAtAnotherLayoutContinuesTheSameRun) {
  const JobSpec mixed{2, 2, "1:1", "fold", "replicated"};
  const JobSpec wider{2, 3, "", "fold", "replicated"};
  const parity::DumpedRun full = run_job(mixed, "resume-full");
  ASSERT_EQ(full.losses.size(), static_cast<size_t>(kSteps));
  const model::MoeModel init = full_model();
  const std::vector<model::Param>& params = init.params();
  for (bool same : {true, false}) {
    const std::string tag = same ? "same" : "wider";
    const std::string save = (test_jobs::scratch_dir() / ("moe-ckpt-" + tag)).string();
    fs::remove_all(save);
    const parity::DumpedRun first = run_job(
        mixed, "first-" + tag, {"--save-dir", save, "--stop-after", std::to_string(kSteps / 2)});
    ASSERT_EQ(first.losses.size(), static_cast<size_t>(kSteps / 2)) << tag;
    if (same) {  // a MoE checkpoint consolidates to a Mixtral export (hf_roundtrip_test.cpp)
      const fs::path out = test_jobs::scratch_dir() / "moe-hf";
      fs::remove_all(out);
      const ntp::testing::CommandOutput done = ntp::testing::run_command(
          {NTP_BINARY, "ckpt", "consolidate", save, "--out", out.string()}, {},
          std::chrono::seconds(120));
      EXPECT_EQ(done.exit_code, 0) << done.out << done.err;
      std::ifstream config(out / "config.json");
      const std::string text((std::istreambuf_iterator<char>(config)),
                             std::istreambuf_iterator<char>());
      EXPECT_NE(text.find("MixtralForCausalLM"), std::string::npos) << text;
    }
    const parity::DumpedRun second =
        run_job(same ? mixed : wider, "second-" + tag, {"--resume", save});
    ASSERT_EQ(second.losses.size(), static_cast<size_t>(kSteps / 2)) << tag;
    const Worst w = parity::compare_resumed(second, full, params, kSteps / 2, same, tag);
    std::printf("moe resume {2,1} -> %s: worst loss %.2e, weight change %.2e%s\n",
                same ? "{2,1}" : "2x3", w.loss, w.update, same ? " (bit for bit)" : "");
  }
}

}  // namespace
}  // namespace ntp::train
