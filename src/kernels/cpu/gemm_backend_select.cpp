#include "kernels/cpu/gemm_backend_select.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <mutex>
#include <optional>
#include <span>
#include <sstream>

#include "core/cpu_clock.h"
#include "kernels/cpu/gemm_bf16.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/parallel.h"

namespace ntp::kernels::cpu {
namespace {

// A choice cached per host (gemm_backend_select.h): the candidate's name and how it was made.
struct Choice {
  std::string name;
  std::string how;  // the end of the description line
};

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  }
  return "unknown CPU";
}

// What the choice depends on: the CPU and the libraries' kernel sets; "v2": measured with OpenBLAS
// at one thread (v1 timed the calling thread while OpenBLAS's others helped, overrating it).
std::string host_key() {
  std::string key = cpu_model() + "; v2";
  for (GemmBackend b : kAllGemmBackends) key += "; " + gemm_backend_library(b);
  return key;
}

// The file of one choice: `suffix` "" for the backend, "_bf16" for the bf16 path.
std::string cache_path(const char* suffix) {
  if (const char* p = std::getenv("NTP_GEMM_CACHE"); p != nullptr && *p != '\0') {
    return std::string(p) + suffix;
  }
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x != nullptr && *x != '\0') {
    return std::string(x) + "/ntp/gemm_backend" + suffix;
  }
  if (const char* h = std::getenv("HOME"); h != nullptr && *h != '\0') {
    return std::string(h) + "/.cache/ntp/gemm_backend" + suffix;
  }
  return "";
}

void make_parent_dirs(const std::string& path) {
  for (size_t i = path.find('/', 1); i != std::string::npos; i = path.find('/', i + 1)) {
    ::mkdir(path.substr(0, i).c_str(), 0755);  // EEXIST is fine
  }
}

// "name GFLOPS, name GFLOPS, ... GFLOP/s" of measured speeds, for the cache and the description.
// `Speed` has a `gflops` and the candidate in member `which`, named by `name`.
template <class Speed, class Candidate>
std::string speeds_text(const std::vector<Speed>& speeds, Candidate Speed::*which,
                        const char* (*name)(Candidate)) {
  std::string s;
  char buf[64];
  for (const Speed& v : speeds) {
    std::snprintf(buf, sizeof buf, "%s%s %.1f", s.empty() ? "" : ", ", name(v.*which), v.gflops);
    s += buf;
  }
  return s + " GFLOP/s";
}

// The bf16 paths the measurement compares, and so the ones NTP_BF16_GEMM_PATH may name.
constexpr Bf16GemmPath kMeasuredBf16Paths[] = {
    Bf16GemmPath::kAvx512Bf16, Bf16GemmPath::kRoundedSgemm, Bf16GemmPath::kOneDnnMatmul};

// Reads the cache line for `key` from an open file; false when it is absent or for another host.
bool read_cache(int fd, const std::string& key, Choice& out) {
  std::string text(4096, '\0');
  const ssize_t got = ::pread(fd, text.data(), text.size(), 0);
  if (got <= 0) return false;
  text.resize(static_cast<size_t>(got));
  std::istringstream in(text);
  std::string k, name, figures;
  if (!std::getline(in, k, '\t') || !std::getline(in, name, '\t') || !std::getline(in, figures)) {
    return false;
  }
  if (k != key) return false;
  out = {name, "measured earlier: " + figures};
  return true;
}

// A measurement: the chosen name and the figures it was chosen by.
struct Measured {
  std::string name, figures;
};

// The cached choice for `key` at `path`, or a new measurement written there; the lock makes
// processes that start together wait for the first one's measurement. `valid` says whether a
// cached name is still one of the candidates.
Choice cached_or_measured(const std::string& path, const std::string& key,
                          const std::function<Measured()>& measure,
                          const std::function<bool(const std::string&)>& valid) {
  if (path.empty()) {
    const Measured m = measure();
    return {m.name, "measured: " + m.figures};
  }
  make_parent_dirs(path);
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    const Measured m = measure();
    return {m.name, "measured: " + m.figures};
  }
  ::flock(fd, LOCK_EX);
  Choice c;
  if (read_cache(fd, key, c) && valid(c.name)) {
    c.how += ", cached in " + path;
  } else {
    const Measured m = measure();
    c = {m.name, "measured: " + m.figures + ", saved to " + path};
    const std::string line = key + "\t" + m.name + "\t" + m.figures + "\n";
    if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, line.data(), line.size(), 0) < 0) {
      c.how += " (not saved)";
    }
  }
  ::flock(fd, LOCK_UN);
  ::close(fd);
  return c;
}

