// The tile kernels of exact softmax attention against plain fp64 loops: the gemm as softmax uses it (both A
// layouts, per-row ranges, every column-block width, accumulate or not), the online-softmax step,
// the backward's p and ds, delta's summation order, and the decoding scores.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <type_traits>
#include <vector>

#include "kernels/gemm.hpp"
#include "kernels/softmax_decode.hpp"
#include "kernels/softmax_tile_rows.hpp"

namespace linattn::kernels {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

std::vector<float> uniform(size_t n, std::mt19937_64& rng, float lo = -1, float hi = 1) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> x(n);
  for (float& v : x) v = dist(rng);
  return x;
}

struct MatmulCase {
  int64_t rows, cols, depth;
  bool transposed_a, ranges, accumulate;
};

// c (+)= a·b over per-row ranges: every element within 1e-6 of Σ|a·b| of the fp64 sum; A outside
// a row's range holds NaN (never read), and C's columns past `cols` keep their NaN (never written).
TEST(SoftmaxTileMatmul, MatchesPlainSums) {
  std::mt19937_64 rng(3);
  const MatmulCase cases[] = {
      {1, 16, 1, false, false, false}, {3, 48, 17, false, true, true},  {4, 64, 64, true, true, false},
      {5, 80, 64, false, false, true}, {64, 144, 33, true, true, true}, {64, 64, 64, false, true, false},
      {63, 32, 64, true, false, true}, {6, 128, 2, false, true, true},
  };
  for (const MatmulCase& t : cases) {
    SCOPED_TRACE(::testing::Message() << "rows " << t.rows << " cols " << t.cols << " depth " << t.depth
                                      << (t.transposed_a ? " aᵀ" : "") << (t.ranges ? " ranges" : ""));
    const int64_t ldc = t.cols + 16, ldb = t.cols + 16;
    // a(m, k) at m·ars + k·acs
    const int64_t ars = t.transposed_a ? 1 : t.depth + 3, acs = t.transposed_a ? t.rows + 2 : 1;
    std::vector<float> a = uniform(size_t(t.rows * ars + t.depth * acs), rng);
    const std::vector<float> b = uniform(size_t(t.depth * ldb), rng);
    std::vector<float> c = uniform(size_t(t.rows * ldc), rng);
    for (int64_t m = 0; m < t.rows; ++m)
      for (int64_t j = t.cols; j < ldc; ++j) c[m * ldc + j] = kNaN;
    std::vector<int32_t> begin(t.rows, 0), end(t.rows, int32_t(t.depth));
    if (t.ranges) {  // runs of equal ranges (the block path) and odd ones (the 1-row path)
      std::uniform_int_distribution<int32_t> pick(0, int32_t(t.depth));
      for (int64_t m = 0; m < t.rows; ++m) {
        if (m % 7 < 4 && m > 0) {
          begin[m] = begin[m - 1], end[m] = end[m - 1];
          continue;
        }
        const int32_t x = pick(rng), y = pick(rng);
        begin[m] = std::min(x, y), end[m] = std::max(x, y);
      }
      for (int64_t m = 0; m < t.rows; ++m)
        for (int64_t k = 0; k < t.depth; ++k)
          if (k < begin[m] || k >= end[m]) a[m * ars + k * acs] = kNaN;
    }
    const std::vector<float> c0 = c;
    gemm({c.data(), ldc, t.rows, t.cols}, {a.data(), ars, acs}, {b.data(), ldb, t.depth, t.cols},
         {.accumulate = t.accumulate,
          .k_begin = t.ranges ? begin.data() : nullptr,
          .k_end = t.ranges ? end.data() : nullptr});
    for (int64_t m = 0; m < t.rows; ++m) {
      for (int64_t j = 0; j < t.cols; ++j) {
        double want = t.accumulate ? c0[m * ldc + j] : 0.0, magnitude = std::abs(want);
        for (int64_t k = begin[m]; k < end[m]; ++k) {
          want += double(a[m * ars + k * acs]) * b[k * ldb + j];
          magnitude += std::abs(double(a[m * ars + k * acs]) * b[k * ldb + j]);
        }
        ASSERT_NEAR(c[m * ldc + j], want, 1e-6 * magnitude + 1e-30) << m << ", " << j;
      }
      for (int64_t j = t.cols; j < ldc; ++j) ASSERT_TRUE(std::isnan(c[m * ldc + j]));
    }
  }
}

