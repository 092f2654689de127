// What the CPU this process runs on can do (cpuid + xgetbv, not its model name), and which
// instruction-set variant ntp's own kernels use.
//
// Kernels with a vectorizable inner loop are compiled three times (kernels/cpu/isa_dispatch.h):
// baseline x86-64 (SSE2), AVX2+FMA and AVX-512 (F/BW/VL/DQ), and each call runs the variant of
// active_isa(). Element-wise results are bit-identical in every variant: the library is compiled
// with -ffp-contract=off (no FMA contraction) and no reassociation, so each element goes through
// the same IEEE operations whatever the vector width or its position in the array.
#pragma once

#include <string>
#include <vector>

namespace ntp::kernels::cpu {

struct CpuFeatures {
  bool avx = false, avx2 = false, fma = false;
  // AVX-512 flags count only when the OS saves the ZMM and mask state (XCR0 bits 5-7).
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false, avx512cd = false;
  bool avx512_bf16 = false, amx_tile = false;
};

// Read once from cpuid; the same value for the life of the process.
const CpuFeatures& host_cpu_features();

enum class Isa { kBaseline = 0, kAvx2 = 1, kAvx512 = 2 };

const char* isa_name(Isa isa);  // "baseline", "avx2", "avx512"
// The best variant the host supports.
Isa host_isa();
// Every variant the host can run, baseline first.
std::vector<Isa> supported_isas();
// The variant kernels use: host_isa(), or NTP_ISA=baseline|avx2|avx512 from the environment
// (lowered to what the host supports).
Isa active_isa();
// Makes kernels use `isa` (lowered to what the host supports); returns the previous value. For
// tests and benchmarks that compare variants; not meant to be called while kernels run.
Isa set_active_isa(Isa isa);

// "avx2 fma avx512f ..." for the flags above that are set.
std::string cpu_feature_list(const CpuFeatures& f);

}  // namespace ntp::kernels::cpu
