// What the parity tests of real `ntp launch ... ntp train` jobs share (train_parity_test,
// llama_train_parity_test, bf16_train_test): the run options every parity job passes, running a
// job and reading it back: its losses and every worker's logical dump merged, with the elements
// two workers disagree on counted; and the relative differences the tests bound.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "child_process.h"
#include "job_scratch.h"
#include "model/param.h"
#include "model/unit_lists.h"
#include "model_shapes.h"

namespace ntp::train::parity {

struct DumpedRun {
  nlohmann::json start;                     // the metrics' start record
  std::vector<double> losses;               // per step
  std::vector<std::vector<float>> grads;    // logical, step 0, merged over workers
  std::vector<std::vector<float>> weights;  // logical, final
  int64_t mismatches = 0;                   // elements two workers disagree on
};

// The parity jobs' model shape (tests/common/model_shapes.h).
using ntp::testing::parity_llama;
using ntp::testing::parity_shape;

// argv of `ntp launch --nproc-per-node D*T -- ntp train --domains D --tp T --strategy S
// --optimizer O` with the model shape of `m` (any config with n_layer, n_head, n_embd, n_ctx and
// ffn_unit); the caller appends the family's own flags and run_flags.
template <typename Config>
std::vector<std::string> launch_args(int domains, int tp, const std::string& strategy,
                                     const std::string& optimizer, const Config& m) {
  return {NTP_BINARY,
          "launch",
          "--nproc-per-node",
          std::to_string(domains * tp),
          "--",
          NTP_BINARY,
          "train",
          "--domains",
          std::to_string(domains),
          "--tp",
          std::to_string(tp),
          "--strategy",
          strategy,
          "--optimizer",
          optimizer,
          "--layers",
          std::to_string(m.n_layer),
          "--heads",
          std::to_string(m.n_head),
          "--width",
          std::to_string(m.n_embd),
          "--context",
          std::to_string(m.n_ctx),
          "--ffn-unit",
          std::to_string(m.ffn_unit)};
}

// The `ntp train` flags every parity job passes, for a job writing into `dir`: the synthetic
// corpus, micro-batches of 2, the learning rate, clipping and buckets the limits were derived for,
// metrics in dir/out and logical dumps in dir/dump.
inline std::vector<std::string> run_flags(const std::filesystem::path& dir, int steps, int batch,
                                          int warmup) {
  const std::filesystem::path& data = test_jobs::synthetic_corpus();
  return {"--batch",       std::to_string(batch),
          "--micro-batch", "2",
          "--steps",       std::to_string(steps),
          "--warmup",      std::to_string(warmup),
          "--lr",          "3e-3",
          "--grad-clip",   "1.0",
          "--bucket-kb",   "16",
          "--train-data",  (data / "train.bin").string(),
          "--val-data",    (data / "val.bin").string(),
          "--out",         (dir / "out").string(),
          "--dump-dir",    (dir / "dump").string(),
          "--timeout-ms",  "20000",
          "--quiet"};
}

// What follows launch_args and the family's flags in a parity job's argv: run_flags(dir, steps,
// batch, warmup), `--failed FAILED` unless `failed` is empty, then the test's own `extra` flags.
inline std::vector<std::string> job_flags(const std::filesystem::path& dir, int steps, int batch,
                                          int warmup, const std::string& failed,
                                          const std::vector<std::string>& extra) {
  std::vector<std::string> flags = run_flags(dir, steps, batch, warmup);
  if (!failed.empty()) flags.insert(flags.end(), {"--failed", failed});
  flags.insert(flags.end(), extra.begin(), extra.end());
  return flags;
}

// Merges one worker's logical dump into `merged` (NaN = not held), counting disagreements.
inline void merge_dump(const std::filesystem::path& file, const std::vector<model::Param>& params,
                       std::vector<std::vector<float>>& merged, int64_t& mismatches) {
  std::ifstream in(file, std::ios::binary);
  ASSERT_TRUE(in) << file;
  for (size_t i = 0; i < params.size(); ++i) {
    std::vector<float> t(static_cast<size_t>(shape_numel(params[i].logical_shape)));
    in.read(reinterpret_cast<char*>(t.data()), static_cast<std::streamsize>(t.size() * 4));
    ASSERT_TRUE(in) << file;
    if (merged[i].empty()) merged[i].assign(t.size(), NAN);
    for (size_t e = 0; e < t.size(); ++e) {
      if (std::isnan(t[e])) continue;
      if (std::isnan(merged[i][e])) {
        merged[i][e] = t[e];
      } else if (merged[i][e] != t[e]) {
        ++mismatches;
      }
    }
  }
}

// The finished job in `dir` (run_flags) of a model whose full parameters are `params`.
inline DumpedRun read_run(const std::filesystem::path& dir,
                          const std::vector<model::Param>& params) {
  DumpedRun out;
  std::ifstream metrics(dir / "out" / "metrics.jsonl");
  for (std::string line; std::getline(metrics, line);) {
    const nlohmann::json j = nlohmann::json::parse(line);
    if (j["type"] == "start") out.start = j;
    if (j["type"] == "step") out.losses.push_back(j["loss"].get<double>());
  }
  out.grads.resize(params.size());
  out.weights.resize(params.size());
  for (const auto& entry : std::filesystem::directory_iterator(dir / "dump")) {
    const std::string file = entry.path().filename().string();
    merge_dump(entry.path(), params, file.rfind("grads", 0) == 0 ? out.grads : out.weights,
               out.mismatches);
  }
  return out;
}

// Every element of every tensor is held by some worker (`what` names the job in a failure).
inline void expect_every_element_held(const DumpedRun& run, const std::vector<model::Param>& params,
                                      const std::string& what) {
  for (const auto& set : {run.grads, run.weights}) {
    for (size_t i = 0; i < set.size(); ++i) {
      for (float v : set[i]) {
        EXPECT_FALSE(std::isnan(v))
            << what << ": " << params[i].name << " has an element no worker holds";
        if (std::isnan(v)) break;
      }
    }
  }
}

// Empties `dir`, runs the job `args` (launch_args, the family's flags and job_flags into `dir`;
// 240 s at most) and reads it back against the model's full parameters `params`, expecting it to
// succeed and every element to be held; `what` names the job in failures. Empty when the job
// failed.
inline DumpedRun run_and_read(const std::vector<std::string>& args,
                              const std::filesystem::path& dir,
                              const std::vector<model::Param>& params, const std::string& what) {
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const testing::CommandOutput done = testing::run_command(args, {}, std::chrono::seconds(240));
  EXPECT_EQ(done.exit_code, 0) << what << "\n" << done.out << done.err;
  if (done.exit_code != 0) return {};
  DumpedRun result = read_run(dir, params);
  expect_every_element_held(result, params, what);
  return result;
}

// ||a - b|| / ||b|| (||a - b|| when b is 0), in float64.
inline double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0.0, norm = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    norm += static_cast<double>(b[i]) * b[i];
  }
  return norm == 0.0 ? std::sqrt(diff) : std::sqrt(diff / norm);
}

