#pragma once
// Scores of few queries against many keys (decoding against a KV cache), read from the keys where
// they lie: no packing or transposing of k. Single-threaded, one tile of keys.
#include <cstdint>

#include "linattn/half.hpp"

namespace linattn::kernels {

// s: [rows, lds]; q: [rows, ldq] with ldq ≥ depth rounded up to kPad, zero past depth;
// key j's row is k[j·k_stride + 0 : depth] (contiguous), read for j < count only and d < depth only.
// s[r, j] = Σ_{d < depth} q[r, d] · k[j, d] for r < rows, j < count (one vector FMA chain over d, then a
// fixed-order lane sum); s[r, j ≥ count] is not written.
void softmax_decode_scores(float* s, int64_t lds, const float* q, int64_t ldq, int64_t rows, const float* k,
                           int64_t k_stride, int64_t count, int64_t depth);
// The same with the keys stored in bf16 or f16, widened to fp32 as they are loaded (half the bytes).
void softmax_decode_scores(float* s, int64_t lds, const float* q, int64_t ldq, int64_t rows, const bf16* k,
                           int64_t k_stride, int64_t count, int64_t depth);
void softmax_decode_scores(float* s, int64_t lds, const float* q, int64_t ldq, int64_t rows, const f16* k,
                           int64_t k_stride, int64_t count, int64_t depth);

}  // namespace linattn::kernels
