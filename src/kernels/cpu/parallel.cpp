#include "kernels/cpu/parallel.h"

#include <cblas.h>
#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <new>
#include <thread>
#include <vector>

namespace ntp::kernels::cpu {
namespace {

thread_local bool in_parallel_range = false;

// Workers wait on a condition variable for the next call's generation, claim ranges through an
// atomic counter (the caller claims too), and count the ranges they finished.
class Pool {
 public:
  static Pool& instance() {
    static Pool* pool = [] {
      // A forked child has none of the parent's workers: start from an empty pool there.
      pthread_atfork(nullptr, nullptr, [] { Pool::instance().forget_workers_after_fork(); });
      return new Pool;  // never destroyed: workers block in wait() until the process exits
    }();
    return *pool;
  }

  void run(int parts, const std::function<void(int)>& task) {
    ensure_workers(parts - 1);
    {
      std::lock_guard<std::mutex> lock(mu_);
      task_ = &task;
      parts_ = parts;
      next_.store(0, std::memory_order_relaxed);
      done_.store(0, std::memory_order_relaxed);
      ++generation_;
    }
    cv_.notify_all();
    work(task, parts);
    // The caller's own range is usually last to finish; the rest are short waits. Then no worker
    // may still hold this call's task (active_) before the next call reuses the counters.
    while (done_.load(std::memory_order_acquire) < parts) std::this_thread::yield();
    for (;;) {
      std::lock_guard<std::mutex> lock(mu_);
      if (active_ == 0) {
        task_ = nullptr;
        return;
      }
    }
  }

 private:
  void ensure_workers(int count) {
    while (static_cast<int>(workers_->size()) < count) {
      workers_->emplace_back([this] { worker_loop(); });
    }
  }

  void forget_workers_after_fork() {
    // The old threads do not exist here (leak their handles), and one of them may have held mu_
    // at the fork: start over with a fresh mutex and condition variable.
    workers_ = new std::vector<std::thread>;
    new (&mu_) std::mutex;
    new (&cv_) std::condition_variable;
    generation_ = 0;
    active_ = 0;
    task_ = nullptr;
  }

  // Claims and runs ranges until none is left.
  void work(const std::function<void(int)>& task, int parts) {
    for (int p = next_.fetch_add(1); p < parts; p = next_.fetch_add(1)) {
      task(p);
      done_.fetch_add(1, std::memory_order_release);
    }
  }

  void worker_loop() {
    in_parallel_range = true;
    uint64_t seen = 0;
    for (;;) {
      const std::function<void(int)>* task = nullptr;
      int parts = 0;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return generation_ != seen && task_ != nullptr; });
        seen = generation_;
        task = task_;
        parts = parts_;
        ++active_;
      }
      work(*task, parts);
      std::lock_guard<std::mutex> lock(mu_);
      --active_;
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::thread>* workers_ = new std::vector<std::thread>;
  const std::function<void(int)>* task_ = nullptr;
  int parts_ = 0;
  int active_ = 0;  // workers inside work() for the current call
  uint64_t generation_ = 0;
  std::atomic<int> next_{0}, done_{0};
};

// 0 until the first kernel_threads() or set_kernel_threads().
std::atomic<int> configured_threads{0};

}  // namespace

int kernel_threads() {
  int threads = configured_threads.load(std::memory_order_relaxed);
  if (threads == 0) {
    threads = std::max(1, openblas_get_num_threads());
    int expected = 0;
    if (!configured_threads.compare_exchange_strong(expected, threads)) threads = expected;
  }
  return threads;
}

void set_kernel_threads(int threads) {
  configured_threads.store(std::max(1, threads), std::memory_order_relaxed);
}

void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& f) {
  if (n <= 0) return;
  const int64_t threads = in_parallel_range ? 1 : kernel_threads();
  const int64_t parts = std::min(threads, std::max<int64_t>(1, n / std::max<int64_t>(1, grain)));
  if (parts <= 1) {
    f(0, n);
    return;
  }
  const std::function<void(int)> task = [&](int p) {
    const bool was = in_parallel_range;
    in_parallel_range = true;
    f(n * p / parts, n * (p + 1) / parts);
    in_parallel_range = was;
  };
  Pool::instance().run(static_cast<int>(parts), task);
}

bool inside_parallel_range() { return in_parallel_range; }

SingleThreadedBlas::SingleThreadedBlas() : saved_(openblas_get_num_threads()) {
  kernel_threads();  // fixes ntp's count from OpenBLAS's before it is lowered here
  if (saved_ != 1) openblas_set_num_threads(1);
}

SingleThreadedBlas::~SingleThreadedBlas() {
  if (saved_ != 1) openblas_set_num_threads(saved_);
}

}  // namespace ntp::kernels::cpu
