// The GEMM libraries (kernels/cpu/gemm_backend.h) on a training step's own products, side by side
// in one run, against the core's FMA peak; then the step itself against that peak.
//
//   build/bench/model/model_gemm_backends_bench [--rounds R] [--layers L] [--batch B] [--width C]
//       [--heads H] [--context T]
// Defaults: the step benchmark's default models (GPT-2 and its Llama: width 512, 8 heads, context
// 256, 2 layers, vocabulary 256, batch 4), one thread.
//
// For each model one step is run with a gemm observer (gemm.h) that records every product's
// shape (trans_a, trans_b, m, n, k) and count; then, R rounds, interleaved: every library
// computes that list of products (fp32), the same with bf16-rounded operands (how gemm_bf16
// computes on a host without avx512_bf16: round, then the library's sgemm; the rounding is timed
// too), and the model's fp32 and bf16 steps through ntp's own gemm (whichever library the host
// chose). Figures are GFLOP/s of the products' FLOPs (2 m n k per product) over the best round by
// thread CPU time (excludes the time other jobs held the core), with the wall-clock best beside
// it. The step's figure is model FLOPs (training_flops) per second, as in train_step_bench.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "core/cpu_clock.h"
#include "core/rng.h"
#include "core_peak.h"
#include "full_model.h"
#include "kernels/cpu/bf16.h"
#include "kernels/cpu/blas_select.h"
#include "kernels/cpu/clip.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_backend.h"
#include "kernels/cpu/gemm_bf16.h"
#include "machine_info.h"
#include "model/gpt_model.h"
#include "model/llama_model.h"
#include "model/model_factory.h"
#include "train/adamw_optimizer.h"

