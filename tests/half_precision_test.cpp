// bf16 and f16 tensors (linattn/half.hpp, linattn/half_attention.hpp). The conversions against an
// independent rounding written here; every operator, forward and backward, by flash-attention's
// criterion: on the same rounded inputs, the error of the half-precision call against the fp64 oracle
// is at most 2× the error of a straightforward baseline (the fp32 operator on the rounded inputs,
// its outputs rounded to the storage type by this file's own rounding). Awkward shapes (N of 1, 63,
// 65, 97; odd head dims; bnhd, bhnd and padded layouts). Each check prints its error ratio.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cfenv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "linattn/favor.hpp"
#include "linattn/half_attention.hpp"
#include "linattn/linformer.hpp"
#include "linattn/reference.hpp"
#include "support/temp_dir.hpp"
#include "support/tensors.hpp"

namespace linattn {
namespace {

using testing::Layout;
using testing::Tensor32;

// ---- An independent rounding: nearest representable value by scaling to the value's ulp. ----

// The value of x rounded to H, nearest with ties to even (normal and f16-subnormal ranges; ±∞ on overflow).
template <class H>
double round_to(double x) {
  constexpr bool is_bf16 = std::is_same_v<H, bf16>;
  constexpr int mantissa = is_bf16 ? 7 : 10, min_exp = is_bf16 ? -126 : -14;
  const double max = is_bf16 ? std::ldexp(2.0 - std::ldexp(1.0, -7), 127) : 65504.0;
  if (x == 0 || std::isnan(x)) return x;
  const int e = std::max(int(std::floor(std::log2(std::fabs(x)))), min_exp);
  const double ulp = std::ldexp(1.0, e - mantissa);
  const double r = std::nearbyint(x / ulp) * ulp;  // FE_TONEAREST: ties to even
  if (std::fabs(r) > max) return std::copysign(std::numeric_limits<double>::infinity(), x);
  return r;
}
template <class H>
float round_f(float x) {
  return float(round_to<H>(double(x)));
}

// ---- Tensors: a rounded fp32 tensor and its half twin, in the same layout. ----

template <class H>
struct HalfTensor {
  std::vector<H> storage;
  View4<H> view;
};

template <class H>
HalfTensor<H> half_like(const Tensor32& x) {
  HalfTensor<H> h;
  h.storage.resize(x.storage.size());
  for (size_t i = 0; i < x.storage.size(); ++i) {
    if constexpr (std::is_same_v<H, bf16>)
      h.storage[i] = to_bf16(x.storage[i]);
    else
      h.storage[i] = to_f16(x.storage[i]);
  }
  h.view = {h.storage.data(), x.view.extent, x.view.stride};
  return h;
}

// An input: random in [lo, hi), rounded to H, and the same values as H.
template <class H>
struct Operand {
  Tensor32 f;
  HalfTensor<H> h;
  ConstTensorView f32() const { return f.view; }
  View4<const H> half() const { return h.view; }
};
template <class H>
Operand<H> operand(std::array<int64_t, 4> extent, Layout layout, std::mt19937_64& rng, float lo = -1, float hi = 1) {
  Operand<H> x{testing::random_tensor(extent, layout, rng, lo, hi), {}};
  for (float& v : x.f.storage) v = round_f<H>(v);
  x.h = half_like<H>(x.f);
  return x;
}
// An output of both paths.
template <class H>
struct Result {
  Tensor32 f;
  HalfTensor<H> h;
};
template <class H>
Result<H> result(std::array<int64_t, 4> extent, Layout layout) {
  Result<H> r{testing::make_tensor(extent, layout), {}};
  r.h = half_like<H>(r.f);
  return r;
}

template <class T>
View4<T> token(View4<T> x, int64_t n) {
  View4<T> t = x;
  t.data = x.data + n * x.stride[1];
  t.extent[1] = 1;
  return t;
}

// The criterion on one output: baseline = fp32 result rounded here; half = the half call's result.
template <class H>
void expect_criterion(const std::string& what, const Result<H>& r, const reference::Tensor& want) {
  Tensor32 base = r.f, half = r.f;
  const View4<float> bv{base.storage.data(), r.f.view.extent, r.f.view.stride};
  const View4<float> hv{half.storage.data(), r.f.view.extent, r.f.view.stride};
  const auto& e = r.f.view.extent;
  for (int64_t b = 0; b < e[0]; ++b)
    for (int64_t n = 0; n < e[1]; ++n)
      for (int64_t hh = 0; hh < e[2]; ++hh)
        for (int64_t d = 0; d < e[3]; ++d) {
          bv(b, n, hh, d) = round_f<H>(r.f.view(b, n, hh, d));
          hv(b, n, hh, d) = to_float(r.h.view(b, n, hh, d));
        }
  const double base_error = testing::relative_error(bv, want), half_error = testing::relative_error(hv, want);
  const double ratio = base_error > 0 ? half_error / base_error : (half_error > 0 ? INFINITY : 1.0);
  std::printf("[ ratio    ] %-5s %-44s half %.3e  baseline %.3e  ratio %.3f\n",
              std::is_same_v<H, bf16> ? "bf16" : "f16", what.c_str(), half_error, base_error, ratio);
  EXPECT_TRUE(std::isfinite(half_error)) << what;
  EXPECT_LE(half_error, 2 * base_error) << what << ": half " << half_error << ", baseline " << base_error;
}

// A half call that reads its rows in place against the fp32 call on the same (widened) values: its output
// the fp32 result rounded once, bit for bit.
template <class H>
void expect_rounded_bits(const std::string& what, View4<const float> f, View4<const H> h) {
  const auto& e = f.extent;
  int64_t differ = 0;
  for (int64_t b = 0; b < e[0]; ++b)
    for (int64_t n = 0; n < e[1]; ++n)
      for (int64_t hh = 0; hh < e[2]; ++hh)
        for (int64_t d = 0; d < e[3]; ++d)
          differ +=
              std::bit_cast<uint32_t>(round_f<H>(f(b, n, hh, d))) != std::bit_cast<uint32_t>(to_float(h(b, n, hh, d)));
  EXPECT_EQ(differ, 0) << what << ": outputs that differ from the fp32 call's, rounded";
}
// The same for a decode step, with a state of the same storage: S the same bits too.
template <class H>
void expect_same_bits(const std::string& what, View4<const float> f, View4<const H> h, const RecurrentState& fp32_state,
                      const RecurrentState& half_state) {
  expect_rounded_bits<H>(what, f, h);
  if (fp32_state.dtype() == DType::bf16) {
    const auto x = fp32_state.S_bf16(), y = half_state.S_bf16();
    EXPECT_TRUE(std::equal(x.begin(), x.end(), y.begin(), y.end(), [](bf16 a, bf16 c) { return a.bits == c.bits; }))
        << what << ": S";
  } else {
    const auto x = fp32_state.S(), y = half_state.S();
    EXPECT_EQ(0, std::memcmp(x.data(), y.data(), x.size_bytes())) << what << ": S";
  }
}

reference::Tensor oracle(const Operand<bf16>& x) { return reference::to_double(x.f32()); }
reference::Tensor oracle(const Operand<f16>& x) { return reference::to_double(x.f32()); }

// ---- Conversions. ----

TEST(HalfConversion, EveryBitPatternWidensExactlyAndRoundTrips) {
  for (uint32_t bits = 0; bits < 65536; ++bits) {
    const bf16 b{uint16_t(bits)};
    const f16 h{uint16_t(bits)};
    const float fb = to_float(b), fh = to_float(h);
    // bf16 is the upper half of an fp32.
    EXPECT_EQ(std::bit_cast<uint32_t>(fb), bits << 16);
    // f16 from its fields: (−1)^s · 2^(e−15) · (1 + m/1024), subnormal 2^−14 · m/1024, e = 31 ∞/NaN.
    const int s = int(bits >> 15), e = int(bits >> 10) & 31, m = int(bits & 1023);
    const double want = e == 0 ? std::ldexp(m, -24)
                        : e == 31
                            ? (m ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity())
                            : std::ldexp(1024 + m, e - 25);
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(fh)) << bits;
      EXPECT_TRUE(std::isnan(to_float(to_f16(fh)))) << bits;
      continue;
    }
    EXPECT_EQ(double(fh), s ? -want : want) << bits;
    if (!std::isnan(fb)) {
      EXPECT_EQ(to_bf16(fb).bits, bits) << bits;
    }
    EXPECT_EQ(to_f16(fh).bits, bits) << bits;
  }
}

