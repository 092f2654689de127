#include "kernels/cpu/gemm_backend_select.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <sstream>

#include "kernels/cpu/isa.h"

namespace ntp::kernels::cpu {
namespace {

struct Choice {
  GemmBackend backend = GemmBackend::kOpenBlas;
  std::string how;  // the end of gemm_backend_description()
};

double thread_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  }
  return "unknown CPU";
}

// What the choice depends on: the CPU and the libraries' kernel sets.
std::string host_key() {
  std::string key = cpu_model();
  for (GemmBackend b : kAllGemmBackends) key += "; " + gemm_backend_library(b);
  return key;
}

std::string cache_path() {
  if (const char* p = std::getenv("NTP_GEMM_CACHE"); p != nullptr && *p != '\0') return p;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x != nullptr && *x != '\0') {
    return std::string(x) + "/ntp/gemm_backend";
  }
  if (const char* h = std::getenv("HOME"); h != nullptr && *h != '\0') {
    return std::string(h) + "/.cache/ntp/gemm_backend";
  }
  return "";
}

void make_parent_dirs(const std::string& path) {
  for (size_t i = path.find('/', 1); i != std::string::npos; i = path.find('/', i + 1)) {
    ::mkdir(path.substr(0, i).c_str(), 0755);  // EEXIST is fine
  }
}

std::string speeds_text(const std::vector<BackendSpeed>& speeds) {
  std::string s;
  char buf[64];
  for (const BackendSpeed& v : speeds) {
    std::snprintf(buf, sizeof buf, "%s%s %.1f", s.empty() ? "" : ", ", gemm_backend_name(v.backend),
                  v.gflops);
    s += buf;
  }
  return s + " GFLOP/s";
}

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
  const auto backend = parse_gemm_backend(name);
  if (k != key || !backend) return false;
  out = {*backend, "measured earlier: " + figures};
  return true;
}

Choice measure_and_choose() {
  const std::vector<BackendSpeed> speeds = measure_gemm_backends();
  return {choose_gemm_backend(speeds), "measured: " + speeds_text(speeds)};
}

// The cached choice, or a new measurement written to the cache; the lock makes processes that
// start together wait for the first one's measurement.
Choice cached_or_measured() {
  const std::string path = cache_path();
  if (path.empty()) return measure_and_choose();
  make_parent_dirs(path);
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return measure_and_choose();
  ::flock(fd, LOCK_EX);
  const std::string key = host_key();
  Choice c;
  if (read_cache(fd, key, c)) {
    c.how += ", cached in " + path;
  } else {
    const std::vector<BackendSpeed> speeds = measure_gemm_backends();
    c = {choose_gemm_backend(speeds), "measured: " + speeds_text(speeds) + ", saved to " + path};
    const std::string line =
        key + "\t" + gemm_backend_name(c.backend) + "\t" + speeds_text(speeds) + "\n";
    if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, line.data(), line.size(), 0) < 0) {
      c.how += " (not saved)";
    }
  }
  ::flock(fd, LOCK_UN);
  ::close(fd);
  return c;
}

Choice decide() {
  if (const char* env = std::getenv("NTP_GEMM_BACKEND"); env != nullptr && *env != '\0') {
    const auto b = parse_gemm_backend(env);
    if (!b) {
      std::fprintf(stderr,
                   "error: NTP_GEMM_BACKEND '%s' is unknown; use openblas, blis or onednn (or "
                   "unset it to choose by measurement)\n",
                   env);
      std::exit(2);
    }
    return {*b, "set by NTP_GEMM_BACKEND"};
  }
  return cached_or_measured();
}

const Choice& choice() {
  static const Choice c = decide();
  return c;
}

}  // namespace

GemmBackend gemm_backend() { return choice().backend; }

std::vector<BackendSpeed> measure_gemm_backends(int reps) {
  struct Shape {
    bool ta, tb;
    int64_t m, n, k;
  };
  // The default GPT-2 step (width 512, 1024 tokens): c_fc forward (x w), its dX (dy w^T) and dW
  // (x^T dy), with 256 rows instead of 1024 to keep the measurement short, and one attention
  // block's scores (64 queries x 256 keys over a 64-wide head) repeated to a similar share.
  constexpr Shape kShapes[] = {{false, false, 256, 2048, 512},
                               {false, true, 256, 512, 2048},
                               {true, false, 512, 2048, 256},
                               {false, true, 64, 256, 64}};
  constexpr int kAttentionRepeats = 16;
  std::vector<float> a(512 * 2048), b(512 * 2048), c(512 * 2048);
  for (size_t i = 0; i < a.size(); ++i) {
    a[i] = static_cast<float>(i % 17) * 0.0625f - 0.5f;
    b[i] = static_cast<float>(i % 13) * 0.0625f - 0.375f;
  }
  double flops = 0.0;
  for (const Shape& s : kShapes) {
    flops += 2.0 * static_cast<double>(s.m * s.n * s.k) * (s.m == 64 ? kAttentionRepeats : 1);
  }
  std::vector<BackendSpeed> out;
  for (GemmBackend backend : kAllGemmBackends) {
    auto run_all = [&] {
      for (const Shape& s : kShapes) {
        const int64_t lda = s.ta ? s.m : s.k, ldb = s.tb ? s.k : s.n;
        for (int r = 0; r < (s.m == 64 ? kAttentionRepeats : 1); ++r) {
          backend_sgemm(backend, s.ta, s.tb, s.m, s.n, s.k, 1.0f, a.data(), lda, b.data(), ldb,
                        0.0f, c.data(), s.n);
        }
      }
    };
    run_all();  // warm-up: library initialisation, JIT, packing buffers
    double best = 1e30;
    for (int r = 0; r < reps; ++r) {
      const double t0 = thread_seconds();
      run_all();
      best = std::min(best, thread_seconds() - t0);
    }
    out.push_back({backend, flops / best / 1e9});
  }
  return out;
}

GemmBackend choose_gemm_backend(const std::vector<BackendSpeed>& speeds) {
  double openblas = 0.0;
  for (const BackendSpeed& s : speeds) {
    if (s.backend == GemmBackend::kOpenBlas) openblas = s.gflops;
  }
  GemmBackend best = GemmBackend::kOpenBlas;
  double best_gflops = openblas * kSwitchMargin;
  for (const BackendSpeed& s : speeds) {
    if (s.backend != GemmBackend::kOpenBlas && s.gflops >= best_gflops) {
      best = s.backend;
      best_gflops = s.gflops;
    }
  }
  return best;
}

std::string gemm_backend_description() {
  const Choice& c = choice();
  return std::string("gemm: ") + gemm_backend_name(c.backend) + " (" +
         gemm_backend_library(c.backend) + "), " + c.how;
}

}  // namespace ntp::kernels::cpu
