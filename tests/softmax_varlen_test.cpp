// Softmax attention over packed sequences (options.cu_seqlens): each sequence of a packed call gets
// exactly what it gets alone, checked against the fp64 oracle run per sequence (out, lse, dq, dk, dv),
// over lengths 1, 0 (empty), 63, 65 and 97, causal and not, in every layout; the oracle's own packed
// mask agrees; and every malformed cu_seqlens is refused by name.
#include <gtest/gtest.h>

#include <limits>
#include <random>
#include <string>
#include <vector>

#include "linattn/half_attention.hpp"
#include "linattn/reference.hpp"
#include "linattn/softmax_attention.hpp"
#include "support/packed.hpp"
#include "support/temp_dir.hpp"  // error_of
#include "support/tensors.hpp"

namespace linattn {
namespace {

using testing::Layout;
using testing::Tensor32;
using testing::token_slice;

constexpr int64_t H = 3, D = 5, E = 7;
constexpr double kBound = 1e-5;  // fp32 against fp64, as in softmax_attention_test

// One packed call: inputs in `layout` (k and v in the next one), outputs, and its options.
struct Packed {
  std::vector<int64_t> cu;
  int64_t T;
  Tensor32 q, k, v, dout, out, dq, dk, dv;
  std::vector<float> lse;
  SoftmaxAttentionOptions options;

