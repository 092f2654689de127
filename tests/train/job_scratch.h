// What the multi-process training tests share: a scratch folder per test process (removed when
// the test binary ends) and small token files with some structure to train on.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "core/rng.h"
#include "data/token_file.h"

namespace ntp::train::test_jobs {

// $TMPDIR/ntp-<name>-<pid>, removed by the test binary's global tear-down unless NTP_KEEP_SCRATCH
// is set (the jobs' logs and event logs, for a failure's post-mortem; the path is printed).
inline std::filesystem::path scratch_dir() {
  static const std::filesystem::path dir = [] {
    const std::filesystem::path d =
        std::filesystem::temp_directory_path() / ("ntp-train-test-" + std::to_string(::getpid()));
    class Cleanup : public ::testing::Environment {
     public:
      explicit Cleanup(std::filesystem::path p) : path_(std::move(p)) {}
      void TearDown() override {
        if (std::getenv("NTP_KEEP_SCRATCH") != nullptr) {
          std::printf("NTP_KEEP_SCRATCH: the jobs' files are kept in %s\n", path_.c_str());
          return;
        }
        std::filesystem::remove_all(path_);
      }

     private:
      std::filesystem::path path_;
    };
    ::testing::AddGlobalTestEnvironment(new Cleanup(d));
    return d;
  }();
  return dir;
}

// scratch/data/{train,val}.bin: 20,000 tokens each of `text` repeated, one token in ten replaced
// by a random byte (written once per test process).
inline const std::filesystem::path& synthetic_corpus() {
  static const std::filesystem::path dir = [] {
    const std::filesystem::path d = scratch_dir() / "data";
    std::filesystem::create_directories(d);
    const std::string text = "the quick brown fox jumps over the lazy dog; ";
    Rng rng(3);
    for (const char* name : {"train.bin", "val.bin"}) {
      std::vector<uint16_t> tokens;
      for (int i = 0; i < 20000; ++i) {
        tokens.push_back(rng.below(10) == 0 ? static_cast<uint16_t>(rng.below(256))
                                            : static_cast<uint16_t>(text[i % text.size()]));
      }
      EXPECT_TRUE(data::write_token_file((d / name).string(), tokens).ok());
    }
    return d;
  }();
  return dir;
}

// The small test model: 2 layers, 8 heads, width 32, context 16, FFN units of 4.
inline const std::vector<std::string>& small_model() {
  static const std::vector<std::string> flags = {
      "--layers", "2", "--heads", "8", "--width", "32", "--context", "16", "--ffn-unit", "4"};
  return flags;
}

// argv of `ntp launch --nproc-per-node WORKERS LAUNCH... -- ntp train MODEL TRAIN...` on the
// synthetic corpus, MODEL being the small test model unless given.
inline std::vector<std::string> small_job(int workers, const std::vector<std::string>& launch,
                                          const std::vector<std::string>& train,
                                          const std::vector<std::string>& model = small_model()) {
  std::vector<std::string> argv = {NTP_BINARY, "launch", "--nproc-per-node",
                                   std::to_string(workers)};
  argv.insert(argv.end(), launch.begin(), launch.end());
  argv.insert(argv.end(), {"--", NTP_BINARY, "train"});
  argv.insert(argv.end(), model.begin(), model.end());
  argv.insert(argv.end(), {"--train-data", (synthetic_corpus() / "train.bin").string(),
                           "--val-data", (synthetic_corpus() / "val.bin").string(), "--quiet"});
  argv.insert(argv.end(), train.begin(), train.end());
  return argv;
}

}  // namespace ntp::train::test_jobs
