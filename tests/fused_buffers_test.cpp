// q, k, v and dq, dk, dv as the interleaved parts of one fused buffer ([B, N, 3, H, D], as a fused QKV
// projection produces them) are accepted and give the same results as separate buffers; outputs that
// really share an element with another argument are still refused.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "linattn/error.hpp"
#include "linattn/linear_attention.hpp"
#include "linattn/softmax_attention.hpp"
#include "support/temp_dir.hpp"

namespace linattn {
namespace {

using testing::error_of;

constexpr int64_t B = 2, N = 37, H = 3, D = 16;

// One [B, N, parts, H, D] buffer and the view of each part: [B, N, H, D] with token stride parts·H·D.
struct Fused {
  int64_t parts;
  std::vector<float> data;
  Fused(int64_t parts_, std::mt19937_64& rng) : parts(parts_), data(size_t(B * N * parts_ * H * D)) {
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (float& x : data) x = u(rng);
  }
  TensorView part(int64_t i) {
    TensorView v = bnhd(data.data() + i * H * D, B, N, H, D);
    v.stride[1] = parts * H * D;
    v.stride[0] = N * parts * H * D;
    return v;
  }
};

// A contiguous [B, N, H, D] copy of a view.
std::vector<float> copy_of(ConstTensorView x) {
  std::vector<float> c(size_t(B * N * H * D));
  const TensorView to = bnhd(c.data(), B, N, H, D);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t n = 0; n < N; ++n)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t d = 0; d < D; ++d) to(b, n, h, d) = x(b, n, h, d);
  return c;
}

TensorView view_of(std::vector<float>& x) { return bnhd(x.data(), B, N, H, D); }

// The fused call and the call on separate copies agree bit for bit (same arithmetic, other addresses).
void expect_same(ConstTensorView fused, std::vector<float>& separate, const char* what) {
  EXPECT_EQ(0, std::memcmp(copy_of(fused).data(), separate.data(), separate.size() * sizeof(float))) << what;
}

TEST(FusedBuffers, LinearForwardAndBackwardOnFusedQkvAndGradients) {
  for (bool causal : {false, true}) {
    std::mt19937_64 rng(3);
    Fused qkv(3, rng), grads(3, rng), out_dout(2, rng);
    LinearAttentionOptions options;
    options.causal = causal;
    std::vector<float> q = copy_of(qkv.part(0)), k = copy_of(qkv.part(1)), v = copy_of(qkv.part(2));
    std::vector<float> dout = copy_of(out_dout.part(1)), out(q.size()), dq(q.size()), dk(q.size()), dv(q.size());
    // The output is the other half of a fused [out | dout] buffer: interleaved with dout, not overlapping.
    ASSERT_EQ(
        error_of([&] { linear_attention_forward(out_dout.part(0), qkv.part(0), qkv.part(1), qkv.part(2), options); }),
        "<no error>");
    ASSERT_EQ(error_of([&] {
                linear_attention_backward(grads.part(0), grads.part(1), grads.part(2), out_dout.part(1), qkv.part(0),
                                          qkv.part(1), qkv.part(2), options);
              }),
              "<no error>");
    linear_attention_forward(view_of(out), view_of(q), view_of(k), view_of(v), options);
    linear_attention_backward(view_of(dq), view_of(dk), view_of(dv), view_of(dout), view_of(q), view_of(k), view_of(v),
                              options);
    expect_same(out_dout.part(0), out, "out");
    expect_same(grads.part(0), dq, "dq");
    expect_same(grads.part(1), dk, "dk");
    expect_same(grads.part(2), dv, "dv");
  }
}

TEST(FusedBuffers, SoftmaxBackwardIntoFusedGradients) {
  std::mt19937_64 rng(5);
  Fused qkv(3, rng), grads(3, rng);
  std::vector<float> q = copy_of(qkv.part(0)), k = copy_of(qkv.part(1)), v = copy_of(qkv.part(2));
  std::vector<float> out(q.size()), dout(q.size(), 0.25f), dq(q.size()), dk(q.size()), dv(q.size());
  std::vector<float> lse(size_t(B * H * N));
  softmax_attention_forward(view_of(out), lse, qkv.part(0), qkv.part(1), qkv.part(2));
  ASSERT_EQ(error_of([&] {
              softmax_attention_backward(grads.part(0), grads.part(1), grads.part(2), view_of(dout), qkv.part(0),
                                         qkv.part(1), qkv.part(2), view_of(out), lse);
            }),
            "<no error>");
  softmax_attention_backward(view_of(dq), view_of(dk), view_of(dv), view_of(dout), view_of(q), view_of(k), view_of(v),
                             view_of(out), lse);
  expect_same(grads.part(0), dq, "dq");
  expect_same(grads.part(1), dk, "dk");
  expect_same(grads.part(2), dv, "dv");
}

TEST(FusedBuffers, SharedElementsAreStillRefused) {
  std::mt19937_64 rng(7);
  Fused qkv(3, rng), grads(3, rng);
  std::vector<float> dout(size_t(B * N * H * D), 0.5f);
  // dk starts half a row after dq: every token's dk row shares 8 floats with the same token's dq row.
  TensorView shifted = grads.part(0);
  shifted.data += D / 2;
  EXPECT_NE(error_of([&] {
              linear_attention_backward(grads.part(0), shifted, grads.part(2), view_of(dout), qkv.part(0), qkv.part(1),
                                        qkv.part(2));
            }).find("dq overlaps dk"),
            std::string::npos);
  // out written over k's part of the fused input.
  EXPECT_NE(error_of([&] {
              linear_attention_forward(qkv.part(1), qkv.part(0), qkv.part(1), qkv.part(2));
            }).find("out overlaps k"),
            std::string::npos);
  // The same part twice.
  EXPECT_NE(error_of([&] {
              linear_attention_backward(grads.part(1), grads.part(1), grads.part(2), view_of(dout), qkv.part(0),
                                        qkv.part(1), qkv.part(2));
            }).find("dq overlaps dk"),
            std::string::npos);
  // A part of a [B, N, H, 2D] buffer whose rows are longer than the period between parts.
  std::vector<float> wide(size_t(B * N * H * 2 * D));
  TensorView a = bnhd(wide.data(), B, N, H, D), c = a;
  a.stride[2] = 2 * D, a.stride[1] = H * 2 * D, a.stride[0] = N * H * 2 * D;
  c = a;
  c.data += D + 1;  // one float into the next head's first half
  EXPECT_NE(error_of([&] { linear_attention_forward(c, a, qkv.part(1), qkv.part(2)); }).find("out overlaps q"),
            std::string::npos);
}

}  // namespace
}  // namespace linattn