// A job's cluster: domains of tp slots, the failed slots (--failed), --strategy, --optimizer.
struct JobSpec {
  int domains = 1;
  int tp = 1;
  std::string failed;
  std::string strategy = "fold";
  std::string optimizer = "replicated";
  std::string policy = "keep";  // --batch-policy
};

// "3x4 failed[1:3] fold/replicated", and "/POLICY" when it is not keep.
inline std::string describe(const JobSpec& s) {
  return std::to_string(s.domains) + "x" + std::to_string(s.tp) + " failed[" + s.failed + "] " +
         s.strategy + "/" + s.optimizer + (s.policy == "keep" ? "" : "/" + s.policy);
}

// The parity job of `spec`: `args` (the launch and model flags) followed by job_flags(dir, steps,
// 24, 5, spec.failed, extra), run and read back against a fresh degree-1 `Model` of `config`
// (seed 1: the parameters' names and shapes; run_and_read).
template <typename Model, typename Config>
DumpedRun run_parity_job(std::vector<std::string> args, const std::filesystem::path& dir,
                         const JobSpec& spec, int steps, const std::vector<std::string>& extra,
                         const Config& config) {
  const std::vector<std::string> job = job_flags(dir, steps, 24, 5, spec.failed, extra);
  args.insert(args.end(), job.begin(), job.end());
  auto model = Model::create(config, model::full_shard(config), 1);
  EXPECT_TRUE(model.ok()) << model.status().to_string();
  if (!model.ok()) return {};
  return run_and_read(args, dir, model->params(), describe(spec));
}

