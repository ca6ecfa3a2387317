#pragma once
// Packed sequences of softmax and linear attention (options.cu_seqlens): N sequences laid one after
// another along the time axis of batch row 0, sequence n on tokens [cu_seqlens[n], cu_seqlens[n + 1]).
// Queries and keys share the packing, so a query sees the keys of its own sequence only. The drivers
// run each sequence over its own token slice (views.hpp seq_slice); the fp64 oracles mask by
// sequence_of instead, so that the two share no more than these checks.
#include <algorithm>
#include <cstdint>
#include <span>

#include "core/validate.hpp"

namespace linattn::detail {

// options.cu_seqlens of a call over q [B, Nq, ...] and k [B, Nk, ...]: B = 1, Nq = Nk = T, no
// key_lengths beside it, and [N + 1] offsets rising (or staying, for an empty sequence) from 0 to T.
inline void check_cu_seqlens(const char* op, std::span<const int64_t> cu_seqlens, std::span<const int64_t> key_lengths,
                             int64_t B, int64_t Nq, int64_t Nk) {
  if (!key_lengths.empty())
    fail(op,
         "options.key_lengths and options.cu_seqlens are both given, expected one of them (cu_seqlens already "
         "bounds each packed sequence's keys)");
  if (B != 1) fail_with(op, "q's batch is ", B, " with options.cu_seqlens, expected 1 (pack the sequences along T)");
  if (Nk != Nq)
    fail_with(op, "k's sequence is ", Nk, " with options.cu_seqlens, expected q's ", Nq,
              " (queries and keys share the packing)");
  if (cu_seqlens.size() < 2)
    fail_with(op, "options.cu_seqlens has ", cu_seqlens.size(), " values, expected N + 1 ≥ 2 (0, then each end)");
  if (cu_seqlens.front() != 0) fail_with(op, "options.cu_seqlens[0] is ", cu_seqlens.front(), ", expected 0");
  for (size_t n = 1; n < cu_seqlens.size(); ++n)
    if (cu_seqlens[n] < cu_seqlens[n - 1])
      fail_with(op, "options.cu_seqlens[", n, "] is ", cu_seqlens[n], ", below options.cu_seqlens[", n - 1,
                "] = ", cu_seqlens[n - 1], ", expected non-decreasing offsets");
  if (cu_seqlens.back() != Nq)
    fail_with(op, "options.cu_seqlens[", cu_seqlens.size() - 1, "] is ", cu_seqlens.back(), ", expected T = ", Nq,
              " (q's sequence length)");
}

// For the entry points that take no packed sequences: options.cu_seqlens is empty.
inline void refuse_cu_seqlens(const char* op, std::span<const int64_t> cu_seqlens, const char* instead) {
  if (!cu_seqlens.empty()) fail_with(op, "options.cu_seqlens is given, expected none here (", instead, ")");
}

// The options of one packed sequence run alone: options without cu_seqlens.
template <class Options>
Options without_packing(const Options& options) {
  Options one = options;
  one.cu_seqlens = {};
  return one;
}

// run(begin, count) for each non-empty sequence of a checked cu_seqlens, in order.
template <class Run>
void for_each_sequence(std::span<const int64_t> cu_seqlens, Run&& run) {
  for (size_t n = 1; n < cu_seqlens.size(); ++n)
    if (cu_seqlens[n] > cu_seqlens[n - 1]) run(cu_seqlens[n - 1], cu_seqlens[n] - cu_seqlens[n - 1]);
}

// The sequence that token t lies in (t < T): the n with cu_seqlens[n] ≤ t < cu_seqlens[n + 1].
inline int64_t sequence_of(std::span<const int64_t> cu_seqlens, int64_t t) {
  return int64_t(std::upper_bound(cu_seqlens.begin(), cu_seqlens.end(), t) - cu_seqlens.begin()) - 1;
}

}  // namespace linattn::detail
