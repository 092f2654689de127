// Model FLOP/s of a GPT-2 training step on CPU as a fraction of OpenBLAS sgemm FLOP/s, both
// measured in the same run, interleaved, at the same OpenBLAS thread count.
//
//   build/bench/model/model_train_step_bench [--threads N] [--layers L] [--batch B] [--rounds R]
//       [--width C] [--heads H] [--context T] [--sgemm 0|1]
//       [--model gpt2|llama|both] [--dtype fp32|bf16|both]
// Defaults: width 512, context 256, 8 heads, 2 layers, vocabulary 256, batch 4, 1 thread, GPT-2,
// fp32. --model llama is the Llama of the same width, heads and FFN width (4 x width), KV heads =
// heads / 2; --dtype bf16 sets the model's matmul inputs to bf16 (kernels/cpu/matmul.h). With
// `both`, every combination is built (same seed) and their steps are interleaved in each round,
// so that the bf16 / fp32 step-time ratio printed per model is measured side by side. The core's
// FMA peak (a register-only loop of independent FMAs at the widest vector, one thread, float32) is
// printed with it: the ceiling of the float32 path on an AVX2 host; vdpbf16ps would double it per
// instruction on an AVX-512 BF16 host. With a bf16 model the largest product is also timed
// through gemm_bf16 beside sgemm.
// --sgemm 0 times the step alone (no sgemm reference buffers), so that the peak resident memory
// printed last is the step's own (bench/model/compare_torch.sh compares it with PyTorch's).
// Model FLOPs per step = GptModel::training_flops (6 per matmul parameter per token + 12 L T C
// per token for attention); the step is forward + backward + grad norm + AdamW. The sgemm
// reference is the model's largest product shape (B*T x C) * (C x 4C) and a 1024^3 square: at one
// thread each as one call of every library ntp can use (OpenBLAS, BLIS, oneDNN: the host's best
// sgemm, whichever ntp picked), above one thread as one OpenBLAS call on OpenBLAS's threads and
// through ntp's gemm, which splits it over ntp's threads; the ratio is taken against the fastest.
// Each figure is the best of R rounds, by wall clock and (second line) by process CPU time, which
// on a shared host excludes the time other jobs held the core (the 1-thread CPU-time ratio moves by
// ~0.01 where the wall one moves by 0.1).
#include <cblas.h>
#include <sys/resource.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "core/rng.h"
#include "core_peak.h"
#include "full_model.h"
#include "kernels/cpu/blas_select.h"
#include "kernels/cpu/clip.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_backend.h"
#include "kernels/cpu/gemm_bf16.h"
#include "kernels/cpu/matmul.h"
#include "machine_info.h"
#include "model/gpt_model.h"
#include "model/llama_model.h"
#include "model/model_factory.h"
#include "train/adamw_optimizer.h"

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// CPU time of the whole process (all threads) in seconds. At one BLAS thread it excludes the
// time the process was preempted by other jobs, so ratios of CPU times stay meaningful on a
// loaded host where wall-clock best-ofs swing by +-0.1.
double cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// Best wall and CPU seconds of a repeated measurement.
struct Best {
  double wall = 1e30, cpu = 1e30;
  void add(double w, double c) {
    wall = std::min(wall, w);
    cpu = std::min(cpu, c);
  }
};

// Times f() once into best.
template <class F>
void time_into(Best& best, F&& f) {
  const double c0 = cpu_seconds();
  const auto t = Clock::now();
  f();
  const double wall = seconds_since(t);
  best.add(wall, cpu_seconds() - c0);
}

// The operands of C[m,n] = A[m,k] B[k,n]: A and B uniform in [-0.5, 0.5) from seed 1.
struct Operands {
  Operands(int64_t m, int64_t n, int64_t k)
      : a(static_cast<size_t>(m * k)),
        b(static_cast<size_t>(k * n)),
        c(static_cast<size_t>(m * n)) {
    ntp::Rng rng(1);
    for (float& v : a) v = static_cast<float>(rng.uniform() - 0.5);
    for (float& v : b) v = static_cast<float>(rng.uniform() - 0.5);
  }
  std::vector<float> a, b, c;
};

// One untimed call of product() (first touches, library set-up), then `reps` timed into best.
template <class Product>
void warm_then_time(int reps, Best& best, Product&& product) {
  product();
  for (int r = 0; r < reps; ++r) time_into(best, product);
}

// Who runs the reference product: OpenBLAS with its own threads (one cblas_sgemm call), ntp's
// gemm, which splits it over ntp's threads with single-threaded parts (kernels/cpu/gemm.h), or
// (at one thread) one single-threaded call of each library ntp can choose among
// (gemm_backend.h), so that "best sgemm" is the host's best library, not the one in use.
enum class Via { kOpenBlasThreads, kNtpSplit, kBackend };

