#include "kernels/cpu/embedding.h"

#include <cstring>

#include "core/check.h"

namespace ntp::kernels::cpu {
std::vector<int64_t> make_local_index(std::span<const int64_t> ids, int64_t vocab) {
  std::vector<int64_t> index(static_cast<size_t>(vocab), -1);
  for (size_t r = 0; r < ids.size(); ++r) {
    NTP_CHECK_MSG(ids[r] >= 0 && ids[r] < vocab, "vocabulary id out of range");
    NTP_CHECK_MSG(index[static_cast<size_t>(ids[r])] == -1, "vocabulary id listed twice");
    index[static_cast<size_t>(ids[r])] = static_cast<int64_t>(r);
  }
  return index;
}

void embedding_forward(const int32_t* tokens, int64_t n, const float* table, int64_t rows,
                       int64_t c, std::span<const int64_t> local_row, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    const int64_t r = local_vocab_index(tokens[i], rows, local_row);
    float* o = out + i * c;
    if (r < 0) {
      std::memset(o, 0, static_cast<size_t>(c) * sizeof(float));
    } else {
      std::memcpy(o, table + r * c, static_cast<size_t>(c) * sizeof(float));
    }
  }
}

void embedding_backward(const int32_t* tokens, int64_t n, const float* dout, int64_t rows,
                        int64_t c, std::span<const int64_t> local_row, float* dtable) {
  for (int64_t i = 0; i < n; ++i) {
    const int64_t r = local_vocab_index(tokens[i], rows, local_row);
    if (r < 0) continue;
    float* g = dtable + r * c;
    const float* d = dout + i * c;
    for (int64_t j = 0; j < c; ++j) g[j] += d[j];
  }
}

void position_forward(const float* wpe, int64_t b, int64_t t, int64_t c, float* x) {
  for (int64_t bi = 0; bi < b; ++bi) {
    for (int64_t ti = 0; ti < t; ++ti) {
      float* xr = x + (bi * t + ti) * c;
      const float* w = wpe + ti * c;
      for (int64_t j = 0; j < c; ++j) xr[j] += w[j];
    }
  }
}

void position_backward(const float* dx, int64_t b, int64_t t, int64_t c, float* dwpe) {
  for (int64_t bi = 0; bi < b; ++bi) {
    for (int64_t ti = 0; ti < t; ++ti) {
      const float* d = dx + (bi * t + ti) * c;
      float* w = dwpe + ti * c;
      for (int64_t j = 0; j < c; ++j) w[j] += d[j];
    }
  }
}

}  // namespace ntp::kernels::cpu