// Random values, exact ties (halfway between neighbours), the subnormal and overflow edges.
std::vector<float> rounding_inputs() {
  std::mt19937_64 rng(7);
  std::vector<float> x;
  std::uniform_real_distribution<float> u(-4, 4);
  for (int i = 0; i < 20000; ++i) x.push_back(std::ldexp(u(rng), int(rng() % 40) - 28));
  for (int i = 0; i < 2000; ++i) {  // ties and near-ties of both types
    const float a = to_float(bf16{uint16_t(rng())}), c = to_float(f16{uint16_t(rng() & 0x7BFF)});
    if (std::isfinite(a)) x.push_back(std::bit_cast<float>(std::bit_cast<uint32_t>(a) | 0x8000u));
    if (std::isfinite(c)) x.push_back(std::bit_cast<float>(std::bit_cast<uint32_t>(c) | 0x1000u));
    if (std::isfinite(c)) x.push_back(std::bit_cast<float>(std::bit_cast<uint32_t>(c) | 0x1001u));
  }
  for (float v : {0.0f, -0.0f, 65504.0f, 65519.0f, 65520.0f, 1e6f, std::ldexp(1.0f, -25), std::ldexp(1.5f, -25),
                  std::ldexp(1.0f, -24), std::ldexp(3.0f, -25), 3.0e38f, 3.4e38f})
    x.push_back(v), x.push_back(-v);
  return x;
}