namespace {

namespace cpu = ntp::kernels::cpu;
using Shape = std::tuple<bool, bool, int64_t, int64_t, int64_t>;  // trans_a, trans_b, m, n, k

std::map<Shape, int64_t>* recorded = nullptr;
void record(bool ta, bool tb, int64_t m, int64_t n, int64_t k) { ++(*recorded)[{ta, tb, m, n, k}]; }

double wall_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct Best {
  double cpu = 1e30, wall = 1e30;
  template <class F>
  void time(F&& f) {
    const double c0 = ntp::thread_cpu_seconds(), w0 = wall_seconds();
    f();
    cpu = std::min(cpu, ntp::thread_cpu_seconds() - c0);
    wall = std::min(wall, wall_seconds() - w0);
  }
};

struct Model {
  ntp::model::ModelConfig config;
  cpu::MatmulDtype dtype;
  std::unique_ptr<ntp::model::Model> model;
  std::unique_ptr<ntp::train::AdamWOptimizer> opt;
  Best step;
};

// One family's recorded products and, per library and dtype, their best times.
struct Products {
  std::string family;
  std::map<Shape, int64_t> shapes;
  double flops = 0;
  std::map<std::pair<int, int>, Best> times;  // (backend index, 0 fp32 / 1 bf16)
};

// Operand buffers large enough for every recorded shape, filled once.
struct Buffers {
  std::vector<float> a, b, c, ra, rb;
  explicit Buffers(size_t n) : a(n), b(n), c(n), ra(n), rb(n) {
    ntp::Rng rng(5);
    for (size_t i = 0; i < n; ++i) {
      a[i] = static_cast<float>(rng.uniform() - 0.5);
      b[i] = static_cast<float>(rng.uniform() - 0.5);
    }
  }
};

void run_products(const Products& p, cpu::GemmBackend backend, bool bf16, Buffers& buf) {
  for (const auto& [shape, count] : p.shapes) {
    const auto [ta, tb, m, n, k] = shape;
    const int64_t a_rows = ta ? k : m, a_cols = ta ? m : k, b_rows = tb ? n : k,
                  b_cols = tb ? k : n;
    for (int64_t r = 0; r < count; ++r) {
      const float* a = buf.a.data();
      const float* b = buf.b.data();
      if (bf16) {  // gemm_bf16's rounded-sgemm path, on this library
        cpu::round_block_to_bf16(a, a_rows, a_cols, a_cols, buf.ra.data(), a_cols);
        cpu::round_block_to_bf16(b, b_rows, b_cols, b_cols, buf.rb.data(), b_cols);
        a = buf.ra.data();
        b = buf.rb.data();
      }
      cpu::backend_sgemm(backend, ta, tb, m, n, k, 1.0f, a, a_cols, b, b_cols, 0.0f, buf.c.data(),
                         n);
    }
  }
}

std::string load_average() {
  std::ifstream in("/proc/loadavg");
  std::string one, five, fifteen;
  in >> one >> five >> fifteen;
  return one + " " + five + " " + fifteen;
}

int64_t flag_value(const char* flag, const char* v) {
  const long value = std::strtol(v, nullptr, 10);
  if (value <= 0) {
    std::fprintf(stderr, "error: %s needs a positive integer, got '%s'\n", flag, v);
    std::exit(2);
  }
  return value;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t rounds = 5, layers = 2, batch = 4, width = 512, heads = 8, context = 256;
  for (int i = 1; i < argc; i += 2) {
    const std::string flag = argv[i];
    int64_t* target = flag == "--rounds"    ? &rounds
                      : flag == "--layers"  ? &layers
                      : flag == "--batch"   ? &batch
                      : flag == "--width"   ? &width
                      : flag == "--heads"   ? &heads
                      : flag == "--context" ? &context
                                            : nullptr;
    if (target == nullptr || i + 1 >= argc) {
      std::fprintf(stderr,
                   "error: unknown flag or missing value '%s' (use --rounds, --layers, --batch, "
                   "--width, --heads, --context with a positive integer)\n",
                   flag.c_str());
      return 2;
    }
    *target = flag_value(argv[i], argv[i + 1]);
  }
  cpu::set_blas_threads(1);
  std::vector<int32_t> tokens(static_cast<size_t>(batch * context)), targets(tokens.size());
  ntp::Rng rng(3);
  for (size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = static_cast<int32_t>(rng.below(256));
    targets[i] = static_cast<int32_t>(rng.below(256));
  }
  std::vector<Model> models;
  std::vector<Products> products;
  auto step = [&](Model& e) {
    e.model->zero_grad();
    (void)e.model->forward_backward(tokens, targets, batch, context).value();
    const double norm = e.model->grad_norm().value();
    e.opt->step(e.model->params(), 1e-4f, cpu::clip_coefficient(norm, 1.0));
  };
  size_t largest = 0;
  for (const auto family : {ntp::model::ModelFamily::kGpt2, ntp::model::ModelFamily::kLlama}) {
    for (const auto dtype : {cpu::MatmulDtype::kFp32, cpu::MatmulDtype::kBf16}) {
      Model e;
      e.config = ntp::bench::bench_model_config(family, layers, heads, width, context);
      e.dtype = dtype;
      e.model = ntp::bench::make_full_model(e.config);
      if (e.model == nullptr) {
        std::fprintf(stderr, "error: invalid model shape (width %lld, heads %lld)\n",
                     static_cast<long long>(width), static_cast<long long>(heads));
        return 2;
      }
      e.model->set_matmul_dtype(dtype);
      e.opt = std::make_unique<ntp::train::AdamWOptimizer>(e.model->params(),
                                                           cpu::AdamWHyper{.lr = 1e-4f});
      if (dtype == cpu::MatmulDtype::kFp32) {  // record the family's products in its first step
        Products p;
        p.family = ntp::model::model_family_name(family);
        recorded = &p.shapes;
        cpu::set_gemm_observer(&record);
        step(e);
        cpu::set_gemm_observer(nullptr);
        for (const auto& [s, count] : p.shapes) {
          const auto [ta, tb, m, n, k] = s;
          p.flops += 2.0 * static_cast<double>(m * n * k * count);
          largest = std::max({largest, static_cast<size_t>(m * k), static_cast<size_t>(k * n),
                              static_cast<size_t>(m * n)});
        }
        products.push_back(std::move(p));
      } else {
        step(e);  // warm-up
      }
      models.push_back(std::move(e));
    }
  }
  Buffers buf(largest);
  for (const Products& p : products) {  // warm-up: each library's initialisation and JIT
    for (int b = 0; b < 3; ++b) run_products(p, cpu::kAllGemmBackends[b], false, buf);
  }
  for (int64_t r = 0; r < rounds; ++r) {
    for (Products& p : products) {
      for (int b = 0; b < 3; ++b) {
        for (int bf16 = 0; bf16 < 2; ++bf16) {
          p.times[{b, bf16}].time(
              [&] { run_products(p, cpu::kAllGemmBackends[b], bf16 == 1, buf); });
        }
      }
    }
    for (Model& e : models) e.step.time([&] { step(e); });
  }
  const ntp::bench::CorePeak peak = ntp::bench::measure_core_peak();

  std::printf("machine: %s, %ld online CPUs; load average at the end: %s\n",
              ntp::bench::cpu_model().c_str(), sysconf(_SC_NPROCESSORS_ONLN),
              load_average().c_str());
  std::printf("blas: %s\n", cpu::blas_description().c_str());
  std::printf("bf16 GEMM path of ntp: %s (host avx512_bf16: %s)\n",
              cpu::bf16_gemm_path_name(cpu::default_bf16_gemm_path()),
              cpu::host_has_avx512_bf16() ? "yes" : "no");
  std::printf(
      "reproduce: %s --rounds %lld --layers %lld --batch %lld --width %lld --heads %lld "
      "--context %lld (1 thread)\n",
      argv[0], static_cast<long long>(rounds), static_cast<long long>(layers),
      static_cast<long long>(batch), static_cast<long long>(width), static_cast<long long>(heads),
      static_cast<long long>(context));
  std::printf("core FMA peak, float32, one core: %s\n", peak.describe().c_str());
  const double ref_peak = peak.reference_flops();
  for (const Products& p : products) {
    int64_t calls = 0;
    for (const auto& [s, count] : p.shapes) calls += count;
    std::printf("\n%s step's products: %zu shapes, %lld calls, %.2f GFLOP\n", p.family.c_str(),
                p.shapes.size(), static_cast<long long>(calls), p.flops / 1e9);
    std::printf("  %-34s %12s %12s %12s %12s\n", "library", "fp32 GFLOP/s", "of peak",
                "bf16 GFLOP/s", "of peak");
    for (int b = 0; b < 3; ++b) {
      const Best& f = p.times.at({b, 0});
      const Best& h = p.times.at({b, 1});
      std::printf("  %-34s %6.1f (%5.1f) %12.3f %6.1f (%5.1f) %12.3f\n",
                  cpu::gemm_backend_library(cpu::kAllGemmBackends[b]).c_str(),
                  p.flops / f.cpu / 1e9, p.flops / f.wall / 1e9, p.flops / f.cpu / ref_peak,
                  p.flops / h.cpu / 1e9, p.flops / h.wall / 1e9, p.flops / h.cpu / ref_peak);
    }
    std::printf(
        "  (GFLOP/s by thread CPU time, by wall time in parentheses; of peak = of FMA units x "
        "lanes x 2 x measured clock)\n");
  }
  std::printf("\n");
  for (const Model& e : models) {
    const double flops = ntp::model::training_flops(e.config, batch, context);
    std::printf(
        "step %s %s: %.1f ms CPU (%.1f wall), %.2f model GFLOP, %.1f model GFLOP/s = %.3f of the "
        "FMA peak\n",
        ntp::model::model_family_name(e.config.family), cpu::matmul_dtype_name(e.dtype),
        e.step.cpu * 1e3, e.step.wall * 1e3, flops / 1e9, flops / e.step.cpu / 1e9,
        flops / e.step.cpu / ref_peak);
  }
  return 0;
}
