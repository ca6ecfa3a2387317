#pragma once
// The sequences a recurrence walks: one per batch row, or those that options.cu_seqlens packs along the
// time axis of batch row 0; and the chunk policy that the chunked forms cut them with. Shared by every
// recurrence family (decayed, delta rule, DPLR), their fast drivers and their fp64 oracles.
#include <cstdint>
#include <span>
#include <vector>

namespace linattn::detail {

// One sequence: batch row b, tokens [begin, end), state index n (of [N, H, K, V]).
struct Sequence {
  int64_t b, begin, end, n;
};

// The sequences of a [B, T, ...] input: one per batch row, or those that cu_seqlens packs into batch
// row 0 ([N + 1] ascending from 0 to T; B must be 1), in state order.
std::vector<Sequence> packed_sequences(const char* op, int64_t B, int64_t T, std::span<const int64_t> cu_seqlens);
// The most tokens of one sequence (0 for none).
int64_t longest(const std::vector<Sequence>& sequences);

// The widest span of cumulative log decay inside one chunk of a gated chunked form (per key or per
// token): a chunk ends early where a column's span would exceed it, so that each factor split around
// the column's midpoint stays within e^{±kMaxLogSpan/2} (docs/decayed-attention.md, docs/delta-rule.md).
inline constexpr double kMaxLogSpan = 60.0;
// The rows of a chunk's scratch: chunk_size, or the longest sequence where that is shorter (at least 1),
// as no chunk holds more tokens than its sequence.
int64_t chunk_rows(const std::vector<Sequence>& sequences, int64_t chunk_size);

}  // namespace linattn::detail