  Packed(const std::vector<int64_t>& lengths, Layout layout, bool causal, uint64_t seed = 11)
      : cu(testing::offsets_of(lengths)), T(cu.back()) {
    std::mt19937_64 rng(seed);
    const Layout other = testing::kAllLayouts[(int(layout) + 1) % 3];
    q = testing::random_tensor({1, T, H, D}, layout, rng, -2, 2);
    k = testing::random_tensor({1, T, H, D}, other, rng, -2, 2);
    v = testing::random_tensor({1, T, H, E}, other, rng);
    dout = testing::random_tensor({1, T, H, E}, layout, rng);
    out = testing::make_tensor({1, T, H, E}, layout);
    dq = testing::make_tensor(q.extent(), layout);
    dk = testing::make_tensor(k.extent(), other);
    dv = testing::make_tensor(v.extent(), other);
    lse.assign(size_t(H * T), std::numeric_limits<float>::quiet_NaN());
    options.causal = causal;
    options.cu_seqlens = cu;
  }
  void run() {
    softmax_attention_forward(out.view, lse, q.view, k.view, v.view, options);
    softmax_attention_backward(dq.view, dk.view, dv.view, dout.view, q.view, k.view, v.view, out.view, lse, options);
  }
};

struct VarlenCase {
  Layout layout;
  bool causal;
};

class SoftmaxVarlen : public ::testing::TestWithParam<VarlenCase> {};

// Every sequence of the packed call against the oracle on that sequence alone, and the oracle's
// packed mask against the same.
TEST_P(SoftmaxVarlen, EachSequenceMatchesTheOracleAlone) {
  Packed p(testing::kPackedLengths, GetParam().layout, GetParam().causal);
  p.run();
  const auto q = reference::to_double(p.q.view), k = reference::to_double(p.k.view), v = reference::to_double(p.v.view),
             dout = reference::to_double(p.dout.view);
  SoftmaxAttentionOptions alone;
  alone.causal = GetParam().causal;
  // The oracle on sequence [t, t + n) alone.
  auto out_alone = [&](int64_t t, int64_t n) {
    return reference::softmax_attention_forward(token_slice(q, t, n), token_slice(k, t, n), token_slice(v, t, n),
                                                alone);
  };
  auto grads_alone = [&](int64_t t, int64_t n) {
    return reference::softmax_attention_backward(token_slice(dout, t, n), token_slice(q, t, n), token_slice(k, t, n),
                                                 token_slice(v, t, n), alone);
  };
  EXPECT_LE(testing::relative_error(p.out.view, testing::stitched(p.out.extent(), p.cu, out_alone)), kBound);
  EXPECT_LE(
      testing::relative_error(p.dq.view, testing::stitched(p.dq.extent(), p.cu,
                                                           [&](int64_t t, int64_t n) { return grads_alone(t, n).dq; })),
      kBound);
  EXPECT_LE(
      testing::relative_error(p.dk.view, testing::stitched(p.dk.extent(), p.cu,
                                                           [&](int64_t t, int64_t n) { return grads_alone(t, n).dk; })),
      kBound);
  EXPECT_LE(
      testing::relative_error(p.dv.view, testing::stitched(p.dv.extent(), p.cu,
                                                           [&](int64_t t, int64_t n) { return grads_alone(t, n).dv; })),
      kBound);
  // lse [1, H, T]: each sequence's rows [H, n] against its oracle's lse [1, H, n].
  for (size_t s = 1; s < p.cu.size(); ++s) {
    const int64_t t = p.cu[s - 1], n = p.cu[s] - t;
    if (n == 0) continue;
    std::vector<double> want;
    reference::softmax_attention_forward(token_slice(q, t, n), token_slice(k, t, n), token_slice(v, t, n), alone,
                                         &want);
    std::vector<float> got;
    for (int64_t h = 0; h < H; ++h) got.insert(got.end(), p.lse.begin() + h * p.T + t, p.lse.begin() + h * p.T + t + n);
    EXPECT_LE(testing::relative_error(got, want), kBound) << "sequence " << s - 1;
  }
  // The oracle's packed mask gives the oracle of each sequence alone.
  std::vector<double> packed_lse;
  const auto packed = reference::softmax_attention_forward(q, k, v, p.options, &packed_lse);
  const auto packed_grads = reference::softmax_attention_backward(dout, q, k, v, p.options);
  for (size_t s = 1; s < p.cu.size(); ++s) {
    const int64_t t = p.cu[s - 1], n = p.cu[s] - t;
    if (n == 0) continue;
    EXPECT_LE(testing::relative_error(token_slice(packed, t, n), out_alone(t, n)), 1e-12);
    EXPECT_LE(testing::relative_error(token_slice(packed_grads.dk, t, n), grads_alone(t, n).dk), 1e-12);
  }
  EXPECT_LE(testing::relative_error(p.out.view, packed), kBound);
  EXPECT_LE(testing::relative_error(p.lse, packed_lse), kBound);
}

// The fast packed call gives bitwise what the fast call gives each sequence alone.
TEST_P(SoftmaxVarlen, PackedIsBitwiseEachSequenceAlone) {
  Packed p(testing::kPackedLengths, GetParam().layout, GetParam().causal, 5);
  p.run();
  SoftmaxAttentionOptions alone;
  alone.causal = GetParam().causal;
  for (size_t s = 1; s < p.cu.size(); ++s) {
    const int64_t t = p.cu[s - 1], n = p.cu[s] - t;
    if (n == 0) continue;
    Tensor32 out = testing::make_tensor({1, n, H, E}, Layout::bnhd),
             dq = testing::make_tensor({1, n, H, D}, Layout::bnhd);
    Tensor32 dk = testing::make_tensor({1, n, H, D}, Layout::bnhd),
             dv = testing::make_tensor({1, n, H, E}, Layout::bnhd);
    std::vector<float> lse(size_t(H * n));
    softmax_attention_forward(out.view, lse, token_slice(p.q.view, t, n), token_slice(p.k.view, t, n),
                              token_slice(p.v.view, t, n), alone);
    softmax_attention_backward(dq.view, dk.view, dv.view, token_slice(p.dout.view, t, n), token_slice(p.q.view, t, n),
                               token_slice(p.k.view, t, n), token_slice(p.v.view, t, n), out.view, lse, alone);
    EXPECT_TRUE(testing::same_values(token_slice(p.out.view, t, n), out.view)) << "sequence " << s - 1;
    EXPECT_TRUE(testing::same_values(token_slice(p.dq.view, t, n), dq.view)) << "sequence " << s - 1;
    EXPECT_TRUE(testing::same_values(token_slice(p.dk.view, t, n), dk.view)) << "sequence " << s - 1;
    EXPECT_TRUE(testing::same_values(token_slice(p.dv.view, t, n), dv.view)) << "sequence " << s - 1;
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < n; ++i) EXPECT_EQ(p.lse[size_t(h * p.T + t + i)], lse[size_t(h * n + i)]);
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, SoftmaxVarlen,
                         ::testing::Values(VarlenCase{Layout::bnhd, false}, VarlenCase{Layout::bhnd, true},
                                           VarlenCase{Layout::padded, false}, VarlenCase{Layout::padded, true}),
                         [](const ::testing::TestParamInfo<VarlenCase>& param_info) {
                           return std::string(testing::layout_name(param_info.param.layout)) +
                                  (param_info.param.causal ? "_causal" : "");
                         });

// One sequence spanning T is the unpacked call, bitwise; empty sequences at both ends change nothing.
TEST(SoftmaxVarlenEdges, OneSequenceIsTheUnpackedCall) {
  for (const std::vector<int64_t>& lengths : {std::vector<int64_t>{65}, std::vector<int64_t>{0, 65, 0}}) {
    Packed packed(lengths, Layout::bnhd, true), plain(lengths, Layout::bnhd, true);
    plain.options.cu_seqlens = {};
    packed.run();
    plain.run();
    EXPECT_TRUE(testing::same_values(packed.out.view, plain.out.view));
    EXPECT_TRUE(testing::same_values(packed.dq.view, plain.dq.view));
    EXPECT_TRUE(testing::same_values(packed.dk.view, plain.dk.view));
    EXPECT_EQ(packed.lse, plain.lse);
  }
}

// bf16 storage takes packed sequences too (through the fp32 driver): the same as fp32 on the rounded
// inputs, for a short sequence (which alone would take the native decode path) beside a long one.
TEST(SoftmaxVarlenEdges, HalfPrecisionPacks) {
  constexpr int64_t T = 70;
  const std::vector<int64_t> cu = {0, 3, T};
  std::mt19937_64 rng(3);
  const testing::RoundedInputs q = testing::rounded_inputs(T * H * D, rng), k = testing::rounded_inputs(T * H * D, rng),
                               v = testing::rounded_inputs(T * H * E, rng);
  std::vector<bf16> out(size_t(T * H * E));
  std::vector<float> out32(out.size());
  std::vector<float> lse(size_t(H * T)), lse32(lse.size());
  SoftmaxAttentionOptions options;
  options.causal = true;
  options.cu_seqlens = cu;
  softmax_attention_forward<bf16>(bnhd(out.data(), 1, T, H, E), lse, bnhd<const bf16>(q.half.data(), 1, T, H, D),
                                  bnhd<const bf16>(k.half.data(), 1, T, H, D),
                                  bnhd<const bf16>(v.half.data(), 1, T, H, E), options);
  softmax_attention_forward(bnhd(out32.data(), 1, T, H, E), lse32, bnhd(q.wide.data(), 1, T, H, D),
                            bnhd(k.wide.data(), 1, T, H, D), bnhd(v.wide.data(), 1, T, H, E), options);
  for (size_t i = 0; i < out.size(); ++i) EXPECT_EQ(out[i].bits, to_bf16(out32[i]).bits) << i;
  EXPECT_EQ(lse, lse32);
}

using testing::error_of;

// One call of each entry point on a packed shape, returning its error.
struct Call : testing::PackedShape {
  explicit Call(const testing::PackedShape& shape = {}) : PackedShape(shape) {}
  std::string forward() {
    std::vector<float> q(size_t(B * Nq * H * D), 0.5f), k(size_t(B * Nk * H * D), 0.5f), v(size_t(B * Nk * H * E)),
        out(size_t(B * Nq * H * E)), lse(size_t(B * H * Nq));
    SoftmaxAttentionOptions o;
    o.cu_seqlens = cu;
    o.key_lengths = key_lengths;
    return error_of([&] {
      softmax_attention_forward(bnhd(out.data(), B, Nq, H, E), lse, bnhd(q.data(), B, Nq, H, D),
                                bnhd(k.data(), B, Nk, H, D), bnhd(v.data(), B, Nk, H, E), o);
    });
  }
  std::string backward() {
    std::vector<float> q(size_t(B * Nq * H * D), 0.5f), k(size_t(B * Nk * H * D), 0.5f), v(size_t(B * Nk * H * E)),
        out(size_t(B * Nq * H * E)), lse(size_t(B * H * Nq)), dq(q.size()), dk(k.size()), dv(v.size());
    SoftmaxAttentionOptions o;
    o.cu_seqlens = cu;
    o.key_lengths = key_lengths;
    const auto Q = bnhd(q.data(), B, Nq, H, D), K = bnhd(k.data(), B, Nk, H, D), V = bnhd(v.data(), B, Nk, H, E),
               O = bnhd(out.data(), B, Nq, H, E);
    return error_of([&] {
      softmax_attention_backward(bnhd(dq.data(), B, Nq, H, D), bnhd(dk.data(), B, Nk, H, D),
                                 bnhd(dv.data(), B, Nk, H, E), O, Q, K, V, O, lse, o);
    });
  }
  std::string oracle() {
    SoftmaxAttentionOptions o;
    o.cu_seqlens = cu;
    o.key_lengths = key_lengths;
    reference::Tensor q({B, Nq, H, D}), k({B, Nk, H, D}), v({B, Nk, H, E});
    return error_of([&] { reference::softmax_attention_forward(q, k, v, o); });
  }
};

// Each refusal names the operator and the argument, in the forward, the backward and the oracle.
TEST(SoftmaxVarlenErrors, EveryMalformedCallIsRefusedByName) {
  EXPECT_EQ(Call().forward(), "<no error>");
  EXPECT_EQ(Call().backward(), "<no error>");
  for (const testing::PackedRefusal& r : testing::packed_refusals()) {
    Call c(r.shape);
    const std::string forward = c.forward(), backward = c.backward(), oracle = c.oracle();
    EXPECT_NE(forward.find("softmax_attention_forward"), std::string::npos) << forward;
    EXPECT_NE(forward.find(r.text), std::string::npos) << forward;
    EXPECT_NE(backward.find("softmax_attention_backward"), std::string::npos) << backward;
    EXPECT_NE(backward.find(r.text), std::string::npos) << backward;
    EXPECT_NE(oracle.find(r.text), std::string::npos) << oracle;
  }
}

}  // namespace
}  // namespace linattn
