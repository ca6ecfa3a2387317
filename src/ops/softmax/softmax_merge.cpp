// softmax_attention_merge: combines two partial softmax results over disjoint key sets (the
// online-softmax merge). One scalar pass per row: it runs once per block of keys, beside an O(N·D)
// attention block, so it is not worth a SIMD kernel.
#include <algorithm>
#include <cmath>
#include <limits>

#include "core/validate.hpp"
#include "linattn/softmax_attention.hpp"

namespace linattn {

// out, out_other: [B, N, H, E]; lse, lse_other: [B, H, N].
void softmax_attention_merge(TensorView out, std::span<float> lse, ConstTensorView out_other,
                             std::span<const float> lse_other) {
  const char* op = "softmax_attention_merge";
  detail::check_view(op, "out", out);
  detail::check_like(op, "out_other", out_other, out, "out");
  const int64_t B = out.batch(), N = out.seq(), H = out.heads(), E = out.dim();
  const int64_t rows = detail::checked_mul(op, "lse's size (B·H·N)", detail::checked_mul(op, "B·H", B, H), N);
  detail::check_size(op, "lse", int64_t(lse.size()), rows, "[B, H, N]");
  detail::check_size(op, "lse_other", int64_t(lse_other.size()), rows, "[B, H, N]");
  using detail::region;
  detail::check_outputs(op, {region("out", out), region("lse", lse)},
                        {region("out_other", out_other), region("lse_other", lse_other)});

  constexpr float kInf = std::numeric_limits<float>::infinity();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t n = 0; n < N; ++n) {
        const int64_t r = (b * H + h) * N + n;
        const float l1 = lse[r], l2 = lse_other[r], m = std::max(l1, l2);
        float* o = out.row(b, n, h);
        const float* o2 = out_other.row(b, n, h);
        if (m == -kInf) {  // neither side saw a key: the operator's convention for such a row
          for (int64_t e = 0; e < E; ++e) o[e * out.stride[3]] = 0.0f;
          lse[r] = -kInf;
          continue;
        }
        // exp(−∞ − m) = 0: a side that saw nothing drops out, and its (zero) row is never divided.
        const float w1 = std::exp(l1 - m), w2 = std::exp(l2 - m), sum = w1 + w2;
        const float a = w1 / sum, c = w2 / sum;
        for (int64_t e = 0; e < E; ++e) {
          float& y = o[e * out.stride[3]];
          y = a * y + c * o2[e * out_other.stride[3]];
        }
        lse[r] = m + std::log(sum);
      }
}

}  // namespace linattn
