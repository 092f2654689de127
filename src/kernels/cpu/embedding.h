// Token and position embeddings, GPT-2 style, with vocabulary-parallel support.
//
// A rank holds some rows of the logical token table wte[V, C]: local row r stores logical
// vocabulary id ids[r]. `local_row` maps a logical id to its local row, or -1 when another rank
// holds it; an empty `local_row` means the table is whole (local row = id).
//   forward:  out[n, :] = table[local_row[tokens[n]], :]  (zeros when not local; the TP caller
//             all-reduces the partial lookups)
//   backward: dtable[local_row[tokens[n]], :] += dout[n, :]
// Positions: x[b, t, :] += wpe[t, :] for t < T; backward dwpe[t, :] += sum_b dx[b, t, :].
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/check.h"

namespace ntp::kernels::cpu {

// Inverse of `ids` over a vocabulary of size `vocab` (-1 where absent). Checks ids are distinct
// and in range.
std::vector<int64_t> make_local_index(std::span<const int64_t> ids, int64_t vocab);

// Where vocabulary id `id` lives locally: `id` itself when `local_index` is empty (the whole
// vocabulary is held), else local_index[id] (make_local_index's; -1: held by another rank).
// Checks `id` is in [0, vocab).
inline int64_t local_vocab_index(int32_t id, int64_t vocab, std::span<const int64_t> local_index) {
  if (local_index.empty()) {
    NTP_CHECK_MSG(id >= 0 && id < vocab, "vocabulary id outside the vocabulary");
    return id;
  }
  NTP_CHECK_MSG(id >= 0 && static_cast<size_t>(id) < local_index.size(),
                "vocabulary id outside the vocabulary");
  return local_index[static_cast<size_t>(id)];
}

void embedding_forward(const int32_t* tokens, int64_t n, const float* table, int64_t rows,
                       int64_t c, std::span<const int64_t> local_row, float* out);
void embedding_backward(const int32_t* tokens, int64_t n, const float* dout, int64_t rows,
                        int64_t c, std::span<const int64_t> local_row, float* dtable);

void position_forward(const float* wpe, int64_t b, int64_t t, int64_t c, float* x);
void position_backward(const float* dx, int64_t b, int64_t t, int64_t c, float* dwpe);

}  // namespace ntp::kernels::cpu
