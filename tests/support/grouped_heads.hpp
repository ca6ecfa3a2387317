#pragma once
// Grouped value heads (q, k [B, T, H, K] against v [B, T, HV, V], value head j reading q/k head j / (HV / H)),
// every family's checks alike: q and k repeated to HV heads (the copy that the grouping replaces), the
// gradient of a repeated tensor summed back over each group, and the grouped call's results against the
// repeated call's, bit for bit.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "linattn/view.hpp"
#include "support/tensors.hpp"

namespace linattn::testing {

// x [B, T, H, D] with each head repeated HV / H times along the heads: head j is x's head j / (HV / H).
inline Tensor32 repeat_heads(ConstTensorView x, int64_t HV, Layout layout) {
  Tensor32 y = make_tensor({x.batch(), x.seq(), HV, x.dim()}, layout);
  const int64_t group = HV / x.heads();
  for (int64_t b = 0; b < x.batch(); ++b)
    for (int64_t t = 0; t < x.seq(); ++t)
      for (int64_t h = 0; h < HV; ++h)
        for (int64_t d = 0; d < x.dim(); ++d) y.view(b, t, h, d) = x(b, t, h / group, d);
  return y;
}

// The gradient of a repeated tensor summed back over each group, in the group's order (fp32).
inline std::vector<float> sum_groups(ConstTensorView dy, int64_t H) {
  const int64_t group = dy.heads() / H;
  std::vector<float> dx(size_t(dy.batch() * dy.seq() * H * dy.dim()), 0.0f);
  for (int64_t b = 0; b < dy.batch(); ++b)
    for (int64_t t = 0; t < dy.seq(); ++t)
      for (int64_t h = 0; h < dy.heads(); ++h)
        for (int64_t d = 0; d < dy.dim(); ++d)
          dx[size_t(((b * dy.seq() + t) * H + h / group) * dy.dim() + d)] += dy(b, t, h, d);
  return dx;
}

// A view's elements in [B, T, H, D] order (a state span's as they are).
inline std::vector<float> dense(ConstTensorView x) {
  std::vector<float> out;
  for (int64_t b = 0; b < x.batch(); ++b)
    for (int64_t t = 0; t < x.seq(); ++t)
      for (int64_t h = 0; h < x.heads(); ++h)
        for (int64_t d = 0; d < x.dim(); ++d) out.push_back(x(b, t, h, d));
  return out;
}
inline std::vector<float> dense(const Tensor32& x) { return dense(x.view); }
inline const std::vector<float>& dense(const std::vector<float>& x) { return x; }

// The grouped call's results (a family's Fast: out, final_state, dq, dk, ...) against the call with q and k
// repeated to HV heads: each of `same` (members: Tensor32 or std::vector<float>) bit for bit, and dq and dk
// the repeated call's summed over each group of H = `qk_heads` in order.
template <class Fast, class... Same>
void expect_grouped_equals_repeated(const Fast& grouped, const Fast& repeated, int64_t qk_heads, Same... same) {
  auto expect_same = [&](auto field) { EXPECT_EQ(dense(grouped.*field), dense(repeated.*field)); };
  (expect_same(same), ...);
  EXPECT_EQ(dense(grouped.dq.view), sum_groups(repeated.dq.view, qk_heads));
  EXPECT_EQ(dense(grouped.dk.view), sum_groups(repeated.dk.view, qk_heads));
}

}  // namespace linattn::testing
