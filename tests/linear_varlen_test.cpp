// Linear attention over packed sequences (options.cu_seqlens), non-causal and causal: each sequence
// of a packed call gets exactly what it gets alone (bitwise, and within fp32 of the fp64 oracle run on
// it alone: out, dq, dk, dv), over lengths 1, 0 (empty), 63, 65 and 97 with chunks that straddle
// the sequence edges; the oracle's packed mask agrees; the entry points with a state per batch row
// refuse packing, and every malformed cu_seqlens is refused by name.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "linattn/half_attention.hpp"
#include "linattn/linear_attention.hpp"
#include "linattn/reference.hpp"
#include "support/packed.hpp"
#include "support/temp_dir.hpp"  // error_of
#include "support/tensors.hpp"

namespace linattn {
namespace {

using testing::Layout;
using testing::Tensor32;
using testing::token_slice;

constexpr int64_t H = 2, D = 7, E = 5;
constexpr double kBound = 1e-5;  // fp32 against fp64, as in linear_attention_test

struct VarlenCase {
  const char* map;
  bool causal;
  Layout layout;
};

class LinearVarlen : public ::testing::TestWithParam<VarlenCase> {};

TEST_P(LinearVarlen, EachSequenceIsItselfAlone) {
  const VarlenCase& c = GetParam();
  const std::vector<int64_t> cu = testing::offsets_of(testing::kPackedLengths);
  const int64_t T = cu.back();
  std::mt19937_64 rng(std::hash<std::string>{}(c.map) + c.causal);
  // relu and identity on positive q, k: a row whose φ(q)·z is near 0 would measure only its ill conditioning
  const float lo = std::string(c.map) == "elu" ? -1.0f : 0.05f;
  Tensor32 q = testing::random_tensor({1, T, H, D}, c.layout, rng, lo, 1.0f),
           k = testing::random_tensor({1, T, H, D}, c.layout, rng, lo, 1.0f);
  Tensor32 v = testing::random_tensor({1, T, H, E}, c.layout, rng),
           dout = testing::random_tensor({1, T, H, E}, c.layout, rng);
  Tensor32 out = testing::make_tensor({1, T, H, E}, c.layout), dq = testing::make_tensor(q.extent(), c.layout);
  Tensor32 dk = testing::make_tensor(k.extent(), c.layout), dv = testing::make_tensor(v.extent(), c.layout);
  LinearAttentionOptions alone;
  alone.feature_map = feature_map_by_name(c.map);
  alone.causal = c.causal;
  alone.chunk_size = 16;  // chunks of 16 straddle every sequence edge but the first
  LinearAttentionOptions packed = alone;
  packed.cu_seqlens = cu;
  linear_attention_forward(out.view, q.view, k.view, v.view, packed);
  linear_attention_backward(dq.view, dk.view, dv.view, dout.view, q.view, k.view, v.view, packed);

  // Against the oracle run on each sequence alone.
  const auto Q = reference::to_double(q.view), K = reference::to_double(k.view), V = reference::to_double(v.view),
             dO = reference::to_double(dout.view);
  auto out_alone = [&](int64_t t, int64_t n) {
    return reference::linear_attention_forward(token_slice(Q, t, n), token_slice(K, t, n), token_slice(V, t, n), alone);
  };
  auto grads_alone = [&](int64_t t, int64_t n) {
    return reference::linear_attention_backward(token_slice(dO, t, n), token_slice(Q, t, n), token_slice(K, t, n),
                                                token_slice(V, t, n), alone);
  };
  EXPECT_LE(testing::relative_error(out.view, testing::stitched(out.extent(), cu, out_alone)), kBound);
  EXPECT_LE(
      testing::relative_error(
          dq.view, testing::stitched(dq.extent(), cu, [&](int64_t t, int64_t n) { return grads_alone(t, n).dq; })),
      kBound);
  EXPECT_LE(
      testing::relative_error(
          dk.view, testing::stitched(dk.extent(), cu, [&](int64_t t, int64_t n) { return grads_alone(t, n).dk; })),
      kBound);
  EXPECT_LE(
      testing::relative_error(
          dv.view, testing::stitched(dv.extent(), cu, [&](int64_t t, int64_t n) { return grads_alone(t, n).dv; })),
      kBound);

  // The oracle's packed mask: within fp32 of the fast packed call over the whole tensor.
  EXPECT_LE(testing::relative_error(out.view, reference::linear_attention_forward(Q, K, V, packed)), kBound);
  const reference::Gradients g = reference::linear_attention_backward(dO, Q, K, V, packed);
  EXPECT_LE(testing::relative_error(dq.view, g.dq), kBound);
  EXPECT_LE(testing::relative_error(dk.view, g.dk), kBound);
  EXPECT_LE(testing::relative_error(dv.view, g.dv), kBound);

  // Bitwise the fast call on each sequence alone.
  for (size_t s = 1; s < cu.size(); ++s) {
    const int64_t t = cu[s - 1], n = cu[s] - t;
    if (n == 0) continue;
    Tensor32 o1 = testing::make_tensor({1, n, H, E}, Layout::bnhd),
             dq1 = testing::make_tensor({1, n, H, D}, Layout::bnhd);
    Tensor32 dk1 = testing::make_tensor({1, n, H, D}, Layout::bnhd),
             dv1 = testing::make_tensor({1, n, H, E}, Layout::bnhd);
    linear_attention_forward(o1.view, token_slice(q.view, t, n), token_slice(k.view, t, n), token_slice(v.view, t, n),
                             alone);
    linear_attention_backward(dq1.view, dk1.view, dv1.view, token_slice(dout.view, t, n), token_slice(q.view, t, n),
                              token_slice(k.view, t, n), token_slice(v.view, t, n), alone);
    EXPECT_TRUE(testing::same_values(token_slice(out.view, t, n), o1.view)) << "sequence " << s - 1;
    EXPECT_TRUE(testing::same_values(token_slice(dq.view, t, n), dq1.view)) << "sequence " << s - 1;
    EXPECT_TRUE(testing::same_values(token_slice(dk.view, t, n), dk1.view)) << "sequence " << s - 1;
    EXPECT_TRUE(testing::same_values(token_slice(dv.view, t, n), dv1.view)) << "sequence " << s - 1;
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, LinearVarlen,
                         ::testing::Values(VarlenCase{"elu", false, Layout::bnhd},
                                           VarlenCase{"elu", true, Layout::bhnd},
                                           VarlenCase{"relu", true, Layout::padded},
                                           VarlenCase{"identity", false, Layout::padded}),
                         [](const ::testing::TestParamInfo<VarlenCase>& param_info) {
                           return std::string(param_info.param.map) + (param_info.param.causal ? "_causal_" : "_") +
                                  testing::layout_name(param_info.param.layout);
                         });

// bf16 storage packs too (the non-causal forward, which alone reads bf16 in place, widens when packed):
// the same as fp32 on the rounded inputs.
TEST(LinearVarlenEdges, HalfPrecisionPacks) {
  constexpr int64_t T = 40;
  const std::vector<int64_t> cu = {0, 17, 17, T};
  std::mt19937_64 rng(9);
  const testing::RoundedInputs q = testing::rounded_inputs(T * H * D, rng), k = testing::rounded_inputs(T * H * D, rng),
                               v = testing::rounded_inputs(T * H * E, rng);
  std::vector<bf16> out(size_t(T * H * E));
  std::vector<float> out32(out.size());
  LinearAttentionOptions options;
  options.cu_seqlens = cu;
  linear_attention_forward<bf16>(bnhd(out.data(), 1, T, H, E), bnhd<const bf16>(q.half.data(), 1, T, H, D),
                                 bnhd<const bf16>(k.half.data(), 1, T, H, D),
                                 bnhd<const bf16>(v.half.data(), 1, T, H, E), options);
  linear_attention_forward(bnhd(out32.data(), 1, T, H, E), bnhd(q.wide.data(), 1, T, H, D),
                           bnhd(k.wide.data(), 1, T, H, D), bnhd(v.wide.data(), 1, T, H, E), options);
  for (size_t i = 0; i < out.size(); ++i) EXPECT_EQ(out[i].bits, to_bf16(out32[i]).bits) << i;
}

using testing::error_of;

// One call of each entry point on a packed shape, returning its error.
struct Call : testing::PackedShape {
  bool causal = false;
  explicit Call(const testing::PackedShape& shape = {}, bool causal_ = false) : PackedShape(shape), causal(causal_) {}
  std::vector<float> q, k, v, out, dq, dk, dv;
  LinearAttentionOptions options() {
    q.assign(size_t(B * Nq * H * D), 0.5f), k.assign(size_t(B * Nk * H * D), 0.5f);
    v.assign(size_t(B * Nk * H * E), 0.5f), out.assign(size_t(B * Nq * H * E), 0);
    dq.assign(q.size(), 0), dk.assign(k.size(), 0), dv.assign(v.size(), 0);
    LinearAttentionOptions o;
    o.causal = causal;
    o.cu_seqlens = cu;
    o.key_lengths = key_lengths;
    return o;
  }
  TensorView Q() { return bnhd(q.data(), B, Nq, H, D); }
  TensorView K() { return bnhd(k.data(), B, Nk, H, D); }
  TensorView V() { return bnhd(v.data(), B, Nk, H, E); }
  TensorView O() { return bnhd(out.data(), B, Nq, H, E); }
  std::string forward() {
    const LinearAttentionOptions o = options();
    return error_of([&] { linear_attention_forward(O(), Q(), K(), V(), o); });
  }
  std::string backward() {
    const LinearAttentionOptions o = options();
    return error_of([&] {
      linear_attention_backward(bnhd(dq.data(), B, Nq, H, D), bnhd(dk.data(), B, Nk, H, D),
                                bnhd(dv.data(), B, Nk, H, E), O(), Q(), K(), V(), o);
    });
  }
  std::string oracle() {
    const LinearAttentionOptions o = options();
    reference::Tensor rq({B, Nq, H, D}), rk({B, Nk, H, D}), rv({B, Nk, H, E});
    return error_of([&] { reference::linear_attention_forward(rq, rk, rv, o); });
  }
};

TEST(LinearVarlenErrors, EveryMalformedCallIsRefusedByName) {
  for (bool causal : {false, true}) {
    EXPECT_EQ(Call({}, causal).forward(), "<no error>");
    EXPECT_EQ(Call({}, causal).backward(), "<no error>");
    for (const testing::PackedRefusal& r : testing::packed_refusals()) {
      Call c(r.shape, causal);
      const std::string forward = c.forward(), backward = c.backward(), oracle = c.oracle();
      EXPECT_NE(forward.find("linear_attention_forward"), std::string::npos) << forward;
      EXPECT_NE(forward.find(r.text), std::string::npos) << forward;
      EXPECT_NE(backward.find("linear_attention_backward"), std::string::npos) << backward;
      EXPECT_NE(backward.find(r.text), std::string::npos) << backward;
      EXPECT_NE(oracle.find(r.text), std::string::npos) << oracle;
    }
  }
  // A causal packed call checks its chunk size before any sequence runs.
  Call c({}, true);
  LinearAttentionOptions o = c.options();
  o.chunk_size = 0;
  EXPECT_NE(error_of([&] { linear_attention_forward(c.O(), c.Q(), c.K(), c.V(), o); }).find("options.chunk_size is 0"),
            std::string::npos);
}

// The entry points that keep one state per batch row refuse packed sequences, by name.
TEST(LinearVarlenErrors, StatefulEntryPointsRefusePacking) {
  Call c({}, true);
  const LinearAttentionOptions o = c.options();
  const std::string causal = error_of([&] { causal_linear_attention_forward(c.O(), c.Q(), c.K(), c.V(), o); });
  EXPECT_NE(causal.find("causal_linear_attention_forward"), std::string::npos) << causal;
  EXPECT_NE(causal.find("options.cu_seqlens is given, expected none"), std::string::npos) << causal;
  const std::string causal_back = error_of([&] {
    causal_linear_attention_backward(bnhd(c.dq.data(), 1, 6, H, D), bnhd(c.dk.data(), 1, 6, H, D),
                                     bnhd(c.dv.data(), 1, 6, H, E), c.O(), c.Q(), c.K(), c.V(), o);
  });
  EXPECT_NE(causal_back.find("options.cu_seqlens is given, expected none"), std::string::npos) << causal_back;
  RecurrentState state(1, H, D, E, elu_feature_map()->name());
  const std::string step = error_of([&] {
    recurrent_step(bnhd(c.out.data(), 1, 1, H, E), bnhd(c.q.data(), 1, 1, H, D), bnhd(c.k.data(), 1, 1, H, D),
                   bnhd(c.v.data(), 1, 1, H, E), state, o);
  });
  EXPECT_NE(step.find("recurrent_step"), std::string::npos) << step;
  EXPECT_NE(step.find("options.cu_seqlens is given, expected none"), std::string::npos) << step;
  reference::Tensor rq({1, 6, H, D}), rk({1, 6, H, D}), rv({1, 6, H, E});
  reference::State initial{1, H, D, E, std::vector<double>(size_t(H * D * E)), std::vector<double>(size_t(H * D))};
  const std::string oracle = error_of([&] { reference::linear_attention_forward(rq, rk, rv, o, &initial); });
  EXPECT_NE(oracle.find("options.cu_seqlens is given, expected none"), std::string::npos) << oracle;
}

}  // namespace
}  // namespace linattn