// Two key tiles of one row through the online-softmax step, then the finish: p, the running max and
// sum, the rescaled output and lse as the plain formulas give them; masked columns are exactly 0.
TEST(SoftmaxForwardTile, OnlineSoftmaxOverTwoTiles) {
  std::mt19937_64 rng(4);
  constexpr int64_t kRows = 5, kCols = 64, kOut = 32;
  const int32_t ends[2][kRows] = {{64, 10, 0, 64, 17}, {30, 64, 0, 0, 1}};
  std::vector<float> scores[2] = {uniform(kRows * kCols, rng, -20, 20), uniform(kRows * kCols, rng, -20, 60)};
  std::vector<float> o(kRows * kOut, 0.0f), row_max(kRows, -kInf), row_sum(kRows, 0.0f), lse(kRows);
  std::vector<float> o_after_first;
  for (int tile = 0; tile < 2; ++tile) {
    std::vector<float> s = scores[tile];
    for (int64_t i = 0; i < kRows; ++i)
      s[i * kCols + kCols - 1] = ends[tile][i] < kCols ? kNaN : s[i * kCols + kCols - 1];
    const std::vector<float> max_before = row_max;
    for (int64_t i = 0; i < kRows * kOut; ++i) o[i] = tile == 0 ? 0.0f : 1.0f;  // stands for Σ p v so far
    softmax_forward_tile(s.data(), kCols, o.data(), kOut, row_max.data(), row_sum.data(), ends[tile], kRows, kCols,
                         kOut);
    for (int64_t i = 0; i < kRows; ++i) {
      double tile_max = -INFINITY;
      for (int64_t j = 0; j < ends[tile][i]; ++j) tile_max = std::max(tile_max, double(scores[tile][i * kCols + j]));
      const double m = std::max(double(max_before[i]), tile_max);
      EXPECT_EQ(row_max[i], float(m));
      for (int64_t j = 0; j < kCols; ++j) {
        // exp of the fp32 difference the kernel forms: what is tested is the exp, not that rounding
        const float x = scores[tile][i * kCols + j] - float(m);
        const double want = j < ends[tile][i] ? std::exp(double(x)) : 0.0;
        EXPECT_NEAR(s[i * kCols + j], want, 4e-7 * want + 1e-38) << i << ", " << j;
        if (j >= ends[tile][i]) {
          EXPECT_EQ(s[i * kCols + j], 0.0f);
        }
      }
      // exp of the fp32 difference again: m_old − m_new ≈ −43 rounds by up to 1.9e-6 relative in fp32, more than
      // the bound, and whether it does depends on the draws (uniform_real_distribution<float> gives other last bits
      // on aarch64, where GCC fuses its u·(b − a) + a into one FMA).
      const double rescale = ends[tile][i] > 0 ? std::exp(double(max_before[i] - float(m))) : 1.0;
      if (tile == 1) {
        EXPECT_NEAR(o[i * kOut + 3], rescale, 1e-6 * rescale) << i;
      }
    }
  }
  std::vector<float> o_final = o;
  softmax_forward_finish(o_final.data(), kOut, lse.data(), row_max.data(), row_sum.data(), kRows, kOut);
  for (int64_t i = 0; i < kRows; ++i) {
    double sum = 0, m = row_max[i];
    for (int tile = 0; tile < 2; ++tile)
      for (int64_t j = 0; j < ends[tile][i]; ++j) sum += std::exp(double(scores[tile][i * kCols + j]) - m);
    if (sum == 0) {  // row 2 sees no key
      EXPECT_EQ(lse[i], -kInf);
      EXPECT_EQ(o_final[i * kOut], 0.0f);
      continue;
    }
    EXPECT_NEAR(lse[i], m + std::log(sum), 1e-6 * std::abs(m + std::log(sum)) + 1e-6) << i;
    EXPECT_NEAR(o_final[i * kOut + 5], o[i * kOut + 5] / sum, 1e-6 * std::abs(o[i * kOut + 5] / sum)) << i;
  }
}

