// The decayed family's factor kernels against plain fp64 loops: every length (whole vectors and
// scalar tails), exponents across fp32's range, and underflow to exactly 0.
#include "kernels/decay_factors.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/rows.hpp"

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

// Every variant: GLA's sides (the delta rule's left keys null) and the delta rule's, each with and
// without the backward's factors.
TEST(DecayFactors, SplitFactorRowSplitsAProductAroundItsMidpoint) {
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<float> u(-1, 1), half_span(-30, 30), column(-3, 3);
  for (bool delta : {false, true})
    for (bool factors : {false, true})
      for (int64_t n = 1; n <= 41; ++n) {
        const auto floats = [n] { return std::vector<float>(static_cast<size_t>(n)); };
        std::vector<float> q = floats(), k = floats(), b = floats(), m = floats(), em = floats(), enm = floats();
        std::vector<float> El = floats(), Er = floats(), Ql = floats(), Kr = floats(), Qe = floats(), Kd = floats();
        std::vector<float> Kl = floats(), Kt = floats(), Eb = floats(), Ed = floats();
        for (int64_t i = 0; i < n; ++i) {
          const size_t j = size_t(i);
          q[j] = u(rng), k[j] = u(rng), m[j] = -500 * u(rng) - 500, b[j] = m[j] + half_span(rng);
          em[j] = std::exp(column(rng)), enm[j] = std::exp(column(rng));
        }
        SplitFactorRow out{Ql.data(), Kr.data(), Qe.data(), Kd.data()};
        if (delta) out.Kl = Kl.data(), out.Kt = Kt.data();
        if (factors) out.El = El.data(), out.Er = Er.data();
        if (factors && delta) out.Eb = Eb.data(), out.Ed = Ed.data();
        split_factor_row(out, q.data(), k.data(), b.data(), m.data(), em.data(), enm.data(), n);
        const auto near = [](float got, double want) { EXPECT_NEAR(got, want, 8e-6 * std::abs(want) + 1e-37); };
        for (size_t i = 0; i < size_t(n); ++i) {
          const double f = std::exp(double(b[i]) - m[i]);
          near(Ql[i], q[i] * f), near(Kr[i], k[i] / f), near(Qe[i], q[i] * f * em[i]), near(Kd[i], k[i] / f * enm[i]);
          // The split product carries the factor exactly to rounding: q·k.
          EXPECT_NEAR(double(Ql[i]) * Kr[i], double(q[i]) * k[i], 1e-6);
          if (factors) near(El[i], f), near(Er[i], 1 / f);
          if (delta) near(Kl[i], k[i] * f), near(Kt[i], k[i] * f * em[i]);
          if (factors && delta) near(Eb[i], f * em[i]), near(Ed[i], enm[i] / f);
          // Outputs left null are not written: their buffers keep the zeros they started with.
          EXPECT_TRUE(factors || El[i] == 0.0f);
          EXPECT_TRUE(delta || Kl[i] == 0.0f);
        }
      }
}