// The user's choice in environment variable `var` when set (one line naming it and the
// `accepted` names, exit 2, when `valid` refuses it), else the cached or measured one.
Choice from_env_or_cache(const char* var, const char* accepted,
                         const std::function<bool(const std::string&)>& valid,
                         const std::string& path, const std::string& key,
                         const std::function<Measured()>& measure) {
  if (const char* env = std::getenv(var); env != nullptr && *env != '\0') {
    if (!valid(env)) {
      std::fprintf(stderr,
                   "error: %s '%s' is unknown; use %s (or unset it to choose by measurement)\n",
                   var, env, accepted);
      std::exit(2);
    }
    return {env, std::string("set by ") + var};
  }
  return cached_or_measured(path, key, measure, valid);
}

Choice decide() {
  return from_env_or_cache(
      "NTP_GEMM_BACKEND", "openblas, blis or onednn",
      [](const std::string& name) { return parse_gemm_backend(name).has_value(); }, cache_path(""),
      host_key(),
      [] {
        const std::vector<BackendSpeed> speeds = measure_gemm_backends();
        return Measured{gemm_backend_name(choose_gemm_backend(speeds)),
                        speeds_text(speeds, &BackendSpeed::backend, gemm_backend_name)};
      });
}

const Choice& choice() {
  static const Choice c = decide();
  return c;
}

std::optional<Bf16GemmPath> parse_bf16_path(const std::string& name) {
  for (Bf16GemmPath p : kMeasuredBf16Paths) {
    if (name == bf16_gemm_path_name(p)) return p;
  }
  return std::nullopt;
}

Choice decide_bf16_path() {
  return from_env_or_cache(
      "NTP_BF16_GEMM_PATH", "avx512_bf16, rounded-sgemm or onednn-matmul",
      [](const std::string& name) { return parse_bf16_path(name).has_value(); },
      cache_path("_bf16"), host_key() + "; bf16 paths v2",
      [] {
        const std::vector<Bf16PathSpeed> speeds = measure_bf16_gemm_paths();
        return Measured{bf16_gemm_path_name(choose_bf16_gemm_path(speeds)),
                        speeds_text(speeds, &Bf16PathSpeed::path, bf16_gemm_path_name)};
      });
}

const Choice& bf16_choice() {
  static const Choice c = decide_bf16_path();
  return c;
}

// The default GPT-2 step's products (width 512, 1024 tokens): c_fc forward (x w), its dX
// (dy w^T) and dW (x^T dy), with 256 rows instead of 1024 to keep a measurement short, and one
// attention block's scores (64 queries x 256 keys over a 64-wide head) repeated to a similar share.
struct StepProduct {
  bool ta, tb;
  int64_t m, n, k;
  int repeats;
};
constexpr StepProduct kStepProducts[] = {{false, false, 256, 2048, 512, 1},
                                         {false, true, 256, 512, 2048, 1},
                                         {true, false, 512, 2048, 256, 1},
                                         {false, true, 64, 256, 64, 16}};

// A set of products over shared operands, timed as a whole: a warm-up (library initialisation,
// JIT, packing buffers, primitives), then the best of `reps` runs by thread CPU time.
class ProductSet {
 public:
  explicit ProductSet(std::span<const StepProduct> shapes)
      : shapes_(shapes), a_(512 * 2048), b_(512 * 2048), c_(512 * 2048) {
    for (size_t i = 0; i < a_.size(); ++i) {
      a_[i] = static_cast<float>(i % 17) * 0.0625f - 0.5f;
      b_[i] = static_cast<float>(i % 13) * 0.0625f - 0.375f;
    }
    for (const StepProduct& s : shapes_) {
      flops_ += 2.0 * static_cast<double>(s.m * s.n * s.k) * s.repeats;
    }
  }
  // `product(shape, a, lda, b, ldb, c)` computes one product of the set; returns GFLOP/s.
  template <class Product>
  double gflops(int reps, Product&& product) const {
    auto run_all = [&] {
      for (const StepProduct& s : shapes_) {
        const int64_t lda = s.ta ? s.m : s.k, ldb = s.tb ? s.k : s.n;
        for (int r = 0; r < s.repeats; ++r) product(s, a_.data(), lda, b_.data(), ldb, c_.data());
      }
    };
    run_all();
    double best = 1e30;
    for (int r = 0; r < reps; ++r) {
      const double t0 = ntp::thread_cpu_seconds();
      run_all();
      best = std::min(best, ntp::thread_cpu_seconds() - t0);
    }
    return flops_ / best / 1e9;
  }