TEST(HalfConversion, RoundsToNearestEven) {
  for (float v : rounding_inputs()) {
    EXPECT_EQ(double(to_float(to_f16(v))), round_to<f16>(double(v))) << v;
    if (std::fabs(v) >= std::ldexp(1.0f, -126)) {
      EXPECT_EQ(double(to_float(to_bf16(v))), round_to<bf16>(double(v))) << v;
    }
  }
  EXPECT_TRUE(std::isnan(to_float(to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_TRUE(std::isnan(to_float(to_f16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_EQ(to_float(to_f16(std::numeric_limits<float>::infinity())), std::numeric_limits<float>::infinity());
}

// The SIMD arrays equal the scalar functions, bit for bit, for every length around the vector widths.
TEST(HalfConversion, ArraysMatchScalar) {
  std::vector<float> x = rounding_inputs();
  x.push_back(std::numeric_limits<float>::quiet_NaN());
  x.push_back(-std::numeric_limits<float>::infinity());
  for (size_t n : {size_t(1), size_t(7), size_t(8), size_t(15), size_t(17), size_t(33), x.size()}) {
    std::vector<bf16> b(n);
    std::vector<f16> h(n);
    convert(std::span<bf16>(b), std::span<const float>(x.data(), n));
    convert(std::span<f16>(h), std::span<const float>(x.data(), n));
    std::vector<float> wb(n), wh(n);
    convert(std::span<float>(wb), std::span<const bf16>(b));
    convert(std::span<float>(wh), std::span<const f16>(h));
    for (size_t i = 0; i < n; ++i) {
      const bool nan = std::isnan(x[i]);
      if (!nan) {
        EXPECT_EQ(b[i].bits, to_bf16(x[i]).bits) << i << " " << x[i];
      }
      if (!nan) {
        EXPECT_EQ(h[i].bits, to_f16(x[i]).bits) << i << " " << x[i];
      }
      EXPECT_EQ(std::isnan(wb[i]), nan);
      EXPECT_EQ(std::isnan(wh[i]), nan);
      if (!nan) {
        EXPECT_EQ(std::bit_cast<uint32_t>(wb[i]), std::bit_cast<uint32_t>(to_float(b[i])));
      }
      if (!nan) {
        EXPECT_EQ(std::bit_cast<uint32_t>(wh[i]), std::bit_cast<uint32_t>(to_float(h[i])));
      }
    }
  }
}

TEST(HalfConversion, DtypeNames) {
  for (DType t : {DType::f32, DType::bf16, DType::f16}) EXPECT_EQ(dtype_by_name(dtype_name(t)), t);
  EXPECT_EQ(dtype_by_name("float16"), DType::f16);
  EXPECT_EQ(dtype_bytes(DType::bf16), 2);
  try {
    dtype_by_name("f8");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("dtype 'f8' is unknown, expected f32, bf16 or f16"), std::string::npos);
  }
}

// ---- Operators. ----

template <class H>
class HalfOps : public ::testing::Test {
 protected:
  std::mt19937_64 rng{2026};
  const char* type() const { return std::is_same_v<H, bf16> ? "bf16" : "f16"; }
};
using HalfTypes = ::testing::Types<bf16, f16>;
TYPED_TEST_SUITE(HalfOps, HalfTypes);

struct AttnShape {
  int64_t B, Nq, Nk, H, D, E;
  Layout layout;
  bool causal;
};
std::string name(const char* op, const AttnShape& s) {
  return std::string(op) + " N" + std::to_string(s.Nq) + "x" + std::to_string(s.Nk) + " D" + std::to_string(s.D) +
         " E" + std::to_string(s.E) + " " + testing::layout_name(s.layout) + (s.causal ? " causal" : "");
}

TYPED_TEST(HalfOps, Softmax) {
  using H = TypeParam;
  // Nq ≤ 16 runs the native decode (k, v read as H); 2100 keys span two decode chunks.
  for (const AttnShape s : {AttnShape{2, 63, 63, 2, 17, 17, Layout::bnhd, false},
                            {1, 97, 65, 3, 8, 12, Layout::bhnd, true},
                            {1, 1, 1, 1, 5, 3, Layout::padded, false},
                            {2, 1, 97, 2, 16, 16, Layout::bnhd, false},
                            {1, 5, 2100, 2, 24, 9, Layout::padded, true},
                            {1, 2, 65, 1, 64, 64, Layout::bhnd, false}}) {
    SCOPED_TRACE(name("softmax", s));
    const auto q = operand<H>({s.B, s.Nq, s.H, s.D}, s.layout, this->rng),
               k = operand<H>({s.B, s.Nk, s.H, s.D}, s.layout, this->rng),
               v = operand<H>({s.B, s.Nk, s.H, s.E}, s.layout, this->rng),
               dout = operand<H>({s.B, s.Nq, s.H, s.E}, s.layout, this->rng);
    SoftmaxAttentionOptions o;
    o.causal = s.causal;
    auto out = result<H>({s.B, s.Nq, s.H, s.E}, s.layout);
    std::vector<float> lse32(size_t(s.B * s.H * s.Nq)), lse16(lse32.size());
    softmax_attention_forward(out.f.view, lse32, q.f32(), k.f32(), v.f32(), o);
    softmax_attention_forward(out.h.view, lse16, q.half(), k.half(), v.half(), o);
    expect_criterion<H>(name("softmax forward", s), out,
                        reference::softmax_attention_forward(oracle(q), oracle(k), oracle(v), o));
    auto dq = result<H>({s.B, s.Nq, s.H, s.D}, s.layout), dk = result<H>({s.B, s.Nk, s.H, s.D}, s.layout),
         dv = result<H>({s.B, s.Nk, s.H, s.E}, s.layout);
    softmax_attention_backward(dq.f.view, dk.f.view, dv.f.view, dout.f32(), q.f32(), k.f32(), v.f32(), out.f.view,
                               lse32, o);
    softmax_attention_backward(dq.h.view, dk.h.view, dv.h.view, dout.half(), q.half(), k.half(), v.half(), out.h.view,
                               lse16, o);
    const auto g = reference::softmax_attention_backward(oracle(dout), oracle(q), oracle(k), oracle(v), o);
    expect_criterion<H>(name("softmax dq", s), dq, g.dq);
    expect_criterion<H>(name("softmax dk", s), dk, g.dk);
    expect_criterion<H>(name("softmax dv", s), dv, g.dv);
  }
}

// Linear attention with a map: non-causal and causal (chunked), forward and backward.
template <class H>
void linear_case(std::mt19937_64& rng, const AttnShape& s, const LinearAttentionOptions& o, const char* map) {
  SCOPED_TRACE(name(map, s));
  const auto q = operand<H>({s.B, s.Nq, s.H, s.D}, s.layout, rng), k = operand<H>({s.B, s.Nk, s.H, s.D}, s.layout, rng),
             v = operand<H>({s.B, s.Nk, s.H, s.E}, s.layout, rng),
             dout = operand<H>({s.B, s.Nq, s.H, s.E}, s.layout, rng);
  auto out = result<H>({s.B, s.Nq, s.H, s.E}, s.layout);
  linear_attention_forward(out.f.view, q.f32(), k.f32(), v.f32(), o);
  linear_attention_forward(out.h.view, q.half(), k.half(), v.half(), o);
  const std::string what = std::string(map) + (o.causal ? " causal" : "");
  expect_criterion<H>(name((what + " forward").c_str(), s), out,
                      reference::linear_attention_forward(oracle(q), oracle(k), oracle(v), o));
  auto dq = result<H>({s.B, s.Nq, s.H, s.D}, s.layout), dk = result<H>({s.B, s.Nk, s.H, s.D}, s.layout),
       dv = result<H>({s.B, s.Nk, s.H, s.E}, s.layout);
  linear_attention_backward(dq.f.view, dk.f.view, dv.f.view, dout.f32(), q.f32(), k.f32(), v.f32(), o);
  linear_attention_backward(dq.h.view, dk.h.view, dv.h.view, dout.half(), q.half(), k.half(), v.half(), o);
  const auto g = reference::linear_attention_backward(oracle(dout), oracle(q), oracle(k), oracle(v), o);
  expect_criterion<H>(name((what + " dq").c_str(), s), dq, g.dq);
  expect_criterion<H>(name((what + " dk").c_str(), s), dk, g.dk);
  expect_criterion<H>(name((what + " dv").c_str(), s), dv, g.dv);
}

TYPED_TEST(HalfOps, LinearCausalFavorRandomFourier) {
  using H = TypeParam;
  for (const AttnShape s : {AttnShape{2, 63, 63, 2, 17, 9, Layout::bnhd, false},
                            {1, 65, 97, 3, 8, 8, Layout::padded, false},
                            {1, 97, 97, 2, 33, 16, Layout::bhnd, true},
                            {1, 1, 1, 1, 3, 5, Layout::padded, true}}) {
    LinearAttentionOptions o;
    o.causal = s.causal;
    linear_case<H>(this->rng, s, o, "linear elu");
  }
  const AttnShape s{1, 65, 65, 2, 16, 16, Layout::bnhd, false};
  LinearAttentionOptions favor;
  favor.feature_map = favor_feature_map(16, {.n_features = 32, .seed = 3});
  linear_case<H>(this->rng, s, favor, "favor");
  favor.causal = true;
  linear_case<H>(this->rng, {1, 63, 63, 1, 16, 8, Layout::padded, true}, favor, "favor");
  LinearAttentionOptions fourier;
  fourier.feature_map = random_fourier_feature_map(16, 24, 5);
  fourier.normalize = false;
  linear_case<H>(this->rng, s, fourier, "random_fourier");
}

// The non-causal forward reads half tiles in place (src/ops/linear/linear_half_tiles.cpp): awkward
// shapes (odd D and E, E past 64, tiles that do not divide N, one token), a head dim of stride 2, key
// lengths, no normaliser, the built-in maps and FAVOR+, each against the fp64 oracle under the
// criterion.
template <class T>
View4<T> every_other_element(View4<T> x) {
  x.extent[3] /= 2;
  x.stride[3] *= 2;
  return x;
}

template <class H>
void linear_forward_case(std::mt19937_64& rng, const AttnShape& s, const LinearAttentionOptions& o, const char* map,
                         bool strided_head_dim = false) {
  const int64_t widen = strided_head_dim ? 2 : 1;
  auto q = operand<H>({s.B, s.Nq, s.H, widen * s.D}, s.layout, rng),
       k = operand<H>({s.B, s.Nk, s.H, widen * s.D}, s.layout, rng),
       v = operand<H>({s.B, s.Nk, s.H, widen * s.E}, s.layout, rng);
  auto out = result<H>({s.B, s.Nq, s.H, widen * s.E}, s.layout);
  if (strided_head_dim)
    for (auto* x : {&q.f.view, &k.f.view, &v.f.view, &out.f.view}) *x = every_other_element(*x);
  if (strided_head_dim)
    for (auto* x : {&q.h.view, &k.h.view, &v.h.view, &out.h.view}) *x = every_other_element(*x);
  linear_attention_forward(out.f.view, q.f32(), k.f32(), v.f32(), o);
  linear_attention_forward(out.h.view, q.half(), k.half(), v.half(), o);
  expect_criterion<H>(name((std::string(map) + (strided_head_dim ? " stride-2 forward" : " forward")).c_str(), s), out,
                      reference::linear_attention_forward(oracle(q), oracle(k), oracle(v), o));
}

TYPED_TEST(HalfOps, LinearForwardTiles) {
  using H = TypeParam;
  LinearAttentionOptions elu;
  for (const AttnShape s : {AttnShape{2, 63, 63, 2, 17, 9, Layout::bnhd, false},
                            {1, 97, 65, 3, 8, 80, Layout::bhnd, false},
                            {1, 1, 1, 1, 5, 3, Layout::padded, false},
                            {1, 65, 130, 2, 64, 130, Layout::padded, false},
                            {3, 129, 200, 1, 33, 64, Layout::bhnd, false},
                            {1, 200, 300, 2, 2, 64, Layout::bhnd, false}})
    linear_forward_case<H>(this->rng, s, elu, "tiles elu");
  const AttnShape s{2, 70, 150, 2, 16, 16, Layout::bnhd, false};
  linear_forward_case<H>(this->rng, s, elu, "tiles elu", true);
  LinearAttentionOptions relu;
  relu.feature_map = relu_feature_map();
  const std::vector<int64_t> lengths = {150, 37};
  relu.key_lengths = lengths;
  relu.normalize = false;
  linear_forward_case<H>(this->rng, s, relu, "tiles relu lengths");
  LinearAttentionOptions identity;
  identity.feature_map = identity_feature_map();
  identity.normalize = false;
  linear_forward_case<H>(this->rng, {1, 33, 97, 2, 7, 20, Layout::padded, false}, identity, "tiles identity");
  LinearAttentionOptions favor;
  favor.feature_map = favor_feature_map(16, {.n_features = 37, .seed = 4});
  linear_forward_case<H>(this->rng, {1, 65, 65, 2, 16, 16, Layout::bhnd, false}, favor, "tiles favor");
}

// The recurrent step over a sequence, with an fp32 state and with a bf16 state; the baseline steps
// the fp32 operator on the rounded inputs and (for the bf16 state) rounds S after every step.
TYPED_TEST(HalfOps, RecurrentStep) {
  using H = TypeParam;
  const int64_t B = 2, N = 97, Hh = 2, D = 16, E = 24;
  for (const DType state_type : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dtype_name(state_type));
    const auto q = operand<H>({B, N, Hh, D}, Layout::bhnd, this->rng),
               k = operand<H>({B, N, Hh, D}, Layout::bhnd, this->rng),
               v = operand<H>({B, N, Hh, E}, Layout::bhnd, this->rng);
    auto out = result<H>({B, N, Hh, E}, Layout::bnhd);
    RecurrentState s32(B, Hh, D, E), s16(B, Hh, D, E, "elu", state_type);
    for (int64_t n = 0; n < N; ++n) {
      recurrent_step(token(out.f.view, n), token(q.f32(), n), token(k.f32(), n), token(v.f32(), n), s32);
      if (state_type == DType::bf16)
        for (float& x : s32.S()) x = round_f<bf16>(x);
      recurrent_step(token(out.h.view, n), token(q.half(), n), token(k.half(), n), token(v.half(), n), s16);
    }
    LinearAttentionOptions causal;
    causal.causal = true;
    expect_criterion<H>(std::string("recurrent step, state ") + dtype_name(state_type), out,
                        reference::linear_attention_forward(oracle(q), oracle(k), oracle(v), causal));
    EXPECT_EQ(s16.position(), N);
  }
}

TYPED_TEST(HalfOps, Linformer) {
  using H = TypeParam;
  const int64_t B = 2, Nq = 63, Nk = 97, Hh = 2, D = 17, E = 9, P = 16;
  const auto q = operand<H>({B, Nq, Hh, D}, Layout::padded, this->rng),
             k = operand<H>({B, Nk, Hh, D}, Layout::padded, this->rng),
             v = operand<H>({B, Nk, Hh, E}, Layout::padded, this->rng),
             dout = operand<H>({B, Nq, Hh, E}, Layout::padded, this->rng);
  LinformerOptions o;
  o.projected_length = P;
  o.max_length = Nk;
  std::uniform_real_distribution<float> u(-0.2f, 0.2f);
  std::vector<float> Ef(size_t(Hh * P * Nk)), Ff(Ef.size());
  for (float& x : Ef) x = u(this->rng);
  for (float& x : Ff) x = u(this->rng);
  const std::vector<double> Ed(Ef.begin(), Ef.end()), Fd(Ff.begin(), Ff.end());
  auto out = result<H>({B, Nq, Hh, E}, Layout::padded);
  std::vector<float> lse32(size_t(B * Hh * Nq)), lse16(lse32.size());
  linformer_attention_forward(out.f.view, lse32, q.f32(), k.f32(), v.f32(), Ef, Ff, o);
  linformer_attention_forward(out.h.view, lse16, q.half(), k.half(), v.half(), Ef, Ff, o);
  expect_criterion<H>("linformer forward", out,
                      reference::linformer_attention_forward(oracle(q), oracle(k), oracle(v), Ed, Fd, o));
  auto dq = result<H>({B, Nq, Hh, D}, Layout::bnhd), dk = result<H>({B, Nk, Hh, D}, Layout::bnhd),
       dv = result<H>({B, Nk, Hh, E}, Layout::bnhd);
  std::vector<float> dE(Ef.size()), dF(Ef.size()), dE16(Ef.size()), dF16(Ef.size());
  linformer_attention_backward(dq.f.view, dk.f.view, dv.f.view, dE, dF, dout.f32(), q.f32(), k.f32(), v.f32(), Ef, Ff,
                               out.f.view, lse32, o);
  linformer_attention_backward(dq.h.view, dk.h.view, dv.h.view, dE16, dF16, dout.half(), q.half(), k.half(), v.half(),
                               Ef, Ff, out.h.view, lse16, o);
  const auto g = reference::linformer_attention_backward(oracle(dout), oracle(q), oracle(k), oracle(v), Ed, Fd, o);
  expect_criterion<H>("linformer dq", dq, g.dq);
  expect_criterion<H>("linformer dk", dk, g.dk);
  expect_criterion<H>("linformer dv", dv, g.dv);
}

TYPED_TEST(HalfOps, DecayedFamily) {
  using H = TypeParam;
  const int64_t B = 2, T = 97, Hh = 2, K = 16, V = 12;
  for (const Decay decay : {Decay::retention, Decay::token, Decay::key}) {
    SCOPED_TRACE(decay_name(decay));
    const std::string what = decay_name(decay);
    const auto q = operand<H>({B, T, Hh, K}, Layout::bnhd, this->rng),
               k = operand<H>({B, T, Hh, K}, Layout::bhnd, this->rng),
               v = operand<H>({B, T, Hh, V}, Layout::padded, this->rng),
               dout = operand<H>({B, T, Hh, V}, Layout::bnhd, this->rng);
    const int64_t gate = decay == Decay::token ? 1 : decay == Decay::key ? K : 0;
    const auto g = operand<H>({B, T, Hh, std::max<int64_t>(gate, 1)}, Layout::bnhd, this->rng, -0.7f, -0.01f);
    const ConstTensorView g32 = gate ? g.f32() : ConstTensorView{};
    const View4<const H> g16 = gate ? g.half() : View4<const H>{};
    const reference::Tensor gd = oracle(g);
    const reference::Tensor* gp = gate ? &gd : nullptr;
    DecayedAttentionOptions o;
    o.decay = decay;
    o.chunk_size = 32;
    auto out = result<H>({B, T, Hh, V}, Layout::bnhd);
    decayed_attention_forward(out.f.view, q.f32(), k.f32(), v.f32(), g32, o);
    decayed_attention_forward(out.h.view, q.half(), k.half(), v.half(), g16, o);
    const auto want = reference::decayed_attention_forward(oracle(q), oracle(k), oracle(v), gp, o);
    expect_criterion<H>(what + " forward", out, want.out);
    // The chunked forward and backward read the half rows in place: the fp32 results rounded once.
    expect_rounded_bits<H>(what + " forward", out.f.view, out.h.view);
    auto dq = result<H>({B, T, Hh, K}, Layout::bnhd), dk = result<H>({B, T, Hh, K}, Layout::bnhd),
         dv = result<H>({B, T, Hh, V}, Layout::bnhd),
         dg = result<H>({B, T, Hh, std::max<int64_t>(gate, 1)}, Layout::bnhd);
    const TensorView dg32 = gate ? dg.f.view : TensorView{};
    const View4<H> dg16 = gate ? dg.h.view : View4<H>{};
    decayed_attention_backward(dq.f.view, dk.f.view, dv.f.view, dg32, {}, dout.f32(), {}, q.f32(), k.f32(), v.f32(),
                               g32, o);
    decayed_attention_backward(dq.h.view, dk.h.view, dv.h.view, dg16, {}, dout.half(), {}, q.half(), k.half(), v.half(),
                               g16, o);
    const auto gr =
        reference::decayed_attention_backward(oracle(dout), nullptr, oracle(q), oracle(k), oracle(v), gp, o);
    expect_criterion<H>(what + " dq", dq, gr.dq);
    expect_criterion<H>(what + " dk", dk, gr.dk);
    expect_criterion<H>(what + " dv", dv, gr.dv);
    if (gate) expect_criterion<H>(what + " dg", dg, gr.dg);
    for (auto* x : {&dq, &dk, &dv, &dg})
      if (x != &dg || gate) expect_rounded_bits<H>(what + " gradient", x->f.view, x->h.view);
    // Decoding: the step over the same tokens, against the same oracle, with an fp32 state and with a
    // bf16 one (whose baseline rounds its fp32 S after every step, as RecurrentStep's).
    for (const DType state_type : {DType::f32, DType::bf16}) {
      auto steps = result<H>({B, T, Hh, V}, Layout::bnhd), same = result<H>({B, T, Hh, V}, Layout::bnhd);
      RecurrentState s32(B, Hh, K, V, decay_name(decay)), s16(B, Hh, K, V, decay_name(decay), state_type),
          sf(B, Hh, K, V, decay_name(decay), state_type);
      for (int64_t n = 0; n < T; ++n) {
        decayed_step(token(steps.f.view, n), token(q.f32(), n), token(k.f32(), n), token(v.f32(), n),
                     gate ? token(g32, n) : ConstTensorView{}, s32, o);
        if (state_type == DType::bf16)
          for (float& x : s32.S()) x = round_f<bf16>(x);
        decayed_step(token(steps.h.view, n), token(q.half(), n), token(k.half(), n), token(v.half(), n),
                     gate ? token(g16, n) : View4<const H>{}, s16, o);
        decayed_step(token(same.f.view, n), token(q.f32(), n), token(k.f32(), n), token(v.f32(), n),
                     gate ? token(g32, n) : ConstTensorView{}, sf, o);
      }
      expect_criterion<H>(what + " step, state " + dtype_name(state_type), steps, want.out);
      expect_same_bits<H>(what + " step, state " + dtype_name(state_type), same.f.view, steps.h.view, sf, s16);
      EXPECT_EQ(s16.position(), T);
    }
  }
}

TYPED_TEST(HalfOps, DeltaRule) {
  using H = TypeParam;
  const int64_t B = 1, T = 65, Hh = 2, K = 16, V = 9;
  for (const DeltaGate gate : {DeltaGate::none, DeltaGate::token, DeltaGate::key}) {
    const std::string what = delta_name(gate);
    SCOPED_TRACE(what);
    const auto q = operand<H>({B, T, Hh, K}, Layout::padded, this->rng),
               k = operand<H>({B, T, Hh, K}, Layout::bnhd, this->rng),
               v = operand<H>({B, T, Hh, V}, Layout::bhnd, this->rng),
               dout = operand<H>({B, T, Hh, V}, Layout::bnhd, this->rng);
    const auto beta = operand<H>({B, T, Hh, 1}, Layout::bnhd, this->rng, 0.1f, 0.9f);
    const int64_t gd = gate == DeltaGate::token ? 1 : gate == DeltaGate::key ? K : 0;
    const auto g = operand<H>({B, T, Hh, std::max<int64_t>(gd, 1)}, Layout::bnhd, this->rng, -0.7f, -0.01f);
    const ConstTensorView g32 = gd ? g.f32() : ConstTensorView{};
    const View4<const H> g16 = gd ? g.half() : View4<const H>{};
    const reference::Tensor gt = oracle(g);
    const reference::Tensor* gp = gd ? &gt : nullptr;
    DeltaRuleOptions o;
    o.gate = gate;
    o.qk_l2norm = true;
    o.chunk_size = 32;
    auto out = result<H>({B, T, Hh, V}, Layout::bnhd);
    delta_rule_forward(out.f.view, q.f32(), k.f32(), v.f32(), beta.f32(), g32, o);
    delta_rule_forward(out.h.view, q.half(), k.half(), v.half(), beta.half(), g16, o);
    const auto want = reference::delta_rule_forward(oracle(q), oracle(k), oracle(v), oracle(beta), gp, o);
    expect_criterion<H>(what + " forward", out, want.out);
    expect_rounded_bits<H>(what + " forward", out.f.view, out.h.view);  // as DecayedFamily's
    auto dq = result<H>({B, T, Hh, K}, Layout::bnhd), dk = result<H>({B, T, Hh, K}, Layout::bnhd),
         dv = result<H>({B, T, Hh, V}, Layout::bnhd), db = result<H>({B, T, Hh, 1}, Layout::bnhd),
         dg = result<H>({B, T, Hh, std::max<int64_t>(gd, 1)}, Layout::bnhd);
    const TensorView dg32 = gd ? dg.f.view : TensorView{};
    const View4<H> dg16 = gd ? dg.h.view : View4<H>{};
    delta_rule_backward(dq.f.view, dk.f.view, dv.f.view, db.f.view, dg32, {}, dout.f32(), {}, q.f32(), k.f32(), v.f32(),
                        beta.f32(), g32, o);
    delta_rule_backward(dq.h.view, dk.h.view, dv.h.view, db.h.view, dg16, {}, dout.half(), {}, q.half(), k.half(),
                        v.half(), beta.half(), g16, o);
    const auto gr =
        reference::delta_rule_backward(oracle(dout), nullptr, oracle(q), oracle(k), oracle(v), oracle(beta), gp, o);
    expect_criterion<H>(what + " dq", dq, gr.dq);
    expect_criterion<H>(what + " dk", dk, gr.dk);
    expect_criterion<H>(what + " dv", dv, gr.dv);
    expect_criterion<H>(what + " dbeta", db, gr.dbeta);
    if (gd) expect_criterion<H>(what + " dg", dg, gr.dg);
    for (auto* x : {&dq, &dk, &dv, &db, &dg})
      if (x != &dg || gd) expect_rounded_bits<H>(what + " gradient", x->f.view, x->h.view);
    for (const DType state_type : {DType::f32, DType::bf16}) {  // as DecayedFamily's steps
      auto steps = result<H>({B, T, Hh, V}, Layout::bnhd), same = result<H>({B, T, Hh, V}, Layout::bnhd);
      RecurrentState s32(B, Hh, K, V, delta_name(gate)), s16(B, Hh, K, V, delta_name(gate), state_type),
          sf(B, Hh, K, V, delta_name(gate), state_type);
      for (int64_t n = 0; n < T; ++n) {
        delta_rule_step(token(steps.f.view, n), token(q.f32(), n), token(k.f32(), n), token(v.f32(), n),
                        token(beta.f32(), n), gd ? token(g32, n) : ConstTensorView{}, s32, o);
        if (state_type == DType::bf16)
          for (float& x : s32.S()) x = round_f<bf16>(x);
        delta_rule_step(token(steps.h.view, n), token(q.half(), n), token(k.half(), n), token(v.half(), n),
                        token(beta.half(), n), gd ? token(g16, n) : View4<const H>{}, s16, o);
        delta_rule_step(token(same.f.view, n), token(q.f32(), n), token(k.f32(), n), token(v.f32(), n),
                        token(beta.f32(), n), gd ? token(g32, n) : ConstTensorView{}, sf, o);
      }
      expect_criterion<H>(what + " step, state " + dtype_name(state_type), steps, want.out);
      expect_same_bits<H>(what + " step, state " + dtype_name(state_type), same.f.view, steps.h.view, sf, s16);
      EXPECT_EQ(s16.position(), T);
    }
  }
}

// The log decays in fp32 beside half q, k, v (as flash-linear-attention's and transformers' bf16 models hand
// them over, not representable in half): the chunked forwards and backwards read them as they are, so out and
// every half gradient are the fp32 call's rounded once, bit for bit, and dg (fp32, as g) is the fp32 call's
// exactly. Both families, per-token and per-key gates, packed sequences, one and two value heads per q/k head
// (the backward's grouped value heads sum dq and dk in fp32 before their one rounding); a dg of the other type
// is refused by name.
TYPED_TEST(HalfOps, FloatGateBesideHalfTensors) {
  using H = TypeParam;
  const int64_t T = 70, Hh = 2, K = 16, V = 9;
  const std::vector<int64_t> cu = {0, 33, 33, T};
  for (const int64_t group : {1, 2})
    for (const bool key_gate : {false, true})
      for (const bool delta : {false, true}) {
        const std::string what = std::string(delta ? "delta " : "decayed ") + (key_gate ? "key gate" : "token gate") +
                                 " HV" + std::to_string(group * Hh);
        SCOPED_TRACE(what);
        const int64_t HV = group * Hh, cols = key_gate ? K : 1;
        const auto q = operand<H>({1, T, Hh, K}, Layout::bnhd, this->rng),
                   k = operand<H>({1, T, Hh, K}, Layout::padded, this->rng),
                   v = operand<H>({1, T, HV, V}, Layout::bnhd, this->rng),
                   dout = operand<H>({1, T, HV, V}, Layout::bhnd, this->rng),
                   beta = operand<H>({1, T, HV, 1}, Layout::bnhd, this->rng, 0.1f, 0.9f);
        const Tensor32 g = testing::random_tensor({1, T, HV, cols}, Layout::bnhd, this->rng, -0.7f, -0.01f);
        auto out = result<H>({1, T, HV, V}, Layout::bnhd);
        auto dq = result<H>({1, T, Hh, K}, Layout::bnhd), dk = result<H>({1, T, Hh, K}, Layout::bnhd),
             dv = result<H>({1, T, HV, V}, Layout::bnhd), db = result<H>({1, T, HV, 1}, Layout::bnhd);
        Tensor32 dg = testing::make_tensor({1, T, HV, cols}, Layout::bnhd), dg_wide = dg;
        dg_wide.view.data = dg_wide.storage.data();
        if (delta) {
          DeltaRuleOptions o;
          o.gate = key_gate ? DeltaGate::key : DeltaGate::token, o.chunk_size = 16, o.cu_seqlens = cu;
          delta_rule_forward(out.f.view, q.f32(), k.f32(), v.f32(), beta.f32(), g.view, o);
          delta_rule_forward(out.h.view, q.half(), k.half(), v.half(), beta.half(), g.view, o);
          delta_rule_backward(dq.f.view, dk.f.view, dv.f.view, db.f.view, dg.view, {}, dout.f32(), {}, q.f32(), k.f32(),
                              v.f32(), beta.f32(), g.view, o);
          delta_rule_backward(dq.h.view, dk.h.view, dv.h.view, db.h.view, dg_wide.view, {}, dout.half(), {}, q.half(),
                              k.half(), v.half(), beta.half(), g.view, o);
          try {
            delta_rule_backward(dq.h.view, dk.h.view, dv.h.view, db.h.view, View4<H>(db.h.view), {}, dout.half(), {},
                                q.half(), k.half(), v.half(), beta.half(), g.view, o);
            ADD_FAILURE() << "a half dg beside an fp32 g accepted";
          } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find("dg is half precision while g is float32"), std::string::npos)
                << e.what();
          }
        } else {
          DecayedAttentionOptions o;
          o.decay = key_gate ? Decay::key : Decay::token, o.chunk_size = 16, o.cu_seqlens = cu;
          decayed_attention_forward(out.f.view, q.f32(), k.f32(), v.f32(), g.view, o);
          decayed_attention_forward(out.h.view, q.half(), k.half(), v.half(), g.view, o);
          decayed_attention_backward(dq.f.view, dk.f.view, dv.f.view, dg.view, {}, dout.f32(), {}, q.f32(), k.f32(),
                                     v.f32(), g.view, o);
          decayed_attention_backward(dq.h.view, dk.h.view, dv.h.view, dg_wide.view, {}, dout.half(), {}, q.half(),
                                     k.half(), v.half(), g.view, o);
        }
        expect_rounded_bits<H>(what + " out", out.f.view, out.h.view);
        for (auto* x : {&dq, &dk, &dv}) expect_rounded_bits<H>(what + " gradient", x->f.view, x->h.view);
        if (delta) expect_rounded_bits<H>(what + " dbeta", db.f.view, db.h.view);
        EXPECT_EQ(0, std::memcmp(dg.storage.data(), dg_wide.storage.data(), dg.storage.size() * sizeof(float)))
            << what << ": dg";
      }
}

// ---- Boundary checks on the half views themselves; the bf16 state's file. ----

TEST(HalfBoundary, OutputSharingAnInputIsRefused) {
  std::vector<bf16> buf(64, to_bf16(0.5f));
  const Bf16View x = bnhd(buf.data(), 1, 4, 1, 16);
  try {
    linear_attention_forward(x, x, x, x);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("out"), std::string::npos) << e.what();
  }
  try {
    softmax_attention_forward(x, std::span<float>(), x, x, x);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("out overlaps q"), std::string::npos) << e.what();
  }
  // A null required input is refused by name (an empty view is only an absent gate).
  std::vector<f16> kv(16), o(16);
  try {
    softmax_attention_forward(bnhd(o.data(), 1, 1, 1, 16), std::span<float>(), View4<const f16>{},
                              bnhd(kv.data(), 1, 1, 1, 16), bnhd(kv.data(), 1, 1, 1, 16));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("softmax_attention_forward: q"), std::string::npos) << e.what();
  }
}