// p = exp(s − lse) and ds = p (dp − delta) over the visible columns, exactly 0 elsewhere even where
// s and dp hold NaN.
TEST(SoftmaxBackwardTile, ProbabilitiesAndScoreGradients) {
  std::mt19937_64 rng(5);
  constexpr int64_t kRows = 4, kCols = 64;
  const int32_t end[kRows] = {64, 0, 37, 16};
  std::vector<float> s = uniform(kRows * kCols, rng, -5, 5), dp = uniform(kRows * kCols, rng);
  const std::vector<float> lse = uniform(kRows, rng, 3, 6), delta = uniform(kRows, rng);
  for (int64_t i = 0; i < kRows; ++i)
    for (int64_t j = end[i]; j < kCols; ++j) s[i * kCols + j] = dp[i * kCols + j] = kNaN;
  const std::vector<float> s0 = s, dp0 = dp;
  softmax_backward_tile(s.data(), dp.data(), kCols, lse.data(), delta.data(), end, kRows, kCols);
  for (int64_t i = 0; i < kRows; ++i)
    for (int64_t j = 0; j < kCols; ++j) {
      if (j >= end[i]) {
        EXPECT_EQ(s[i * kCols + j], 0.0f);
        EXPECT_EQ(dp[i * kCols + j], 0.0f);
        continue;
      }
      const double p = std::exp(double(s0[i * kCols + j] - lse[i]));  // of the fp32 difference
      EXPECT_NEAR(s[i * kCols + j], p, 4e-7 * p);
      EXPECT_NEAR(dp[i * kCols + j], p * (dp0[i * kCols + j] - delta[i]), 1e-6 * p * 2 + 1e-12);
    }
}

// delta = rowsum(dO ∘ O) is summed in the order the tile product forms dp = dO·v, so where O = v_j
// (one key dominates) dp − delta is exactly 0.
TEST(SoftmaxRowDot, SumsInTheTileProductsOrder) {
  std::mt19937_64 rng(6);
  for (int64_t e : {1, 16, 59, 64, 128}) {
    const int64_t ep = (e + 15) / 16 * 16;
    std::vector<float> dout = uniform(size_t(ep), rng), v = uniform(size_t(ep), rng);
    std::fill(dout.begin() + e, dout.end(), 0.0f);
    std::fill(v.begin() + e, v.end(), 0.0f);
    std::vector<float> vt(size_t(ep * 16), 0.0f), dp(16);  // vᵀ as one key column of a [ep, 16] tile
    for (int64_t c = 0; c < ep; ++c) vt[c * 16] = v[c];
    gemm({dp.data(), 16, 1, 16}, {dout.data(), ep, 1}, {vt.data(), 16, e, 16});
    float delta = 0;
    softmax_row_dot(&delta, dout.data(), v.data(), ep, 1, ep);
    EXPECT_EQ(dp[0], delta) << e;
  }
}

