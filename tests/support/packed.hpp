#pragma once
// Packed sequences (options.cu_seqlens) for the varlen tests of softmax and linear attention and the
// recurrences' tests: the awkward lengths every such test packs, one sequence's tokens of a tensor, fp32
// view or oracle tensor, to run or check it alone, and the check that each sequence alone gives the
// packed run's rows.
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/views.hpp"
#include "linattn/half.hpp"
#include "linattn/reference.hpp"
#include "linattn/view.hpp"
#include "support/tensors.hpp"

namespace linattn::testing {

// Lengths 1, 0 (an empty sequence), 63, 65 and 97: the chunk and tile edges of both operators.
inline const std::vector<int64_t> kPackedLengths = {1, 0, 63, 65, 97};

// [N + 1] offsets of `lengths` packed one after another from 0.
inline std::vector<int64_t> offsets_of(const std::vector<int64_t>& lengths) {
  std::vector<int64_t> cu{0};
  for (int64_t n : lengths) cu.push_back(cu.back() + n);
  return cu;
}

// Tokens [begin, begin + count) of an oracle tensor, as a tensor of their own.
inline reference::Tensor token_slice(const reference::Tensor& x, int64_t begin, int64_t count) {
  reference::Tensor s({x.extent[0], count, x.extent[2], x.extent[3]});
  for (int64_t b = 0; b < x.extent[0]; ++b)
    for (int64_t n = 0; n < count; ++n)
      for (int64_t h = 0; h < x.extent[2]; ++h)
        for (int64_t d = 0; d < x.extent[3]; ++d) s(b, n, h, d) = x(b, begin + n, h, d);
  return s;
}

// The same tokens of an fp32 view (its memory, no copy).
template <class T>
View4<T> token_slice(View4<T> x, int64_t begin, int64_t count) {
  return detail::seq_slice(x, begin, count);
}

// The oracle's results for each sequence of cu run alone, want(begin, count), put back in their
// places in a packed tensor of `extent` (zeros on no token: every token lies in one sequence), so that
// a packed result is measured against them at the scale of the whole tensor (a sequence of one token
// has gradients dq, dk near zero: its own scale would measure only their cancellation).
template <class Want>
reference::Tensor stitched(std::array<int64_t, 4> extent, const std::vector<int64_t>& cu, Want&& want) {
  reference::Tensor all(extent);
  for (size_t s = 1; s < cu.size(); ++s) {
    const int64_t t = cu[s - 1], n = cu[s] - t;
    if (n == 0) continue;
    const reference::Tensor one = want(t, n);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t h = 0; h < extent[2]; ++h)
        for (int64_t d = 0; d < extent[3]; ++d) all(0, t + i, h, d) = one(0, i, h, d);
  }
  return all;
}

// The recurrences' packed sequences (decayed_attention_test, delta_rule_test): each sequence of cu run
// alone, run(out [1, n, H, V], slice, initial, final) with slice(x) its tokens of a packed view, from
// its part of the packed initial states [N, H, K, V], gives the packed run's rows of whole_out (to 1e-6)
// and, bit for bit, its part of whole_final: nothing crosses a boundary.
template <class Run>
void expect_each_sequence_alone(const std::vector<int64_t>& cu, std::array<int64_t, 3> HKV,
                                const std::vector<float>& initial, ConstTensorView whole_out,
                                const std::vector<float>& whole_final, Run&& run) {
  const auto [H, K, V] = HKV;
  const size_t S = size_t(H * K * V);
  for (size_t i = 0; i + 1 < cu.size(); ++i) {
    const int64_t t0 = cu[i], n = cu[i + 1] - t0;
    if (n == 0) continue;
    auto slice = [&](ConstTensorView x) { return token_slice(x, t0, n); };
    std::vector<float> init(initial.begin() + i * S, initial.begin() + (i + 1) * S), fin(S);
    Tensor32 out = make_tensor({1, n, H, V}, Layout::bnhd);
    run(out.view, slice, init, fin);
    EXPECT_LT(relative_error(out.view, reference::to_double(slice(whole_out))), 1e-6) << "sequence " << i;
    for (size_t j = 0; j < S; ++j) ASSERT_EQ(fin[j], whole_final[i * S + j]) << "sequence " << i;
  }
}

// n random bf16 values in [−1, 1) and their exact fp32 widenings: a half-precision call against the
// fp32 call on the same (rounded) inputs.
struct RoundedInputs {
  std::vector<bf16> half;
  std::vector<float> wide;
};
inline RoundedInputs rounded_inputs(int64_t n, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> u(-1, 1);
  RoundedInputs r;
  for (int64_t i = 0; i < n; ++i) {
    r.half.push_back(to_bf16(u(rng)));
    r.wide.push_back(to_float(r.half.back()));
  }
  return r;
}

// A valid packed call of T = 6 tokens in three sequences, one of them empty: the shapes and arguments
// that each refusal test of the varlen tests breaks once.
struct PackedShape {
  int64_t B = 1, Nq = 6, Nk = 6;
  std::vector<int64_t> cu = {0, 2, 2, 6}, key_lengths;
};
// A malformed packed call and the words its refusal must hold (after the operator's name).
struct PackedRefusal {
  PackedShape shape;
  const char* text;
};
inline PackedRefusal refusal(void (*breaks)(PackedShape&), const char* text) {
  PackedRefusal r{{}, text};
  breaks(r.shape);
  return r;
}
// Every way a packed call is refused, the same for softmax and linear attention (core/sequences.hpp).
inline std::vector<PackedRefusal> packed_refusals() {
  return {
      refusal([](PackedShape& s) { s.B = 2; }, "q's batch is 2 with options.cu_seqlens, expected 1"),
      refusal([](PackedShape& s) { s.Nk = 8; }, "k's sequence is 8 with options.cu_seqlens, expected q's 6"),
      refusal([](PackedShape& s) { s.key_lengths = {6}; }, "options.key_lengths and options.cu_seqlens are both given"),
      refusal([](PackedShape& s) { s.cu = {0}; }, "options.cu_seqlens has 1 values, expected N + 1 ≥ 2"),
      refusal(
          [](PackedShape& s) {
            s.cu = {1, 6};
          },
          "options.cu_seqlens[0] is 1, expected 0"),
      refusal(
          [](PackedShape& s) {
            s.cu = {0, 4, 3, 6};
          },
          "options.cu_seqlens[2] is 3, below options.cu_seqlens[1] = 4"),
      refusal(
          [](PackedShape& s) {
            s.cu = {0, 2, 5};
          },
          "options.cu_seqlens[2] is 5, expected T = 6"),
      refusal(
          [](PackedShape& s) {
            s.cu = {0, 2, 7};
          },
          "options.cu_seqlens[2] is 7, expected T = 6"),
  };
}

// Whether a and b hold the same values bitwise (same extents, any strides).
inline bool same_values(ConstTensorView a, ConstTensorView b) {
  if (a.extent != b.extent) return false;
  for (int64_t i = 0; i < a.batch(); ++i)
    for (int64_t n = 0; n < a.seq(); ++n)
      for (int64_t h = 0; h < a.heads(); ++h)
        for (int64_t d = 0; d < a.dim(); ++d)
          if (std::memcmp(&a(i, n, h, d), &b(i, n, h, d), sizeof(float)) != 0) return false;
  return true;
}

}  // namespace linattn::testing