TEST(HalfState, Bf16StateSavesAndLoadsAndIsRefusedElsewhere) {
  RecurrentState s(1, 2, 3, 5, "elu", DType::bf16);
  EXPECT_EQ(s.dtype(), DType::bf16);
  EXPECT_TRUE(s.S().empty());
  ASSERT_EQ(s.S_bf16().size(), size_t(30));
  for (size_t i = 0; i < 30; ++i) s.S_bf16()[i] = to_bf16(float(i) * 0.37f - 3);
  for (size_t i = 0; i < s.z().size(); ++i) s.z()[i] = float(i) + 0.25f;
  s.set_position(9);
  testing::TempDir dir;
  const auto path = dir.path() / "s.state";
  s.save(path);
  const RecurrentState t = RecurrentState::load(path);
  EXPECT_EQ(t.dtype(), DType::bf16);
  EXPECT_EQ(t.position(), 9);
  for (size_t i = 0; i < 30; ++i) EXPECT_EQ(t.S_bf16()[i].bits, s.S_bf16()[i].bits);
  for (size_t i = 0; i < s.z().size(); ++i) EXPECT_EQ(t.z()[i], s.z()[i]);
  // f16 states are refused; other operators refuse a bf16 state by name.
  EXPECT_THROW(RecurrentState(1, 1, 1, 1, "elu", DType::f16), Error);
  std::vector<float> x(8, 0.1f);
  const TensorView t1 = bnhd(x.data(), 1, 2, 1, 4);
  std::vector<float> o(8);
  RecurrentState init(1, 1, 4, 4, "elu", DType::bf16);
  try {
    causal_linear_attention_forward(bnhd(o.data(), 1, 2, 1, 4), t1, t1, t1, {}, &init);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("initial.dtype() is bf16, expected f32"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace linattn
