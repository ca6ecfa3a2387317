// The decayed family's factor kernels against plain fp64 loops: every length (whole vectors and
// scalar tails), exponents across fp32's range, and underflow to exactly 0.
#include "kernels/decay_factors.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace linattn::kernels {
namespace {

TEST(DecayFactors, MulExpDifferenceMatchesTheFormula) {
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<float> u(-1, 1), expo(-40, 40);
  for (int64_t n = 1; n <= 41; ++n)
    for (float sign : {1.0f, -1.0f}) {
      std::vector<float> x(static_cast<size_t>(n)), a(static_cast<size_t>(n)), b(static_cast<size_t>(n)),
          y(static_cast<size_t>(n)), y0(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) x[size_t(i)] = u(rng), a[size_t(i)] = expo(rng), b[size_t(i)] = expo(rng) / 2;
      mul_exp_difference(y.data(), x.data(), a.data(), b.data(), sign, n);
      mul_exp_difference(y0.data(), x.data(), a.data(), nullptr, sign, n);
      for (int64_t i = 0; i < n; ++i) {
        const double want = double(x[size_t(i)]) * std::exp(double(sign) * (double(a[size_t(i)]) - b[size_t(i)]));
        const double want0 = double(x[size_t(i)]) * std::exp(double(sign) * double(a[size_t(i)]));
        EXPECT_NEAR(y[size_t(i)], want, 4e-6 * std::abs(want) + 1e-37) << n << " " << i;
        EXPECT_NEAR(y0[size_t(i)], want0, 4e-6 * std::abs(want0) + 1e-37) << n << " " << i;
      }
    }
}

TEST(DecayFactors, MulExpPairSplitsAProductAroundItsMidpoint) {
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<float> u(-1, 1), half_span(-30, 30);
  for (int64_t n = 1; n <= 41; ++n) {
    std::vector<float> q(static_cast<size_t>(n)), k(static_cast<size_t>(n)), a(static_cast<size_t>(n)),
        m(static_cast<size_t>(n)), qh(static_cast<size_t>(n)), kh(static_cast<size_t>(n)), e(static_cast<size_t>(n)),
        inv(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i)
      q[size_t(i)] = u(rng), k[size_t(i)] = u(rng), m[size_t(i)] = -500 * u(rng) - 500,
      a[size_t(i)] = m[size_t(i)] + half_span(rng);
    mul_exp_pair(qh.data(), kh.data(), e.data(), inv.data(), q.data(), k.data(), a.data(), m.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      const double f = std::exp(double(a[size_t(i)]) - m[size_t(i)]);
      EXPECT_NEAR(e[size_t(i)], f, 4e-6 * f);
      EXPECT_NEAR(inv[size_t(i)], 1 / f, 4e-6 / f);
      EXPECT_NEAR(qh[size_t(i)], q[size_t(i)] * f, 4e-6 * std::abs(q[size_t(i)] * f));
      EXPECT_NEAR(kh[size_t(i)], k[size_t(i)] / f, 4e-6 * std::abs(k[size_t(i)] / f));
      // The split product carries the factor exactly to rounding: q·k.
      EXPECT_NEAR(double(qh[size_t(i)]) * kh[size_t(i)], double(q[size_t(i)]) * k[size_t(i)], 1e-6);
    }
  }
}

TEST(DecayFactors, UnderflowGivesZeroNotNaN) {
  const float x[3] = {1.0f, -2.0f, 0.0f}, a[3] = {-1000.0f, -200.0f, -90.0f};
  float y[3];
  mul_exp_difference(y, x, a, nullptr, 1.0f, 3);
  for (float v : y) EXPECT_EQ(std::fpclassify(v) == FP_ZERO || std::fpclassify(v) == FP_SUBNORMAL, true) << v;
}

}  // namespace
}  // namespace linattn::kernels