// A reference product and its best time.
struct Reference {
  int64_t m, n, k;
  int reps;  // per round
  Via via;
  ntp::kernels::cpu::GemmBackend backend = ntp::kernels::cpu::GemmBackend::kOpenBlas;  // kBackend
  Best time;
  double flops() const { return 2.0 * static_cast<double>(m * n * k); }
  std::string who() const {
    if (via == Via::kNtpSplit) return "ntp's split over its threads";
    if (via == Via::kOpenBlasThreads) return "one OpenBLAS call, OpenBLAS's threads";
    return ntp::kernels::cpu::gemm_backend_library(backend) + ", one call";
  }
};

// Best-of-`reps` seconds (wall and CPU) of C[m,n] = A[m,k] B[k,n], into ref.time.
void time_sgemm(Reference& ref) {
  const int64_t m = ref.m, n = ref.n, k = ref.k;
  Operands o(m, n, k);
  auto product = [&] {
    if (ref.via == Via::kNtpSplit) {
      ntp::kernels::cpu::gemm(false, false, m, n, k, 1.0f, o.a.data(), k, o.b.data(), n, 0.0f,
                              o.c.data(), n);
    } else if (ref.via == Via::kBackend) {
      ntp::kernels::cpu::backend_sgemm(ref.backend, false, false, m, n, k, 1.0f, o.a.data(), k,
                                       o.b.data(), n, 0.0f, o.c.data(), n);
    } else {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<blasint>(m),
                  static_cast<blasint>(n), static_cast<blasint>(k), 1.0f, o.a.data(),
                  static_cast<blasint>(k), o.b.data(), static_cast<blasint>(n), 0.0f, o.c.data(),
                  static_cast<blasint>(n));
    }
  };
  warm_then_time(ref.reps, ref.time, product);
}

// Best-of-`reps` seconds of the same product through gemm_bf16 (its default path on this host).
void time_gemm_bf16(int64_t m, int64_t n, int64_t k, int reps, Best& best) {
  Operands o(m, n, k);
  warm_then_time(reps, best, [&] {
    ntp::kernels::cpu::gemm_bf16(false, false, m, n, k, 1.0f, o.a.data(), k, o.b.data(), n, 0.0f,
                                 o.c.data(), n);
  });
}

// One model of the comparison: its family, matmul dtype, optimizer and best step time.
struct Entry {
  ntp::model::ModelConfig config;
  ntp::kernels::cpu::MatmulDtype dtype;
  std::unique_ptr<ntp::model::Model> model;
  std::unique_ptr<ntp::train::AdamWOptimizer> opt;
  Best time;
  std::string label() const {
    return std::string(ntp::model::model_family_name(config.family)) + " " +
           ntp::kernels::cpu::matmul_dtype_name(dtype);
  }
};

}  // namespace

