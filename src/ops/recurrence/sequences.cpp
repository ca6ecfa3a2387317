#include "ops/recurrence/sequences.hpp"

#include <algorithm>

#include "core/validate.hpp"

namespace linattn::detail {

std::vector<Sequence> packed_sequences(const char* op, int64_t B, int64_t T, std::span<const int64_t> cu) {
  std::vector<Sequence> sequences;
  if (cu.empty()) {
    for (int64_t b = 0; b < B; ++b) sequences.push_back({b, 0, T, b});
    return sequences;
  }
  if (B != 1)
    fail_with(op, "q's batch is ", B, " with cu_seqlens, expected 1 (pack the sequences along the time axis)");
  if (cu.size() < 2) fail_with(op, "cu_seqlens has ", cu.size(), " values, expected N + 1 ≥ 2 (0, then each end)");
  if (cu.front() != 0) fail_with(op, "cu_seqlens[0] is ", cu.front(), ", expected 0");
  if (cu.back() != T) fail_with(op, "cu_seqlens[", cu.size() - 1, "] is ", cu.back(), ", expected T = ", T);
  for (size_t i = 1; i < cu.size(); ++i) {
    if (cu[i] < cu[i - 1])
      fail_with(op, "cu_seqlens[", i, "] is ", cu[i], ", less than cu_seqlens[", i - 1, "] = ", cu[i - 1],
                ", expected ascending offsets");
    sequences.push_back({0, cu[i - 1], cu[i], int64_t(i - 1)});
  }
  return sequences;
}

int64_t longest(const std::vector<Sequence>& sequences) {
  int64_t n = 0;
  for (const Sequence& s : sequences) n = std::max(n, s.end - s.begin);
  return n;
}

int64_t chunk_rows(const std::vector<Sequence>& sequences, int64_t chunk_size) {
  return std::min(chunk_size, std::max<int64_t>(longest(sequences), 1));
}

}  // namespace linattn::detail
