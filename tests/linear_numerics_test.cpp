// Adversarial numerics of linear attention: denominators near zero, inputs where a plain exp would
// overflow, NaN and Inf (not scanned; they reach exactly the outputs that depend on them), and the
// SIMD feature maps on special values.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "linattn/feature_map.hpp"
#include "linattn/linear_attention.hpp"
#include "linattn/reference.hpp"
#include "linear_support.hpp"
#include "support/tensors.hpp"

namespace linattn {
namespace {

using testing::Layout;
using testing::LinearCase;

// fp32 against fp64; the sums are of non-negative products here, so no cancellation: measured ≤ 3e-6.
constexpr double kBound = 1e-5;
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

struct Outputs {
  testing::Tensor32 out, dq, dk, dv;
};

Outputs run(const testing::LinearInputs& in, const testing::Tensor32& dout, const LinearAttentionOptions& options) {
  const auto [B, Nq, H, D] = in.q.extent();
  const int64_t E = in.v.extent()[3];
  Outputs r{testing::make_tensor({B, Nq, H, E}, Layout::bnhd), testing::make_tensor(in.q.extent(), Layout::bnhd),
            testing::make_tensor(in.k.extent(), Layout::bnhd), testing::make_tensor(in.v.extent(), Layout::bnhd)};
  linear_attention_forward(r.out.view, in.q.view, in.k.view, in.v.view, options);
  linear_attention_backward(r.dq.view, r.dk.view, r.dv.view, dout.view, in.q.view, in.k.view, in.v.view, options);
  return r;
}

// relu of mostly negative inputs: most features are 0, many rows see φ(q)·z ≈ 0 and den ≈ eps.
TEST(LinearNumerics, DenominatorsNearZero) {
  std::mt19937_64 rng(1);
  const LinearCase c{3, 97, 97, 3, 16, 16};
  for (bool causal : {false, true}) {
    auto in = testing::random_inputs(c, Layout::bnhd, rng, -1.0f, 0.05f);
    LinearAttentionOptions options;
    options.feature_map = relu_feature_map();
    options.causal = causal;
    testing::expect_matches_oracle(in, options, Layout::bnhd, rng, kBound, kBound);
  }
}

// Inputs in [90, 100): exp would overflow fp32 (e^89 > FLT_MAX), but elu+1 is linear there.
TEST(LinearNumerics, LargePositiveInputsAreLinear) {
  std::mt19937_64 rng(2);
  const LinearCase c{1, 65, 65, 3, 59, 16};
  for (bool causal : {false, true}) {
    auto in = testing::random_inputs(c, Layout::padded, rng, 90.0f, 100.0f);
    LinearAttentionOptions options;
    options.causal = causal;
    // The backward's dq does cancel here: with every φ ≈ 96, dφ(q) = P / den − z (φ(q)·P) / den² is a
    // difference of nearly equal terms. Measured dq errors: 9.99e-6 (non-causal) and 8.29e-6 (causal) on
    // AVX3, 1.08e-5 on Highway's SCALAR target (riscv64 under qemu, one fp32 chain per sum); dk and dv
    // ≤ 3.5e-7 on AVX3.
    constexpr double kCancellingBound = 3e-5;
    testing::expect_matches_oracle(in, options, Layout::padded, rng, kBound, kCancellingBound);
  }
}

// Keys with half of their dims in [−100, −90): those features are e^−95 ≈ 0 (no underflow trap, no
// NaN), the other half carries the attention.
TEST(LinearNumerics, LargeNegativeInputsVanish) {
  std::mt19937_64 rng(3);
  const LinearCase c{1, 64, 64, 3, 16, 16};
  for (bool causal : {false, true}) {
    auto in = testing::random_inputs(c, Layout::bnhd, rng);
    for (int64_t n = 0; n < c.Nk; ++n)
      for (int64_t h = 0; h < c.H; ++h)
        for (int64_t d = 0; d < c.D; d += 2) in.k.view(0, n, h, d) = -90.0f - float(d % 10);
    LinearAttentionOptions options;
    options.causal = causal;
    testing::expect_matches_oracle(in, options, Layout::bnhd, rng, kBound, kBound);
  }
  // Everything in [−100, −90): every product underflows, out = num / eps ≈ 0, and nothing is NaN.
  auto in = testing::random_inputs(c, Layout::bnhd, rng, -100.0f, -90.0f);
  auto dout = testing::random_tensor({c.B, c.Nq, c.H, c.E}, Layout::bnhd, rng);
  for (bool causal : {false, true}) {
    LinearAttentionOptions options;
    options.causal = causal;
    const Outputs r = run(in, dout, options);
    for (const auto* t : {&r.out, &r.dq, &r.dk, &r.dv}) EXPECT_TRUE(testing::all_finite(t->view));
    for (float x : r.out.storage) EXPECT_LE(std::abs(x), 1e-30f);
  }
}

// A NaN in key j of (b, h) reaches every row that sees key j, and nothing else; a NaN past the key
// length is never read.
TEST(LinearNumerics, NaNReachesExactlyTheRowsThatSeeIt) {
  std::mt19937_64 rng(4);
  const LinearCase c{2, 20, 20, 2, 16, 16};
  auto in = testing::random_inputs(c, Layout::bnhd, rng);
  in.k.view(0, 7, 1, 3) = kNaN;   // seen by batch 0, head 1 (rows ≥ 7 when causal)
  in.v.view(1, 15, 0, 2) = kInf;  // past batch 1's key length: never read
  const std::vector<int64_t> lengths{20, 15};
  for (bool causal : {false, true}) {
    LinearAttentionOptions options;
    options.causal = causal;
    options.key_lengths = lengths;
    auto out = testing::make_tensor({c.B, c.Nq, c.H, c.E}, Layout::bnhd);
    linear_attention_forward(out.view, in.q.view, in.k.view, in.v.view, options);
    for (int64_t b = 0; b < c.B; ++b)
      for (int64_t i = 0; i < c.Nq; ++i)
        for (int64_t h = 0; h < c.H; ++h) {
          const bool sees = b == 0 && h == 1 && (!causal || i >= 7);
          for (int64_t e = 0; e < c.E; ++e)
            EXPECT_EQ(std::isnan(out.view(b, i, h, e)), sees) << b << " " << i << " " << h << " " << e;
        }
    // The backward does not crash and keeps the other heads finite.
    auto dout = testing::random_tensor({c.B, c.Nq, c.H, c.E}, Layout::bnhd, rng);
    auto dq = testing::make_tensor(in.q.extent(), Layout::bnhd), dk = testing::make_tensor(in.k.extent(), Layout::bnhd),
         dv = testing::make_tensor(in.v.extent(), Layout::bnhd);
    linear_attention_backward(dq.view, dk.view, dv.view, dout.view, in.q.view, in.k.view, in.v.view, options);
    for (int64_t i = 0; i < c.Nq; ++i)
      for (int64_t d = 0; d < c.D; ++d) {
        EXPECT_TRUE(std::isfinite(dq.view(1, i, 0, d)));
        EXPECT_TRUE(std::isfinite(dk.view(0, i, 0, d)));
      }
  }
}

// Same NaN-ness, same infinity, or within 2 ulps-ish of the fp64 value rounded to fp32.
void expect_close(float got, float want, const char* map, float x) {
  if (std::isnan(want) || std::isinf(want)) {
    EXPECT_TRUE(std::isnan(want) ? std::isnan(got) : got == want) << map << " x=" << x << " got " << got;
  } else {
    EXPECT_NEAR(got, want, 2.5e-7 * std::abs(want) + 1e-38) << map << " x=" << x;
  }
}

// The SIMD maps against their fp64 formula on special values, at lengths with and without a tail.
TEST(LinearNumerics, FeatureMapsOnSpecialValues) {
  const std::vector<float> specials{-kInf,  -1e30f, -200.0f, -104.5f, -103.0f, -88.0f, -87.0f,
                                    -20.0f, -1.0f,  -1e-30f, -0.0f,   0.0f,    1e-30f, 1e-7f,
                                    0.5f,   1.0f,   88.0f,   89.0f,   1e30f,   kInf,   kNaN};
  for (const char* name : {"elu", "relu", "identity"}) {
    const FeatureMapPtr map = feature_map_by_name(name);
    for (size_t n : {specials.size(), size_t(16), size_t(3)}) {
      std::vector<float> x(specials.begin(), specials.begin() + long(n)), phi(n), dphi(n, 0.75f), dx(n);
      std::vector<double> x64(x.begin(), x.end()), phi64(n), dphi64(n, 0.75), dx64(n);
      map->forward(phi.data(), x.data(), 1, int64_t(n), FeatureRole::key);
      map->backward(dx.data(), dphi.data(), x.data(), 1, int64_t(n), FeatureRole::key);
      map->forward_reference(phi64.data(), x64.data(), 1, int64_t(n), FeatureRole::key);
      map->backward_reference(dx64.data(), dphi64.data(), x64.data(), 1, int64_t(n), FeatureRole::key);
      for (size_t i = 0; i < n; ++i) {
        expect_close(phi[i], float(phi64[i]), name, x[i]);
        expect_close(dx[i], float(dx64[i]), name, x[i]);
      }
    }
  }
}

// elu+1's own vector exp against std::exp in fp64 over the range where it is not flushed to 0.
TEST(LinearNumerics, EluMatchesExpOverItsRange) {
  const int64_t n = 20001;
  std::vector<float> x(n), phi(n), dx(n), ones(n, 1.0f);
  for (int64_t i = 0; i < n; ++i) x[i] = -87.0f + 88.0f * float(i) / float(n - 1);
  const FeatureMapPtr elu = elu_feature_map();
  elu->forward(phi.data(), x.data(), 1, n, FeatureRole::query);
  elu->backward(dx.data(), ones.data(), x.data(), 1, n, FeatureRole::query);
  double worst = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double want = x[i] > 0 ? double(x[i]) + 1 : std::exp(double(x[i]));
    const double slope = x[i] > 0 ? 1.0 : std::exp(double(x[i]));
    worst = std::max({worst, std::abs(phi[i] - want) / want, std::abs(dx[i] - slope) / slope});
  }
  EXPECT_LE(worst, 2.5e-7);  // about 2 ulp
}

}  // namespace
}  // namespace linattn
