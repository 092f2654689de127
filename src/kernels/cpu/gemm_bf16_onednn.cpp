#include "kernels/cpu/gemm_bf16_onednn.h"
#include "core/non_copyable.h"

#include <oneapi/dnnl/dnnl.h>

#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "core/check.h"
#include "kernels/cpu/bf16.h"
#include "kernels/cpu/gemm_backend.h"

namespace ntp::kernels::cpu {
namespace {

void check(dnnl_status_t status, const char* what) { NTP_CHECK_MSG(status == dnnl_success, what); }

// The process's CPU engine (primitives and memories of every thread are created on it).
dnnl_engine_t engine() {
  static dnnl_engine_t e = [] {
    dnnl_engine_t made = nullptr;
    check(dnnl_engine_create(&made, dnnl_cpu, 0), "dnnl_engine_create failed");
    return made;
  }();
  return e;
}

// What a primitive is built for: op(A) is m x k, op(B) k x n, both as bf16 buffers of the stored
// shape (lda, ldb) and C float32 with ldc; alpha and beta are baked into its attributes.
using Key =
    std::tuple<bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, float, float>;

// A matmul primitive with its three memories (their data handles are set per call).
struct Matmul : NonCopyable {
  dnnl_primitive_t primitive = nullptr;
  dnnl_memory_t a = nullptr, b = nullptr, c = nullptr;
  std::string impl;
  Matmul() = default;
  ~Matmul() {
    if (primitive != nullptr) dnnl_primitive_destroy(primitive);
    for (dnnl_memory_t mem : {a, b, c}) {
      if (mem != nullptr) dnnl_memory_destroy(mem);
    }
  }
};

// A row-major [rows, cols] buffer with leading dimension ld seen as op(X) of `dims`: transposed,
// element (i, j) of op(X) is stored at j * ld + i.
dnnl_memory_desc_t describe(int64_t op_rows, int64_t op_cols, int64_t ld, bool transposed,
                            dnnl_data_type_t type) {
  dnnl_memory_desc_t md;
  const dnnl_dims_t dims = {op_rows, op_cols};
  dnnl_dims_t strides = {ld, 1};
  if (transposed) strides[0] = 1, strides[1] = ld;
  check(dnnl_memory_desc_init_by_strides(&md, 2, dims, type, strides),
        "dnnl_memory_desc_init_by_strides failed");
  return md;
}

std::unique_ptr<Matmul> build(const Key& key) {
  const auto [ta, tb, m, n, k, lda, ldb, ldc, alpha, beta] = key;
  const dnnl_memory_desc_t a_md = describe(m, k, lda, ta, dnnl_bf16);
  const dnnl_memory_desc_t b_md = describe(k, n, ldb, tb, dnnl_bf16);
  const dnnl_memory_desc_t c_md = describe(m, n, ldc, false, dnnl_f32);
  dnnl_matmul_desc_t desc;
  check(dnnl_matmul_desc_init(&desc, &a_md, &b_md, nullptr, &c_md), "dnnl_matmul_desc_init failed");
  dnnl_primitive_attr_t attr = nullptr;
  check(dnnl_primitive_attr_create(&attr), "dnnl_primitive_attr_create failed");
  if (alpha != 1.0f) {
    check(dnnl_primitive_attr_set_output_scales(attr, 1, 0, &alpha), "output scales failed");
  }
  if (beta != 0.0f) {  // C = alpha AB + beta C
    dnnl_post_ops_t ops = nullptr;
    check(dnnl_post_ops_create(&ops), "dnnl_post_ops_create failed");
    check(dnnl_post_ops_append_sum(ops, beta), "dnnl_post_ops_append_sum failed");
    check(dnnl_primitive_attr_set_post_ops(attr, ops), "dnnl_primitive_attr_set_post_ops failed");
    dnnl_post_ops_destroy(ops);
  }
  dnnl_primitive_desc_t pd = nullptr;
  check(dnnl_primitive_desc_create(&pd, &desc, attr, engine(), nullptr),
        "oneDNN has no bf16 matmul for this shape");
  dnnl_primitive_attr_destroy(attr);
  auto out = std::make_unique<Matmul>();
  const char* impl = nullptr;
  if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) == dnnl_success &&
      impl != nullptr) {
    out->impl = impl;
  }
  check(dnnl_primitive_create(&out->primitive, pd), "dnnl_primitive_create failed");
  dnnl_primitive_desc_destroy(pd);
  check(dnnl_memory_create(&out->a, &a_md, engine(), DNNL_MEMORY_NONE), "memory A failed");
  check(dnnl_memory_create(&out->b, &b_md, engine(), DNNL_MEMORY_NONE), "memory B failed");
  check(dnnl_memory_create(&out->c, &c_md, engine(), DNNL_MEMORY_NONE), "memory C failed");
  return out;
}

// This thread's primitives, stream and bf16 buffers.
struct ThreadState : NonCopyable {
  std::map<Key, std::unique_ptr<Matmul>> matmuls;
  dnnl_stream_t stream = nullptr;
  std::vector<uint16_t> a, b;
  ThreadState() {
    check(dnnl_stream_create(&stream, engine(), dnnl_stream_default_flags),
          "dnnl_stream_create failed");
  }
  ~ThreadState() { dnnl_stream_destroy(stream); }
  Matmul& matmul(const Key& key) {
    std::unique_ptr<Matmul>& slot = matmuls[key];
    if (!slot) slot = build(key);
    return *slot;
  }
};

ThreadState& thread_state() {
  thread_local ThreadState state;
  return state;
}

}  // namespace

void onednn_bf16_gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                      const float* a, int64_t lda, const float* b, int64_t ldb, float beta,
                      float* c, int64_t ldc) {
  onednn_on_this_thread_only();
  ThreadState& st = thread_state();
  // The stored shapes: op(A) = A^T when transposed, so A is k x m then.
  const int64_t a_rows = trans_a ? k : m, a_cols = trans_a ? m : k;
  const int64_t b_rows = trans_b ? n : k, b_cols = trans_b ? k : n;
  st.a.resize(static_cast<size_t>(a_rows * a_cols));
  st.b.resize(static_cast<size_t>(b_rows * b_cols));
  round_block_to_bf16_bits(a, a_rows, a_cols, lda, st.a.data(), a_cols);
  round_block_to_bf16_bits(b, b_rows, b_cols, ldb, st.b.data(), b_cols);
  Matmul& mm = st.matmul({trans_a, trans_b, m, n, k, a_cols, b_cols, ldc, alpha, beta});
  check(dnnl_memory_set_data_handle(mm.a, st.a.data()), "set A failed");
  check(dnnl_memory_set_data_handle(mm.b, st.b.data()), "set B failed");
  check(dnnl_memory_set_data_handle(mm.c, c), "set C failed");
  const dnnl_exec_arg_t args[3] = {
      {DNNL_ARG_SRC, mm.a}, {DNNL_ARG_WEIGHTS, mm.b}, {DNNL_ARG_DST, mm.c}};
  check(dnnl_primitive_execute(mm.primitive, st.stream, 3, args), "bf16 matmul failed");
  check(dnnl_stream_wait(st.stream), "dnnl_stream_wait failed");
}

}  // namespace ntp::kernels::cpu