int main(int argc, char** argv) {
  int threads = 1, rounds = 8;
  int64_t layers = 2, batch = 4, width = 512, heads = 8, context = 256;
  bool with_sgemm = true;
  std::string model_flag = "gpt2", dtype_flag = "fp32";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--model" || flag == "--dtype") {
      const std::string v = argv[i + 1];
      const bool ok = flag == "--model" ? (v == "gpt2" || v == "llama" || v == "both")
                                        : (v == "fp32" || v == "bf16" || v == "both");
      if (!ok) {
        std::fprintf(stderr, "error: %s '%s' is unknown; use %s\n", flag.c_str(), v.c_str(),
                     flag == "--model" ? "gpt2, llama or both" : "fp32, bf16 or both");
        return 2;
      }
      (flag == "--model" ? model_flag : dtype_flag) = v;
      continue;
    }
    const long value = std::strtol(argv[i + 1], nullptr, 10);
    if (value <= 0 && !(flag == "--sgemm" && value == 0)) {
      std::fprintf(stderr, "error: %s needs a positive integer, got '%s'\n", flag.c_str(),
                   argv[i + 1]);
      return 2;
    }
    if (flag == "--threads") {
      threads = static_cast<int>(value);
    } else if (flag == "--layers") {
      layers = value;
    } else if (flag == "--batch") {
      batch = value;
    } else if (flag == "--rounds") {
      rounds = static_cast<int>(value);
    } else if (flag == "--width") {
      width = value;
    } else if (flag == "--heads") {
      heads = value;
    } else if (flag == "--context") {
      context = value;
    } else if (flag == "--sgemm") {
      with_sgemm = value != 0;
    } else {
      std::fprintf(stderr,
                   "error: unknown flag %s (use --threads, --layers, --batch, --rounds, --width, "
                   "--heads, --context, --sgemm, --model, --dtype)\n",
                   flag.c_str());
      return 2;
    }
  }
  const int used_threads = ntp::kernels::cpu::set_blas_threads(threads);

  // The shape every entry shares (for the report); each entry sets its family.
  const ntp::model::ModelConfig config =
      ntp::bench::bench_model_config(ntp::model::ModelFamily::kGpt2, layers, heads, width, context);
  const int64_t t = config.n_ctx;
  std::vector<Entry> entries;
  for (const char* family : {"gpt2", "llama"}) {
    if (model_flag != "both" && model_flag != family) continue;
    for (const char* dtype : {"fp32", "bf16"}) {
      if (dtype_flag != "both" && dtype_flag != dtype) continue;
      Entry e;
      e.config = ntp::bench::bench_model_config(std::string(family) == "llama"
                                                    ? ntp::model::ModelFamily::kLlama
                                                    : ntp::model::ModelFamily::kGpt2,
                                                layers, heads, width, context);
      e.dtype = std::string(dtype) == "bf16" ? ntp::kernels::cpu::MatmulDtype::kBf16
                                             : ntp::kernels::cpu::MatmulDtype::kFp32;
      e.model = ntp::bench::make_full_model(e.config);
      if (e.model == nullptr) {
        std::fprintf(stderr, "error: invalid %s model shape\n", family);
        return 2;
      }
      e.model->set_matmul_dtype(e.dtype);
      e.opt = std::make_unique<ntp::train::AdamWOptimizer>(
          e.model->params(), ntp::kernels::cpu::AdamWHyper{.lr = 1e-4f});
      entries.push_back(std::move(e));
    }
  }
  std::vector<int32_t> tokens(static_cast<size_t>(batch * t)), targets(tokens.size());
  ntp::Rng rng(3);
  for (size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = static_cast<int32_t>(rng.below(256));
    targets[i] = static_cast<int32_t>(rng.below(256));
  }
  auto step = [&](Entry& e) {
    e.model->zero_grad();
    const double loss = e.model->forward_backward(tokens, targets, batch, t).value();
    const double norm = e.model->grad_norm().value();
    e.opt->step(e.model->params(), 1e-4f, ntp::kernels::cpu::clip_coefficient(norm, 1.0));
    return loss;
  };
  for (Entry& e : entries) step(e);  // warm-up: allocates activations

  auto flops_of = [&](const Entry& e) { return ntp::model::training_flops(e.config, batch, t); };
  // References: two shapes, each run both ways (at one thread both ways are one OpenBLAS call).
  const int64_t fc_m = batch * t, fc_n = 4 * config.n_embd, fc_k = config.n_embd;
  const ntp::bench::CorePeak peak = ntp::bench::measure_core_peak();
  const double fma_peak = peak.measured_flops;
  std::vector<Reference> refs;
  auto add_shapes = [&](Via via, ntp::kernels::cpu::GemmBackend backend) {
    refs.push_back({fc_m, fc_n, fc_k, 3, via, backend, {}});
    refs.push_back({1024, 1024, 1024, 2, via, backend, {}});
  };
  if (used_threads == 1) {
    for (const auto backend : ntp::kernels::cpu::kAllGemmBackends)
      add_shapes(Via::kBackend, backend);
  } else {
    add_shapes(Via::kOpenBlasThreads, ntp::kernels::cpu::GemmBackend::kOpenBlas);
    add_shapes(Via::kNtpSplit, ntp::kernels::cpu::GemmBackend::kOpenBlas);
  }
  // The bf16 product at the largest shape, when a bf16 model is timed (not a reference).
  const bool any_bf16 = std::any_of(entries.begin(), entries.end(), [](const Entry& e) {
    return e.dtype == ntp::kernels::cpu::MatmulDtype::kBf16;
  });
  Best bf16_gemm;
  for (int r = 0; r < rounds; ++r) {
    // Interleaved so that all see the same machine load.
    if (with_sgemm) {
      for (Reference& ref : refs) time_sgemm(ref);
      if (any_bf16) time_gemm_bf16(fc_m, fc_n, fc_k, 3, bf16_gemm);
    }
    for (Entry& e : entries) time_into(e.time, [&] { step(e); });
  }
  double reference = 0.0, cpu_reference = 0.0;
  for (const Reference& ref : refs) {
    reference = std::max(reference, ref.flops() / ref.time.wall);
    cpu_reference = std::max(cpu_reference, ref.flops() / ref.time.cpu);
  }

  utsname u{};
  uname(&u);
  std::printf("machine: %s, %ld online CPUs, %s %s\n", ntp::bench::cpu_model().c_str(),
              sysconf(_SC_NPROCESSORS_ONLN), u.sysname, u.release);
  std::printf(
      "config: width %lld, context %lld, %lld heads, %lld layers, vocab %lld, "
      "batch %lld (%lld tokens/step); BLAS threads %d; best of %d rounds\n",
      static_cast<long long>(config.n_embd), static_cast<long long>(t),
      static_cast<long long>(config.n_head), static_cast<long long>(layers),
      static_cast<long long>(config.vocab_size), static_cast<long long>(batch),
      static_cast<long long>(batch * t), used_threads, rounds);
  for (const Entry& e : entries) {
    std::printf("model %s: %lld params\n", e.label().c_str(),
                static_cast<long long>(e.config.num_params()));
  }
  std::printf("blas: %s\n", ntp::kernels::cpu::blas_description().c_str());
  std::printf("bf16 GEMM path: %s (host avx512_bf16: %s)\n",
              ntp::kernels::cpu::bf16_gemm_path_name(ntp::kernels::cpu::default_bf16_gemm_path()),
              ntp::kernels::cpu::host_has_avx512_bf16() ? "yes" : "no");
  std::printf(
      "reproduce: %s --threads %d --layers %lld --batch %lld --rounds %d --width %lld --heads %lld "
      "--context %lld --sgemm %d --model %s --dtype %s\n",
      argv[0], threads, static_cast<long long>(layers), static_cast<long long>(batch), rounds,
      static_cast<long long>(width), static_cast<long long>(heads), static_cast<long long>(t),
      with_sgemm ? 1 : 0, model_flag.c_str(), dtype_flag.c_str());
  if (fma_peak > 0)
    std::printf("core FMA peak, float32, one thread: %s\n", peak.describe().c_str());
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  if (with_sgemm) {
    for (size_t i = 0; i + 1 < refs.size(); i += 2) {
      std::printf("sgemm (%lldx%lld)*(%lldx%lld): %.2f GFLOP/s; sgemm 1024^3: %.2f GFLOP/s (%s)\n",
                  static_cast<long long>(fc_m), static_cast<long long>(fc_k),
                  static_cast<long long>(fc_k), static_cast<long long>(fc_n),
                  refs[i].flops() / refs[i].time.wall / 1e9,
                  refs[i + 1].flops() / refs[i + 1].time.wall / 1e9, refs[i].who().c_str());
    }
    if (any_bf16) {
      const double flops = 2.0 * static_cast<double>(fc_m * fc_n * fc_k);
      std::printf(
          "gemm_bf16 %s (%lldx%lld)*(%lldx%lld): %.2f GFLOP/s, %.3f of sgemm's\n",
          ntp::kernels::cpu::bf16_gemm_path_name(ntp::kernels::cpu::default_bf16_gemm_path()),
          static_cast<long long>(fc_m), static_cast<long long>(fc_k), static_cast<long long>(fc_k),
          static_cast<long long>(fc_n), flops / bf16_gemm.wall / 1e9,
          refs[0].time.wall / bf16_gemm.wall);
    }
  }
  for (const Entry& e : entries) {
    const double step_flops = flops_of(e), best_step = e.time.wall;
    const double model_flops = step_flops / best_step;
    // The plain "training step:" line for a single model keeps compare_torch.py's format.
    const std::string tag = entries.size() == 1 ? "" : " [" + e.label() + "]";
    std::printf("training step%s: %.1f ms, %.2f model GFLOP/step, %.2f model GFLOP/s", tag.c_str(),
                best_step * 1e3, step_flops / 1e9, model_flops / 1e9);
    if (fma_peak > 0) std::printf(", %.3f of the FMA peak", model_flops / fma_peak);
    std::printf("\n");
    if (with_sgemm) {
      std::printf("ratio%s model FLOP/s / best sgemm FLOP/s = %.3f (goal >= 0.8)\n", tag.c_str(),
                  model_flops / reference);
      // Same ratio from process CPU time, at one thread only: with more, CPU time also counts
      // the time idle threads spin, and the ratio would no longer compare with the one above.
      if (used_threads == 1) {
        std::printf("by CPU time%s: step %.1f ms, sgemm %.2f GFLOP/s, ratio %.3f\n", tag.c_str(),
                    e.time.cpu * 1e3, cpu_reference / 1e9, step_flops / e.time.cpu / cpu_reference);
      }
    }
  }
  for (const Entry& a : entries) {  // bf16 against fp32 of the same family, same rounds
    if (a.dtype != ntp::kernels::cpu::MatmulDtype::kBf16) continue;
    for (const Entry& b : entries) {
      if (b.dtype == ntp::kernels::cpu::MatmulDtype::kFp32 && b.config.family == a.config.family) {
        std::printf("%s: bf16 step / fp32 step = %.3f (wall), %.3f (CPU time)\n",
                    ntp::model::model_family_name(a.config.family), a.time.wall / b.time.wall,
                    a.time.cpu / b.time.cpu);
      }
    }
  }
  std::printf("peak resident memory: %.1f MiB\n", static_cast<double>(usage.ru_maxrss) / 1024.0);
  return 0;
}
