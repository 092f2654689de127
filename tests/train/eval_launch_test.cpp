// `ntp eval` as a job under `ntp launch` (real processes): a Llama with grouped-query attention
// (4 query heads, 2 KV heads) trained 30 steps in one process, its checkpoint and its Hugging Face
// export evaluated at mixed and uniform layouts against the one-process evaluation.
//
// Bound. A layout changes only the order of float32 sums (the TP partial sums of the row-parallel
// products, the vocabulary-parallel softmax; also OpenMP's split, as `ntp launch` gives each of
// its workers fewer threads) and which replica adds which batch (float64 sums: 1e-16). Each
// target's loss then moves by a few roundings, about k u with u = 2^-24 = 6e-8 relative and k ~ 2,
// in directions that do not correlate across targets, so the mean over M = 1024 targets moves by
// about k u / sqrt(M) = 4e-9. The bound is ten times that, 4e-8: below u, so a loss moved by as
// much as one rounding per target, all one way (a systematic error, e.g. a window evaluated twice
// would move it by far more), fails. Runs (2-core AMD EPYC Zen 4): 2.6e-9 at {4,3}, 4.3e-9 at
// {1,2,1} (the export), 0 at 1 x 1.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "child_process.h"
#include "job_scratch.h"
#include "text_files.h"

namespace ntp::train {
namespace {

namespace fs = std::filesystem;
using ntp::testing::count;

constexpr double kBound = 4e-8;  // relative; see the top of this file

class EvalLaunchTest : public ::testing::Test {
 protected:
  static fs::path checkpoint() { return test_jobs::scratch_dir() / "eval-llama-ckpt"; }
  static fs::path hf() { return test_jobs::scratch_dir() / "eval-llama-hf"; }

  static void SetUpTestSuite() {
    const fs::path data = test_jobs::synthetic_corpus();
    fs::remove_all(checkpoint());
    fs::remove_all(hf());
    // Trained well below the uniform ln 256 = 5.55 nats (to ~2.1), so that the logits are far
    // from zero and their rounding shows in the loss.
    const testing::CommandOutput train =
        testing::run_command({NTP_BINARY,
                              "train",
                              "--model",
                              "llama",
                              "--layers",
                              "2",
                              "--heads",
                              "4",
                              "--kv-heads",
                              "2",
                              "--width",
                              "32",
                              "--context",
                              "16",
                              "--ffn-unit",
                              "4",
                              "--steps",
                              "30",
                              "--lr",
                              "1e-2",
                              "--warmup",
                              "2",
                              "--batch",
                              "8",
                              "--no-live-recovery",
                              "--train-data",
                              (data / "train.bin").string(),
                              "--val-data",
                              (data / "val.bin").string(),
                              "--save-dir",
                              checkpoint().string(),
                              "--out",
                              (test_jobs::scratch_dir() / "eval-llama-out").string(),
                              "--quiet"},
                             {}, std::chrono::seconds(120));
    ASSERT_EQ(train.exit_code, 0) << train.out << train.err;
    const testing::CommandOutput consolidate = testing::run_command(
        {NTP_BINARY, "ckpt", "consolidate", checkpoint().string(), "--out", hf().string()}, {},
        std::chrono::seconds(60));
    ASSERT_EQ(consolidate.exit_code, 0) << consolidate.out << consolidate.err;
  }

  // `ntp eval SOURCE` over 62 windows of 16 in batches of 4 (16 batches, the last of 2 windows)
  // from token 5, with `layout` flags.
  static std::vector<std::string> eval_args(const fs::path& source,
                                            const std::vector<std::string>& layout) {
    std::vector<std::string> argv = {NTP_BINARY,
                                     "eval",
                                     source.string(),
                                     "--data",
                                     (test_jobs::synthetic_corpus() / "val.bin").string(),
                                     "--context",
                                     "16",
                                     "--batch",
                                     "4",
                                     "--windows",
                                     "62",
                                     "--offset",
                                     "5"};
    argv.insert(argv.end(), layout.begin(), layout.end());
    return argv;
  }

  // `ntp launch --nproc-per-node WORKERS -- ntp eval ...`.
  static testing::CommandOutput launch(int workers, const fs::path& source,
                                       const std::vector<std::string>& layout) {
    std::vector<std::string> argv = {NTP_BINARY, "launch", "--nproc-per-node",
                                     std::to_string(workers), "--"};
    const std::vector<std::string> eval = eval_args(source, layout);
    argv.insert(argv.end(), eval.begin(), eval.end());
    return testing::run_command(argv, {}, std::chrono::seconds(120));
  }