// The chunk's running log decays against an fp64 loop written from the rule: the longest prefix
// whose every column spans at most max_span (0 counted when from_zero), all rows when not stopping.
TEST(DecayFactors, RunningLogDecaysStopWhereAColumnWouldSpanTooMuch) {
  std::mt19937_64 rng(9);
  std::uniform_real_distribution<float> decay(-6, 0.5f);
  int checked = 0;  // the cases compared: all but those with a span within rounding of the limit
  for (int64_t cols : {1, 7, 16, 19, 64})
    for (bool from_zero : {false, true})
      for (bool stop_early : {false, true})
        for (int trial = 0; trial < 4; ++trial) {
          const int64_t rows = 37, ld = cols + 3;
          std::vector<float> in(static_cast<size_t>(rows * ld), 0.0f);
          for (int64_t t = 0; t < rows; ++t)
            for (int64_t c = 0; c < cols; ++c) in[size_t(t * ld + c)] = decay(rng);
          const float max_span = 10.0f * float(trial + 1);
          std::vector<float> b = in, lo(static_cast<size_t>(cols)), hi(static_cast<size_t>(cols)),
                             mid(static_cast<size_t>(cols)), last(static_cast<size_t>(cols)),
                             e_mid(static_cast<size_t>(cols)), e_last_mid(static_cast<size_t>(cols));
          const int64_t taken = running_log_decays(
              {b.data(), ld, cols, lo.data(), hi.data(), mid.data(), last.data(), e_mid.data(), e_last_mid.data()},
              rows, max_span, from_zero, stop_early);
          // The rule in fp64.
          std::vector<double> run(static_cast<size_t>(cols), 0.0), mn(static_cast<size_t>(cols)),
              mx(static_cast<size_t>(cols));
          int64_t want = rows;
          bool ambiguous = false;
          for (int64_t t = 0; t < rows; ++t) {
            double span = 0;
            for (int64_t c = 0; c < cols; ++c) {
              run[size_t(c)] += in[size_t(t * ld + c)];
              const double r = run[size_t(c)];
              double h = t > 0 ? std::max(mx[size_t(c)], r) : r, l = t > 0 ? std::min(mn[size_t(c)], r) : r;
              if (from_zero) h = std::max(h, 0.0), l = std::min(l, 0.0);
              span = std::max(span, h - l);
            }
            // Spans near the limit are left out of the comparison: fp32 sums may fall either side.
            ambiguous |= std::abs(span - max_span) < 1e-3;
            if (t > 0 && stop_early && span > max_span) {
              want = t;
              break;
            }
            for (int64_t c = 0; c < cols; ++c) {
              const double r = run[size_t(c)];
              mn[size_t(c)] = t > 0 ? std::min(mn[size_t(c)], r) : r,
              mx[size_t(c)] = t > 0 ? std::max(mx[size_t(c)], r) : r;
            }
          }
          if (ambiguous) continue;
          ++checked;
          ASSERT_EQ(taken, want) << cols << " " << from_zero << " " << stop_early << " " << trial;
          if (!stop_early) {
            EXPECT_EQ(taken, rows);
          }
          std::vector<double> sum(static_cast<size_t>(cols), 0.0);
          for (int64_t t = 0; t < taken; ++t)
            for (int64_t c = 0; c < cols; ++c) {
              sum[size_t(c)] += in[size_t(t * ld + c)];
              EXPECT_NEAR(b[size_t(t * ld + c)], sum[size_t(c)], 1e-4 * (1 + std::abs(sum[size_t(c)])));
            }
          for (int64_t c = 0; c < cols; ++c) {
            const size_t j = size_t(c);
            const double m = 0.5 * (mn[j] + mx[j]);
            EXPECT_NEAR(mid[j], m, 1e-4 * (1 + std::abs(m)));
            EXPECT_NEAR(last[j], sum[j], 1e-4 * (1 + std::abs(sum[j])));
            EXPECT_NEAR(e_mid[j], std::exp(m), 1e-3 * std::exp(m) + 1e-37);
            EXPECT_NEAR(e_last_mid[j], std::exp(sum[j] - m), 1e-3 * std::exp(sum[j] - m));
          }
        }
  EXPECT_GE(checked, 75);
}

// The per-row path's row factors (e^{b_t}, e^{b_n − b_t}): each row times its own, pitches that differ
// from the width, every width from a scalar tail to whole vectors plus a tail.
TEST(DecayFactors, ScaleRowsTimesEachRowItsOwnFactor) {
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<float> u(-1, 1);
  for (int64_t cols : {1, 5, 16, 33}) {
    const int64_t rows = 7, lds = cols + 2, ldd = cols + 5;
    std::vector<float> src(static_cast<size_t>(rows * lds)), scale(static_cast<size_t>(rows)),
        dst(static_cast<size_t>(rows * ldd), -7.0f);
    for (float& x : src) x = u(rng);
    for (float& x : scale) x = u(rng);
    scale_rows(dst.data(), ldd, src.data(), lds, scale.data(), rows, cols);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < ldd; ++c) {
        const float got = dst[size_t(r * ldd + c)];
        if (c < cols)
          EXPECT_EQ(got, scale[size_t(r)] * src[size_t(r * lds + c)]) << cols << " " << r << " " << c;
        else
          EXPECT_EQ(got, -7.0f) << "wrote past the row's width";
      }
  }
}

// The gate's share of a row against fp64 loops: per column and summed over the columns, with and
// without the key term, every length from a scalar tail to whole vectors plus a tail.
TEST(DecayFactors, AddGateRowAddsQueryMinusKeyProductsInDouble) {
  std::mt19937_64 rng(13);
  std::uniform_real_distribution<float> u(-1, 1);
  for (int64_t n : {1, 3, 8, 16, 21, 64})
    for (bool with_k : {false, true})
      for (bool sum_columns : {false, true}) {
        const auto floats = [&] {
          std::vector<float> x(static_cast<size_t>(n));
          for (float& y : x) y = u(rng);
          return x;
        };
        const std::vector<float> q = floats(), gq = floats(), k = floats(), gk = floats();
        std::vector<double> out(static_cast<size_t>(n), 0.5), want = out;
        add_gate_row(out.data(), q.data(), gq.data(), with_k ? k.data() : nullptr, gk.data(), n, sum_columns);
        for (size_t c = 0; c < size_t(n); ++c)
          want[sum_columns ? 0 : c] += double(q[c]) * gq[c] - (with_k ? double(k[c]) * gk[c] : 0.0);
        for (size_t c = 0; c < size_t(n); ++c) EXPECT_NEAR(out[c], want[c], 1e-13) << n << " " << c;
      }
}

