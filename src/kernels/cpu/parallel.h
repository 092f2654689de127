// Splitting ntp's own CPU kernels over the cores OpenBLAS is allowed (set_blas_threads, gemm.h),
// so that at 2 BLAS threads the element-wise kernels and the attention's small products use both
// cores too instead of leaving one idle between the large sgemm calls.
//
// parallel_for(n, grain, f) calls f(begin, end) on disjoint contiguous ranges covering [0, n),
// at most kernel_threads() of them, none shorter than `grain` (except when n < grain), and
// returns when all are done. The calling thread runs the first range; the others run on a
// process-wide pool of kernel_threads() - 1 workers that block (not spin) between calls, so they
// take no CPU from OpenBLAS's threads. With one thread, or when called from inside a range, f
// runs inline on [0, n). The split depends only on n, grain and the thread count.
//
// Kernels use it only where the result does not depend on the split: element-wise ops (whose
// results the ISA tests show are independent of an element's position), rows that are
// independent, or column ranges each summed over all rows in row order.
#pragma once

#include <cstdint>
#include <functional>

#include "core/non_copyable.h"

namespace ntp::kernels::cpu {

// The number of threads parallel_for uses: the count last given to set_blas_threads (gemm.h), or
// OpenBLAS's thread count at the first call (OPENBLAS_NUM_THREADS, as `ntp launch` sets it).
// It is ntp's count, not OpenBLAS's current one, so it stays the same inside SingleThreadedBlas.
int kernel_threads();
// Sets kernel_threads() (>= 1); set_blas_threads calls it with OpenBLAS's new count.
void set_kernel_threads(int threads);

void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& f);

// True on a thread that is running a parallel_for range (where nested calls run inline).
bool inside_parallel_range();

// Sets OpenBLAS to one thread for the object's lifetime (restoring the previous count after):
// for sgemm calls made from several parallel_for ranges at once. parallel_for still splits over
// kernel_threads() inside it.
class SingleThreadedBlas : NonCopyable {
 public:
  SingleThreadedBlas();
  ~SingleThreadedBlas();

 private:
  int saved_;
};

}  // namespace ntp::kernels::cpu
