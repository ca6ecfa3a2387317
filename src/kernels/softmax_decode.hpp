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
//
// Decoding streams the whole cache once, and the hardware prefetcher alone leaves each key row's load
// waiting on memory (measured: the same time per key in fp32 and bf16, half the bandwidth in bf16).
// So while it reads key j the kernel prefetches key j + kKeysAhead, and row j of `ahead` (the value
// rows of the same tile, which the caller reads next). Prefetches never fault: rows past the end of
// the cache are harmless.
inline constexpr int64_t kKeysAhead = 32;
struct DecodeAhead {
  const void* rows = nullptr;  // row j at rows + j·stride bytes (null: none)
  int64_t stride = 0, bytes = 0;
};
void softmax_decode_scores(float* s, int64_t lds, const float* q, int64_t ldq, int64_t rows, const float* k,
                           int64_t k_stride, int64_t count, int64_t depth, const DecodeAhead& ahead = {});
// The same with the keys stored in bf16 or f16, widened to fp32 as they are loaded (half the bytes).
void softmax_decode_scores(float* s, int64_t lds, const float* q, int64_t ldq, int64_t rows, const bf16* k,
                           int64_t k_stride, int64_t count, int64_t depth, const DecodeAhead& ahead = {});
void softmax_decode_scores(float* s, int64_t lds, const float* q, int64_t ldq, int64_t rows, const f16* k,
                           int64_t k_stride, int64_t count, int64_t depth, const DecodeAhead& ahead = {});

// o: [rows, ldo] += p v over each row's visible keys, v read where it lies in bf16 / f16 (widened as
// loaded, no packed copy): o[r, e] += Σ_{j < key_end[r]} p[r·ldp + j] · float(v[j·v_stride + e]) for
// e < cols (v's head dim contiguous), one fp32 chain per element over j ascending, as kernels::gemm
// forms it; columns past cols are not touched.
void softmax_decode_values(float* o, int64_t ldo, const float* p, int64_t ldp, const int32_t* key_end, int64_t rows,
                           const bf16* v, int64_t v_stride, int64_t cols);
void softmax_decode_values(float* o, int64_t ldo, const float* p, int64_t ldp, const int32_t* key_end, int64_t rows,
                           const f16* v, int64_t v_stride, int64_t cols);

}  // namespace linattn::kernels