// The worst differences compare_runs / compare_resumed found.
struct Worst {
  double grad = 0, loss = 0, update = 0;
};

// rel_l2 of two runs' changes of one tensor from its initial logical value `start`.
inline double change_rel_l2(const model::Param& start, const std::vector<float>& got,
                            const std::vector<float>& want) {
  const std::span<const float> s = start.value.span();
  std::vector<float> d_got(s.size()), d_want(s.size());
  for (size_t e = 0; e < s.size(); ++e) {
    d_got[e] = got[e] - s[e];
    d_want[e] = want[e] - s[e];
  }
  return rel_l2(d_got, d_want);
}

// Two fp32 jobs of one model at different layouts, `params` its full initial parameters: `got`
// must have `steps` losses, each within 1e-6 relative of `want`'s, every step-0 gradient within
// 1e-5 relative L2 per tensor and every tensor's weight change within 1e-4 (the limits of
// llama_train_parity_test, argued there; moe_train_test uses them too).
inline Worst compare_runs(const DumpedRun& got, const DumpedRun& want,
                          const std::vector<model::Param>& params, size_t steps,
                          const std::string& label) {
  Worst w;
  EXPECT_EQ(got.grads.size(), params.size()) << label;
  if (got.grads.size() != params.size() || want.grads.size() != params.size()) return w;
  EXPECT_EQ(got.losses.size(), steps) << label;
  for (size_t s = 0; s < std::min(got.losses.size(), want.losses.size()); ++s) {
    const double l = std::abs(got.losses[s] - want.losses[s]) / std::abs(want.losses[s]);
    w.loss = std::max(w.loss, l);
    EXPECT_LE(l, 1e-6) << label << ": loss at step " << s;
  }
  for (size_t i = 0; i < params.size(); ++i) {
    const double g = rel_l2(got.grads[i], want.grads[i]);
    w.grad = std::max(w.grad, g);
    EXPECT_LE(g, 1e-5) << label << ": step-0 gradient of " << params[i].name;
    const double u = change_rel_l2(params[i], got.weights[i], want.weights[i]);
    w.update = std::max(w.update, u);
    EXPECT_LE(u, 1e-4) << label << ": weight change of " << params[i].name;
  }
  return w;
}

// A job resumed from a checkpoint taken after `offset` steps of `full` (the uninterrupted run):
// its losses are full's from step offset on, bit for bit when `same` (resumed at the same layout,
// with the final weights equal too), else within 1e-6 relative and each tensor's weight change
// within 1e-4 (as compare_runs).
inline Worst compare_resumed(const DumpedRun& second, const DumpedRun& full,
                             const std::vector<model::Param>& params, size_t offset, bool same,
                             const std::string& label) {
  Worst w;
  EXPECT_EQ(second.mismatches, 0) << label;
  for (size_t s = 0; s < second.losses.size() && s + offset < full.losses.size(); ++s) {
    const double want = full.losses[s + offset];
    w.loss = std::max(w.loss, std::abs(second.losses[s] - want) / std::abs(want));
    if (same) {
      EXPECT_EQ(second.losses[s], want) << label << ": step " << s + offset;
    }
  }
  EXPECT_LE(w.loss, 1e-6) << label;
  if (second.weights.size() != params.size() || full.weights.size() != params.size()) {
    ADD_FAILURE() << label << ": no weights";
    return w;
  }
  for (size_t i = 0; i < params.size(); ++i) {
    if (same) {
      EXPECT_EQ(second.weights[i], full.weights[i]) << label << ": " << params[i].name;
      continue;
    }
    const double u = change_rel_l2(params[i], second.weights[i], full.weights[i]);
    w.update = std::max(w.update, u);
    EXPECT_LE(u, 1e-4) << label << ": " << params[i].name;
  }
  return w;
}

}  // namespace ntp::train::parity