// Decoding scores: s[r, j] = q_r · k_j within 1e-6 of Σ|q·k| of the fp64 sum, k read in place with
// a row stride; k past each row's depth and past `count` holds NaN (never read), and s past `count`
// keeps its NaN (never written).
TEST(SoftmaxDecodeScores, MatchesPlainSums) {
  std::mt19937_64 rng(5);
  for (int64_t depth : {1, 16, 17, 59, 64, 130}) {
    for (int64_t rows : {1, 3, 16}) {
      const int64_t count = 61, lds = 64, ldq = (depth + 15) / 16 * 16, k_stride = depth + 5;
      std::vector<float> q = uniform(size_t(rows * ldq), rng), k = uniform(size_t(64 * k_stride), rng);
      for (int64_t r = 0; r < rows; ++r) std::fill(q.begin() + r * ldq + depth, q.begin() + (r + 1) * ldq, 0.0f);
      for (int64_t j = 0; j < 64; ++j)
        for (int64_t d = 0; d < k_stride; ++d)
          if (j >= count || d >= depth) k[size_t(j * k_stride + d)] = kNaN;
      std::vector<float> s(size_t(rows * lds), kNaN);
      softmax_decode_scores(s.data(), lds, q.data(), ldq, rows, k.data(), k_stride, count, depth);
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t j = 0; j < lds; ++j) {
          const float got = s[size_t(r * lds + j)];
          if (j >= count) {
            EXPECT_TRUE(std::isnan(got)) << r << " " << j;
            continue;
          }
          double want = 0, magnitude = 0;
          for (int64_t d = 0; d < depth; ++d) {
            const double p = double(q[size_t(r * ldq + d)]) * double(k[size_t(j * k_stride + d)]);
            want += p;
            magnitude += std::abs(p);
          }
          EXPECT_NEAR(got, want, 1e-6 * magnitude) << "depth " << depth << " row " << r << " key " << j;
        }
      }
    }
  }
}

// Decoding values, v read in bf16 / f16 where it lies: the same bits as kernels::gemm on the widened
// copy (o += p v, each row over its own visible keys), and columns past cols untouched; v past each
// row's visible keys and past cols holds NaN (never read).
template <class H>
void expect_decode_values_match_gemm(std::mt19937_64& rng) {
  for (int64_t cols : {1, 15, 16, 59, 64, 130}) {
    for (int64_t rows : {1, 3, 16}) {
      const int64_t count = 61, ldp = 64, ldo = (cols + 15) / 16 * 16, v_stride = cols + 7;
      const std::vector<float> p = uniform(size_t(rows * ldp), rng), v32 = uniform(size_t(count * v_stride), rng);
      std::vector<int32_t> key_end(static_cast<size_t>(rows));
      for (int64_t r = 0; r < rows; ++r) key_end[size_t(r)] = int32_t(count - 3 * r % count);
      std::vector<H> v(v32.size());
      std::vector<float> widened(size_t(count * ldo), 0.0f);
      for (int64_t j = 0; j < count; ++j)
        for (int64_t e = 0; e < v_stride; ++e) {
          const float x = e < cols ? v32[size_t(j * v_stride + e)] : kNaN;
          if constexpr (std::is_same_v<H, bf16>)
            v[size_t(j * v_stride + e)] = to_bf16(x);
          else
            v[size_t(j * v_stride + e)] = to_f16(x);
          if (e < cols) widened[size_t(j * ldo + e)] = to_float(v[size_t(j * v_stride + e)]);
        }
      const std::vector<float> o0 = uniform(size_t(rows * ldo), rng);
      std::vector<float> want = o0, got = o0;
      gemm({want.data(), ldo, rows, ldo}, {p.data(), ldp, 1}, {widened.data(), ldo, count, ldo},
           {.accumulate = true, .k_end = key_end.data()});
      softmax_decode_values(got.data(), ldo, p.data(), ldp, key_end.data(), rows, v.data(), v_stride, cols);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t e = 0; e < ldo; ++e) {
          const size_t i = size_t(r * ldo + e);
          EXPECT_EQ(got[i], e < cols ? want[i] : o0[i]) << "cols " << cols << " row " << r << " col " << e;
        }
    }
  }
}

TEST(SoftmaxDecodeValues, Bf16MatchesGemmOnTheWidenedCopy) {
  std::mt19937_64 rng(7);
  expect_decode_values_match_gemm<bf16>(rng);
}

TEST(SoftmaxDecodeValues, F16MatchesGemmOnTheWidenedCopy) {
  std::mt19937_64 rng(8);
  expect_decode_values_match_gemm<f16>(rng);
}

}  // namespace
}  // namespace linattn::kernels