 private:
  std::span<const StepProduct> shapes_;
  std::vector<float> a_, b_;
  mutable std::vector<float> c_;
  double flops_ = 0.0;
};

// The rule of both choices: `baseline` stays unless another is at least kSwitchMargin faster; the
// fastest of those then. `Speed` has a `gflops` and the candidate in member `which`.
template <class Speed, class Candidate>
Candidate choose_by_margin(const std::vector<Speed>& speeds, Candidate baseline,
                           Candidate Speed::*which) {
  double base = 0.0;
  for (const Speed& s : speeds) {
    if (s.*which == baseline) base = s.gflops;
  }
  Candidate best = baseline;
  double best_gflops = base * kSwitchMargin;
  for (const Speed& s : speeds) {
    if (s.*which != baseline && s.gflops >= best_gflops) {
      best = s.*which;
      best_gflops = s.gflops;
    }
  }
  return best;
}

// A product of gemm's signature whose first argument picks how it is computed.
template <class Candidate>
using GemmVia = void (*)(Candidate, bool, bool, int64_t, int64_t, int64_t, float, const float*,
                         int64_t, const float*, int64_t, float, float*, int64_t);

// One Speed {candidate, GFLOP/s over `set`} per candidate, in order, on the calling thread.
template <class Speed, class Candidate>
std::vector<Speed> measure_each(const ProductSet& set, int reps,
                                std::span<const Candidate> candidates, GemmVia<Candidate> gemm) {
  std::vector<Speed> out;
  for (Candidate candidate : candidates) {
    out.push_back(
        {candidate, set.gflops(reps, [&](const StepProduct& s, const float* a, int64_t lda,
                                         const float* b, int64_t ldb, float* c) {
           gemm(candidate, s.ta, s.tb, s.m, s.n, s.k, 1.0f, a, lda, b, ldb, 0.0f, c, s.n);
         })});
  }
  return out;
}

}  // namespace

GemmBackend gemm_backend() { return *parse_gemm_backend(choice().name); }

std::vector<BackendSpeed> measure_gemm_backends(int reps) {
  const ProductSet set(kStepProducts);
  const SingleThreadedBlas one_blas_thread;  // thread CPU time then sees all of a product's work
  return measure_each<BackendSpeed>(set, reps, std::span<const GemmBackend>(kAllGemmBackends),
                                    backend_sgemm);
}

GemmBackend choose_gemm_backend(const std::vector<BackendSpeed>& speeds) {
  return choose_by_margin(speeds, GemmBackend::kOpenBlas, &BackendSpeed::backend);
}

std::string gemm_backend_description() {
  const Choice& c = choice();
  return "gemm: " + c.name + " (" + gemm_backend_library(gemm_backend()) + "), " + c.how;
}

std::vector<Bf16PathSpeed> measure_bf16_gemm_paths(int reps) {
  // The large products only: the attention block's is too small for a bf16 path to matter.
  const ProductSet set(std::span<const StepProduct>(kStepProducts).first(3));
  std::vector<Bf16PathSpeed> out;
  const SingleThreadedBlas one_blas_thread;
  parallel_for(1, 1, [&](int64_t, int64_t) {  // nested splits run inline on this thread
    out = measure_each<Bf16PathSpeed>(set, reps, std::span<const Bf16GemmPath>(kMeasuredBf16Paths),
                                      gemm_bf16_path);
  });
  return out;
}

Bf16GemmPath choose_bf16_gemm_path(const std::vector<Bf16PathSpeed>& speeds) {
  return choose_by_margin(speeds, Bf16GemmPath::kAvx512Bf16, &Bf16PathSpeed::path);
}

Bf16GemmPath measured_bf16_gemm_path() { return *parse_bf16_path(bf16_choice().name); }

std::string bf16_gemm_path_description() { return bf16_choice().how; }

}  // namespace ntp::kernels::cpu