  // The loss of a launched job, after checking that it printed one JSON line on stdout and one
  // speed line on stderr, both from world rank 0, which is launcher rank `printer`.
  static double launched_loss(int workers, const fs::path& source,
                              const std::vector<std::string>& layout, int printer,
                              const std::string& name) {
    const testing::CommandOutput run = launch(workers, source, layout);
    EXPECT_EQ(run.exit_code, 0) << name << "\n" << run.out << run.err;
    const std::string prefix = "[rank " + std::to_string(printer) + "] ";
    EXPECT_EQ(count(run.out, "\n"), 1) << name << ": " << run.out;
    EXPECT_EQ(count(run.out, prefix + "{\"loss\":"), 1) << name << ": " << run.out;
    EXPECT_EQ(count(run.err, "[rank "), 1) << name << ": " << run.err;
    EXPECT_EQ(count(run.err, prefix + "ntp eval: "), 1) << name << ": " << run.err;
    if (run.exit_code != 0 || run.out.rfind(prefix, 0) != 0) return NAN;
    const nlohmann::json j = nlohmann::json::parse(run.out.substr(prefix.size()));
    EXPECT_EQ(j["tokens"], 62 * 16) << name;
    EXPECT_EQ(j["windows"], 62) << name;
    return j["loss"].get<double>();
  }

  static double one_process_loss(const fs::path& source) {
    const testing::CommandOutput run = testing::run_command(eval_args(source, {}));
    EXPECT_EQ(run.exit_code, 0) << run.out << run.err;
    return run.exit_code == 0 ? nlohmann::json::parse(run.out)["loss"].get<double>() : NAN;
  }
};

TEST_F(EvalLaunchTest, AnyLayoutGivesTheOneProcessLoss) {
  const double single = one_process_loss(checkpoint());
  // The export holds the checkpoint's float32 weights: the same one-process loss, bit for bit.
  EXPECT_EQ(one_process_loss(hf()), single);
  EXPECT_LT(single, 3.0) << "trained below the uniform 5.55 nats";
  struct Case {
    std::string name;
    int workers;
    int printer;  // the launcher rank of world rank 0
    fs::path source;
    std::vector<std::string> layout;
  };
  const std::vector<Case> cases = {
      {"{4,3} checkpoint", 8, 0, checkpoint(), {"--domains", "2", "--tp", "4", "--failed", "1:3"}},
      // Slot 0:0 failed: world rank 0, which prints, is launcher rank 1.
      {"{1,2,1} export", 6, 1, hf(), {"--domains", "3", "--tp", "2", "--failed", "0:0,2:1"}},
      {"1 x 1 checkpoint", 1, 0, checkpoint(), {}}};
  for (const Case& c : cases) {
    const double loss = launched_loss(c.workers, c.source, c.layout, c.printer, c.name);
    const double rel = std::abs(loss - single) / single;
    EXPECT_LE(rel, kBound) << c.name << ": " << loss << " vs one process " << single;
    std::printf("%s: %.17g, one process %.17g, relative %.2e\n", c.name.c_str(), loss, single, rel);
  }
}

TEST_F(EvalLaunchTest, ALayoutTheModelCannotTakeIsOneLineAndExitTwo) {
  // TP 5 over 4 heads: every worker exits 2 before any connects; world rank 0 says why.
  const testing::CommandOutput tp = launch(5, checkpoint(), {"--domains", "1", "--tp", "5"});
  EXPECT_EQ(tp.exit_code, 2) << tp.out << tp.err;
  EXPECT_TRUE(tp.out.empty()) << tp.out;
  EXPECT_EQ(count(tp.err, "[rank "), 1) << tp.err;
  EXPECT_EQ(count(tp.err, "[rank 0] ntp eval: error: heads has 4 units, fewer than TP degree 5"), 1)
      << tp.err;
  // A layout of other than the launched workers.
  const testing::CommandOutput size = launch(4, checkpoint(), {"--domains", "2", "--tp", "4"});
  EXPECT_EQ(size.exit_code, 2) << size.out << size.err;
  EXPECT_TRUE(size.out.empty()) << size.out;
  EXPECT_EQ(count(size.err, "[rank "), 1) << size.err;
  EXPECT_EQ(count(size.err,
                  "ntp launch started 4 workers but --domains 2 x --tp 4 = 8 device "
                  "slots; make them equal"),
            1)
      << size.err;
  // A layout of several slots outside `ntp launch`.
  const testing::CommandOutput alone =
      testing::run_command(eval_args(checkpoint(), {"--domains", "2"}));
  EXPECT_EQ(alone.exit_code, 2) << alone.err;
  EXPECT_TRUE(alone.out.empty()) << alone.out;
  EXPECT_EQ(count(alone.err, "\n"), 1) << alone.err;
  EXPECT_EQ(count(alone.err, "runs under `ntp launch --nproc-per-node 2 -- ntp eval ...`"), 1)
      << alone.err;
}

}  // namespace
}  // namespace ntp::train
