// Which GEMM library (gemm_backend.h) the process's gemm uses, chosen per host by measurement,
// as the OpenBLAS core is chosen by cpuid (blas_select.h).
//
// The first gemm call decides, once per process:
//   NTP_GEMM_BACKEND=openblas|blis|onednn   the user's choice; any other value is one line on
//                                           stderr naming it and the accepted ones, exit 2
//   else the host cache                     a file of one line "<host key>\t<backend>\t<figures>"
//                                           at $NTP_GEMM_CACHE, else
//                                           $XDG_CACHE_HOME/ntp/gemm_backend, else
//                                           $HOME/.cache/ntp/gemm_backend; used when its key is
//                                           this host's (CPU model, OpenBLAS core, the three
//                                           libraries' versions and kernel sets)
//   else a measurement                      measure_gemm_backends() (~0.1-0.3 s), written to the
//                                           cache under an exclusive lock, so the processes of a
//                                           job that start together measure once and all agree
//                                           (results are bit-identical only within a backend)
// The measurement keeps OpenBLAS unless another library is at least kSwitchMargin faster: on a
// shared host the figures move by a few percent between runs, and a choice that flips with them
// would make runs on the same host differ in their last bits for no gain.
// All backends compute the same products to float32 accuracy (GemmBackendTest: each within the
// float32 accumulation bound of a float64 reference).
#pragma once

#include <string>
#include <vector>

#include "kernels/cpu/gemm_backend.h"
#include "kernels/cpu/gemm_bf16.h"

namespace ntp::kernels::cpu {

inline constexpr double kSwitchMargin = 1.05;

// The process's backend (decided at the first call, as above).
GemmBackend gemm_backend();

// The measured speed of one backend on the step's shapes.
struct BackendSpeed {
  GemmBackend backend;
  double gflops;  // model FLOPs of the shapes / best thread CPU time
};

// Every backend on the default GPT-2 step's product shapes (forward, dX and dW of the widest
// layer with 256 rows, and one attention block product), one thread, best of `reps` runs of the
// set, by thread CPU time (which excludes time other jobs held the core).
std::vector<BackendSpeed> measure_gemm_backends(int reps = 3);

// The choice among measured speeds (kSwitchMargin rule above).
GemmBackend choose_gemm_backend(const std::vector<BackendSpeed>& speeds);

// One line for logs and benchmarks, e.g. "gemm: openblas (OpenBLAS Haswell), measured: openblas
// 181.2, blis 175.0, onednn 160.3 GFLOP/s, cached in /root/.cache/ntp/gemm_backend".
std::string gemm_backend_description();

// The bf16 path (gemm_bf16.h) of a host with avx512_bf16, chosen the same way, once per process:
//   NTP_BF16_GEMM_PATH=avx512_bf16|rounded-sgemm|onednn-matmul   the user's choice; any other
//                                              value is one line on stderr naming it, exit 2
//   else the host cache                        the backend's file name + "_bf16", same key
//   else a measurement                         measure_bf16_gemm_paths(), written there
// The instruction path is kept unless another is at least kSwitchMargin faster. On Sapphire
// Rapids ntp's vdpbf16ps kernel ran at 106-158 GFLOP/s, rounding the inputs for sgemm at 166-188,
// and oneDNN's matmul (AMX tiles) at 494-661. Call it only on a host with avx512_bf16
// (default_bf16_gemm_path does).
Bf16GemmPath measured_bf16_gemm_path();
// How that path was chosen: "measured: avx512_bf16 103.6, rounded-sgemm 187.2, ... GFLOP/s".
std::string bf16_gemm_path_description();

struct Bf16PathSpeed {
  Bf16GemmPath path;
  double gflops;
};
// The step's three large product shapes (measure_gemm_backends') through the instruction path,
// rounded sgemm and oneDNN's matmul, on the calling thread alone, best of `reps` by thread CPU
// time. Needs avx512_bf16.
std::vector<Bf16PathSpeed> measure_bf16_gemm_paths(int reps = 3);
// The choice among those speeds (the rule above).
Bf16GemmPath choose_bf16_gemm_path(const std::vector<Bf16PathSpeed>& speeds);

}  // namespace ntp::kernels::cpu