// The reverse running sums: each column summed from the last row back in fp64, written as floats,
// to contiguous and to strided destinations.
TEST(DecayFactors, ReverseRunningSumsSumFromTheEnd) {
  std::mt19937_64 rng(17);
  std::uniform_real_distribution<double> u(-1, 1);
  for (int64_t cols : {1, 5, 8, 19, 64})
    for (int64_t col : {1, 3}) {
      const int64_t rows = 29, row = cols * col + 2;
      std::vector<double> g(static_cast<size_t>(rows * cols));
      for (double& x : g) x = u(rng);
      std::vector<float> dst(static_cast<size_t>(rows * row), -9.0f);
      // In two blocks, the sums carried from the later to the earlier.
      std::vector<double> sum(static_cast<size_t>(cols), 0.0);
      const int64_t split = 11;
      reverse_running_sums(dst.data() + split * row, row, col, g.data() + split * cols, rows - split, cols, sum.data());
      reverse_running_sums(dst.data(), row, col, g.data(), split, cols, sum.data());
      for (int64_t c = 0; c < cols; ++c) {
        double want = 0;
        for (int64_t t = rows - 1; t >= 0; --t) {
          want += g[size_t(t * cols + c)];
          EXPECT_EQ(dst[size_t(t * row + c * col)], float(want)) << cols << " " << col << " " << t << " " << c;
        }
      }
      EXPECT_TRUE(col == 1 || dst[1] == -9.0f) << "wrote between the strided columns";
    }
}

// The delta rule's chain rule back through the split sides, and its gate row, against fp64 loops
// written from the formulas (gated and ungated; with and without the Kd pair).
TEST(DecayFactors, SplitFactorRowBackwardAndGateRowMatchTheFormulas) {
  std::mt19937_64 rng(19);
  std::uniform_real_distribution<float> u(-1, 1);
  for (int64_t n : {1, 7, 16, 37}) {
    const auto floats = [&] {
      std::vector<float> x(static_cast<size_t>(n));
      for (float& y : x) y = u(rng);
      return x;
    };
    std::vector<std::vector<float>> side(6), grad(6), factor(4);
    for (auto& x : side) x = floats();
    for (auto& x : grad) x = floats();
    for (auto& x : factor) x = floats();
    const std::vector<float> q = floats(), k = floats();
    const SplitSides sides{side[0].data(), side[1].data(), side[2].data(),
                           side[3].data(), side[4].data(), side[5].data()};
    const SplitSides grads{grad[0].data(), grad[1].data(), grad[2].data(),
                           grad[3].data(), grad[4].data(), grad[5].data()};
    const float diag = 0.375f;
    for (bool gated : {false, true}) {
      std::vector<float> dq = floats(), dk = floats();
      const auto f = [&](int j) { return gated ? factor[size_t(j)].data() : nullptr; };
      split_factor_row_backward(dq.data(), dk.data(), grads, f(0), f(1), f(2), f(3), q.data(), k.data(), diag, n);
      for (size_t i = 0; i < size_t(n); ++i) {
        const auto e = [&](int j) { return gated ? double(factor[size_t(j)][i]) : 1.0; };  // El, Er, Eb, Ed
        const auto g = [&](int j) { return double(grad[size_t(j)][i]); };                  // Qe, Ql, Kt, Kl, Kr, Kd
        EXPECT_NEAR(dq[i], g(0) * e(2) + g(1) * e(0) + diag * k[i], 1e-5) << n << " " << i;
        EXPECT_NEAR(dk[i], g(2) * e(2) + g(3) * e(0) + g(4) * e(1) + g(5) * e(3) + diag * q[i], 1e-5) << n << " " << i;
      }
    }
    for (bool with_kd : {false, true}) {
      std::vector<float> db(static_cast<size_t>(n));
      std::vector<double> kd_sum(static_cast<size_t>(n), 0.25);
      split_gate_row(db.data(), kd_sum.data(), sides, grads, with_kd, n);
      for (size_t i = 0; i < size_t(n); ++i) {
        const auto p = [&](int j) { return double(side[size_t(j)][i]) * grad[size_t(j)][i]; };
        const double kd = with_kd ? p(5) : 0.0;
        EXPECT_NEAR(db[i], p(0) + p(2) + p(1) + p(3) - p(4) - kd, 1e-6) << n << " " << i;
        EXPECT_NEAR(kd_sum[i], 0.25 + kd, 1e-15) << n << " " << i;
      }
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
