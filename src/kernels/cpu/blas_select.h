// Which OpenBLAS kernel set ("core") sgemm runs on, chosen by the CPU's feature flags.
//
// OpenBLAS's DYNAMIC_ARCH build picks its kernels by CPU model number; a model it does not know
// (common under hypervisors) falls back to `Prescott` (SSE3), 4-5x slower than the AVX-512 kernels
// on the same CPU. OpenBLAS reads OPENBLAS_CORETYPE once, in its load-time constructor, so the
// choice cannot be changed later in the process. ntp therefore checks the core OpenBLAS picked
// against cpuid before main() of every program that links the kernels (the `ntp` binary, its
// workers, tests and benchmarks): when the core is below what the flags allow, the process
// re-executes itself once with OPENBLAS_CORETYPE=<best core> and NTP_BLAS_FORCED_FROM=<old core>;
// children (workers of `ntp launch`) inherit both, so they start right away with the right core.
//
// Environment:
//   OPENBLAS_CORETYPE set by the user   always wins, nothing is re-executed
//   NTP_BLAS_AUTOSELECT=0               disables the check
//   NTP_BLAS_SIMULATE_DETECTED=1        test hook: treat OPENBLAS_CORETYPE as OpenBLAS's own
//                                       (mis)detection, so the correction path can be exercised
#pragma once

#include <string>
#include <string_view>

#include "kernels/cpu/isa.h"

namespace ntp::kernels::cpu {

// ISA level of an OpenBLAS core name: 0 SSE (and unknown names), 1 AVX, 2 AVX2+FMA, 3 AVX-512,
// 4 AVX-512 with BF16 (Cooperlake, SapphireRapids; same sgemm kernels as level 3).
int openblas_core_level(std::string_view core);

// The best OpenBLAS core for these flags ("Cooperlake", "SkylakeX", "Haswell", "Sandybridge"),
// or "" when the flags allow nothing above SSE. `why` (optional) gets the deciding flag.
std::string best_openblas_core(const CpuFeatures& f, std::string* why = nullptr);

// The core to force when OpenBLAS picked `detected` on a CPU with flags `f`; "" when `detected`
// is already as good.
std::string openblas_core_to_force(std::string_view detected, const CpuFeatures& f);

// openblas_get_corename() of this process.
std::string openblas_core();

// How the core of this process was decided.
enum class BlasCoreSource { kDetected, kForcedByCpuid, kUserSet };
BlasCoreSource blas_core_source();

// One line for start-up logs and benchmarks, e.g.
// "OpenBLAS 0.3.21 SkylakeX (forced from Prescott by cpuid: avx512f) ISA avx512, 1 thread;
// gemm: openblas (OpenBLAS SkylakeX), measured: ..." (the GEMM library in use and why,
// gemm_backend_select.h: the first call decides it).
std::string blas_description();

}  // namespace ntp::kernels::cpu
