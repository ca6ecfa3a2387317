#pragma once
// The chunked families' states between the caller's [N, H, K, V] spans and a chunk's padded [K, Vp]
// scratch (every chunked recurrence family).
#include <algorithm>
#include <cstdint>
#include <span>

namespace linattn::detail {

// S: [K, Vp] = state `index` of `from` ([N·H, K, V]; empty: zero).
inline void load_state_rows(float* S, int64_t K, int64_t V, int64_t Vp, std::span<const float> from, int64_t index) {
  for (int64_t c = 0; c < K; ++c) {
    float* row = S + c * Vp;
    if (from.empty())
      std::fill_n(row, Vp, 0.0f);
    else
      std::copy_n(from.data() + (index * K + c) * V, V, row), std::fill(row + V, row + Vp, 0.0f);
  }
}
// State `index` of `to` (empty: not wanted) = S: [K, Vp].
inline void store_state_rows(std::span<float> to, const float* S, int64_t K, int64_t V, int64_t Vp, int64_t index) {
  if (to.empty()) return;
  for (int64_t c = 0; c < K; ++c) std::copy_n(S + c * Vp, V, to.data() + (index * K + c) * V);
}

}  // namespace linattn::detail
