// The OpenBLAS core is chosen by the CPU's feature flags (kernels/cpu/blas_select.h): the core this
// test process runs on is at least the best its flags allow, a misdetected core is corrected by
// the start-up re-exec, a user's OPENBLAS_CORETYPE wins, and the selected sgemm kernel is right on
// shapes large enough to run its vector main loops and edge cases.
#include "kernels/cpu/blas_select.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "child_process.h"
#include "kernels/cpu/gemm.h"
#include "reference.h"

namespace ntp::kernels {
namespace {

using cpu::best_openblas_core;
using cpu::CpuFeatures;
using cpu::openblas_core_level;
using cpu::openblas_core_to_force;

CpuFeatures avx512_features(bool bf16) {
  CpuFeatures f;
  f.avx = f.avx2 = f.fma = true;
  f.avx512f = f.avx512bw = f.avx512vl = f.avx512dq = f.avx512cd = true;
  f.avx512_bf16 = bf16;
  return f;
}

TEST(BlasSelectTest, CoreChoiceFollowsFeatureFlags) {
  std::string why;
  EXPECT_EQ(best_openblas_core(avx512_features(true), &why), "Cooperlake");
  EXPECT_EQ(why, "avx512_bf16");
  EXPECT_EQ(best_openblas_core(avx512_features(false), &why), "SkylakeX");
  EXPECT_EQ(why, "avx512f");
  CpuFeatures avx2;
  avx2.avx = avx2.avx2 = avx2.fma = true;
  EXPECT_EQ(best_openblas_core(avx2), "Haswell");
  EXPECT_EQ(best_openblas_core(CpuFeatures{}), "");
  // AVX-512F without BW/VL/DQ (Knights Landing) is not enough for SkylakeX kernels.
  CpuFeatures knl = avx2;
  knl.avx512f = knl.avx512cd = true;
  EXPECT_EQ(best_openblas_core(knl), "Haswell");

  EXPECT_EQ(openblas_core_to_force("Prescott", avx512_features(false)), "SkylakeX");
  EXPECT_EQ(openblas_core_to_force("Haswell", avx512_features(false)), "SkylakeX");
  EXPECT_EQ(openblas_core_to_force("SkylakeX", avx512_features(false)), "");
  EXPECT_EQ(openblas_core_to_force("Cooperlake", avx512_features(true)), "");
  EXPECT_EQ(openblas_core_to_force("Zen", avx2), "");
  EXPECT_EQ(openblas_core_to_force("Prescott", CpuFeatures{}), "");
  EXPECT_LT(openblas_core_level("Sandybridge"), openblas_core_level("Haswell"));
  EXPECT_LT(openblas_core_level("Haswell"), openblas_core_level("SkylakeX"));
  EXPECT_EQ(openblas_core_level("SomethingNew"), 0);
}

// The test that fails when the GEMM kernel is below what the host's flags allow. Where the user
// set OPENBLAS_CORETYPE, their core wins in this process (UserCoreTypeWins), so the check runs
// in a child started without it: a skip here would hide the check on such machines (and CI).
TEST(BlasSelectTest, ThisProcessRunsTheBestCoreTheFlagsAllow) {
  const std::string best = best_openblas_core(cpu::host_cpu_features());
  if (cpu::blas_core_source() == cpu::BlasCoreSource::kUserSet) {
    // The path itself: under env, /proc/self/exe would name env.
    const std::string exe = std::filesystem::read_symlink("/proc/self/exe").string();
    const testing::CommandOutput out = testing::run_command(
        {"/usr/bin/env", "-u", "OPENBLAS_CORETYPE", "-u", "NTP_BLAS_FORCED_FROM", exe,
         "--gtest_filter=BlasSelectTest.ThisProcessRunsTheBestCoreTheFlagsAllow"});
    EXPECT_EQ(out.exit_code, 0) << out.out << out.err;
    EXPECT_NE(out.out.find("[  PASSED  ] 1 test"), std::string::npos) << out.out;
    return;
  }
  EXPECT_GE(openblas_core_level(cpu::openblas_core()), openblas_core_level(best))
      << cpu::blas_description() << "; flags: " << cpu_feature_list(cpu::host_cpu_features());
}

// Run by the tests below in a child process (started with --gtest_also_run_disabled_tests).
TEST(BlasSelectChild, DISABLED_PrintDescription) {
  std::printf("BLAS: %s\n", cpu::blas_description().c_str());
}

std::string child_description(const std::vector<std::string>& env) {
  const testing::CommandOutput out = testing::run_command(
      {"/proc/self/exe", "--gtest_filter=BlasSelectChild.*", "--gtest_also_run_disabled_tests"},
      env);
  EXPECT_EQ(out.exit_code, 0) << out.err;
  const size_t at = out.out.find("BLAS: ");
  if (at == std::string::npos) return "";
  return out.out.substr(at + 6, out.out.find('\n', at) - at - 6);
}

TEST(BlasSelectTest, MisdetectedCoreIsCorrectedAtStartUp) {
  const std::string best = best_openblas_core(cpu::host_cpu_features());
  if (openblas_core_level(best) == 0) GTEST_SKIP() << "host has no AVX: nothing to correct";
  // As if OpenBLAS had detected Prescott (what 0.3.21 does on CPUs it does not know).
  const std::string line = child_description(
      {"OPENBLAS_CORETYPE=Prescott", "NTP_BLAS_SIMULATE_DETECTED=1", "NTP_BLAS_FORCED_FROM="});
  EXPECT_NE(line.find(" " + best + " (forced from Prescott by cpuid: "), std::string::npos) << line;
}

TEST(BlasSelectTest, UserCoreTypeWins) {
  const std::string line =
      child_description({"OPENBLAS_CORETYPE=Prescott", "NTP_BLAS_FORCED_FROM="});
  EXPECT_NE(line.find(" Prescott (set by OPENBLAS_CORETYPE)"), std::string::npos) << line;
}

// Shapes past the kernels' register blocks (16-48 wide) with ragged edges, every transpose.
TEST(BlasSelectTest, SelectedKernelMatchesNaiveProduct) {
  Rng rng(11);
  const int64_t m = 67, n = 131, k = 97;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      const int64_t lda = ta ? m : k, ldb = tb ? k : n;
      const std::vector<float> a = reference::to_float(reference::random_vec(rng, m * k));
      const std::vector<float> b = reference::to_float(reference::random_vec(rng, k * n));
      std::vector<float> c(static_cast<size_t>(m * n), 1.0f);
      cpu::gemm(ta, tb, m, n, k, 1.0f, a.data(), lda, b.data(), ldb, 0.5f, c.data(), n);
      reference::Vec want(c.size()), got(c.begin(), c.end());
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
          double s = 0.5;
          for (int64_t p = 0; p < k; ++p) {
            s += static_cast<double>(ta ? a[p * lda + i] : a[i * lda + p]) *
                 (tb ? b[j * ldb + p] : b[p * ldb + j]);
          }
          want[i * n + j] = s;
        }
      }
      EXPECT_LT(reference::rel_error(got, want), 1e-6) << "ta=" << ta << " tb=" << tb;
    }
  }
}

}  // namespace
}  // namespace ntp::kernels
