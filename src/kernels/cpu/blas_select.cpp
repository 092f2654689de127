#include "kernels/cpu/blas_select.h"

#include <cblas.h>
#include <unistd.h>

#include <array>
#include <cstdlib>
#include <cstring>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_backend_select.h"

namespace ntp::kernels::cpu {
namespace {

constexpr const char* kForcedFrom = "NTP_BLAS_FORCED_FROM";
constexpr const char* kSimulate = "NTP_BLAS_SIMULATE_DETECTED";

bool env_set(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0';
}

// Runs before main(), after OpenBLAS's own constructor (shared libraries initialize first).
// glibc passes argc, argv and envp to .init_array functions.
void select_core_at_startup(int /*argc*/, char** argv, char** /*envp*/) {
  const char* autoselect = std::getenv("NTP_BLAS_AUTOSELECT");
  if (autoselect != nullptr && std::strcmp(autoselect, "0") == 0) return;
  if (argv == nullptr || argv[0] == nullptr) return;
  const bool simulate = env_set(kSimulate);
  if (env_set("OPENBLAS_CORETYPE") && !simulate) return;  // the user's (or our earlier) choice
  const std::string detected = openblas_core();
  const std::string want = openblas_core_to_force(detected, host_cpu_features());
  if (want.empty()) return;
  ::setenv("OPENBLAS_CORETYPE", want.c_str(), 1);
  ::setenv(kForcedFrom, detected.c_str(), 1);
  ::unsetenv(kSimulate);
  ::execv("/proc/self/exe", argv);
  // exec failed (no /proc?): carry on with the detected core, and say so.
  ::unsetenv("OPENBLAS_CORETYPE");
  ::unsetenv(kForcedFrom);
}

[[gnu::used,
  gnu::section(".init_array")]] void (*const select_core_entry)(int, char**,
                                                                char**) = &select_core_at_startup;

}  // namespace
}  // namespace ntp::kernels::cpu

// Referenced by the linker flag --undefined in src/kernels/CMakeLists.txt, so every program that
// links the kernels library also links this file and its start-up check.
extern "C" const int ntp_blas_select_anchor = 1;

namespace ntp::kernels::cpu {

int openblas_core_level(std::string_view core) {
  constexpr std::array<std::string_view, 5> kAvx = {"Sandybridge", "Bulldozer", "Piledriver",
                                                    "Steamroller", "Excavator"};
  for (std::string_view c : kAvx) {
    if (core == c) return 1;
  }
  if (core == "Haswell" || core == "Zen") return 2;
  if (core == "SkylakeX") return 3;
  if (core == "Cooperlake" || core == "SapphireRapids") return 4;
  return 0;
}

std::string best_openblas_core(const CpuFeatures& f, std::string* why) {
  auto pick = [&](const char* core, const char* flag) {
    if (why != nullptr) *why = flag;
    return std::string(core);
  };
  const bool avx512 = f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq && f.avx512cd;
  if (avx512 && f.avx512_bf16) return pick("Cooperlake", "avx512_bf16");
  if (avx512) return pick("SkylakeX", "avx512f");
  if (f.avx2 && f.fma) return pick("Haswell", "avx2");
  if (f.avx) return pick("Sandybridge", "avx");
  return pick("", "");
}

std::string openblas_core_to_force(std::string_view detected, const CpuFeatures& f) {
  const std::string best = best_openblas_core(f);
  if (best.empty() || openblas_core_level(detected) >= openblas_core_level(best)) return "";
  return best;
}

std::string openblas_core() {
  const char* name = openblas_get_corename();
  return name == nullptr ? std::string("unknown") : std::string(name);
}

BlasCoreSource blas_core_source() {
  if (env_set(kForcedFrom) && env_set("OPENBLAS_CORETYPE")) return BlasCoreSource::kForcedByCpuid;
  if (env_set("OPENBLAS_CORETYPE")) return BlasCoreSource::kUserSet;
  return BlasCoreSource::kDetected;
}

std::string blas_description() {
  std::string version = "OpenBLAS";
  if (const char* config = openblas_get_config(); config != nullptr) {
    // "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH ...": keep the first two words.
    const std::string c = config;
    const size_t second = c.find(' ', c.find(' ') + 1);
    version = c.substr(0, second);
  }
  std::string why;
  best_openblas_core(host_cpu_features(), &why);
  std::string how;
  switch (blas_core_source()) {
    case BlasCoreSource::kForcedByCpuid:
      how = std::string("forced from ") + std::getenv(kForcedFrom) + " by cpuid: " + why;
      break;
    case BlasCoreSource::kUserSet:
      how = "set by OPENBLAS_CORETYPE";
      break;
    case BlasCoreSource::kDetected:
      how = "detected by OpenBLAS, cpuid allows " + best_openblas_core(host_cpu_features());
      break;
  }
  const int threads = blas_threads();
  return version + " " + openblas_core() + " (" + how + ") ISA " + isa_name(active_isa()) + ", " +
         std::to_string(threads) + (threads == 1 ? " thread" : " threads") + "; " +
         gemm_backend_description();
}

}  // namespace ntp::kernels::cpu
