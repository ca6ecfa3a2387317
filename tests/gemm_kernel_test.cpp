// The one GEMM (kernels/gemm.hpp) against a plain fp64 loop over every option — per-row depth ranges,
// row scale, column tails, accumulate or overwrite, both layouts of A — and against itself: each
// element is one fixed-order chain, so re-blocking the call (row by row, column slices, a row's range
// split in two accumulating calls) or prefetching must not change a bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernels/gemm.hpp"

namespace linattn::kernels {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

std::vector<float> uniform(size_t n, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> x(n);
  for (float& v : x) v = u(rng);
  return x;
}

struct Case {
  int64_t rows, cols, depth;
  bool transposed, ranges, accumulate, scale;
};

// Operands of one case: a with NaN outside each row's range, c with NaN past its columns.
struct Operands {
  int64_t ars, acs, ldb, ldc;
  std::vector<float> a, b, c, scale;
  std::vector<int32_t> begin, end;
  Operands(const Case& t, std::mt19937_64& rng)
      : ars(t.transposed ? 1 : t.depth + 3),
        acs(t.transposed ? t.rows + 2 : 1),
        ldb(t.cols + 5),
        ldc(t.cols + 7),
        a(uniform(size_t(t.rows * ars + t.depth * acs + 1), rng)),
        b(uniform(size_t(t.depth * ldb), rng)),
        c(uniform(size_t(t.rows * ldc), rng)),
        scale(uniform(size_t(t.rows), rng)),
        begin(size_t(t.rows), 0),
        end(size_t(t.rows), int32_t(t.depth)) {
    std::uniform_int_distribution<int32_t> pick(0, int32_t(t.depth));
    for (int64_t r = 0; t.ranges && r < t.rows; ++r) {
      if (r % 5 == 1) {  // a causal-diagonal-like staircase next to runs of equal ranges
        begin[r] = begin[r - 1], end[r] = std::min<int32_t>(int32_t(t.depth), end[r - 1] + 1);
        continue;
      }
      const int32_t x = pick(rng), y = pick(rng);
      begin[r] = std::min(x, y), end[r] = std::max(x, y);
    }
    for (int64_t r = 0; r < t.rows; ++r) {
      for (int64_t k = 0; k < t.depth; ++k)
        if (k < begin[r] || k >= end[r]) a[r * ars + k * acs] = kNaN;
      for (int64_t j = t.cols; j < ldc; ++j) c[r * ldc + j] = kNaN;
    }
  }
  GemmOptions options(const Case& t) const {
    return {.accumulate = t.accumulate,
            .row_scale = t.scale ? scale.data() : nullptr,
            .k_begin = t.ranges ? begin.data() : nullptr,
            .k_end = t.ranges ? end.data() : nullptr};
  }
  void run(const Case& t, std::vector<float>& out) const {
    gemm({out.data(), ldc, t.rows, t.cols}, {a.data(), ars, acs}, {b.data(), ldb, t.depth, t.cols}, options(t));
  }
};

const Case kCases[] = {
    {1, 16, 1, false, false, false, false},  {3, 48, 17, false, true, true, false},
    {4, 64, 64, true, true, false, true},    {5, 80, 64, false, false, true, true},
    {64, 144, 33, true, true, true, false},  {64, 64, 64, false, true, false, true},
    {63, 32, 64, true, false, true, false},  {6, 128, 2, false, true, true, true},
    {7, 13, 9, false, false, false, true},   {13, 61, 40, true, true, true, true},
    {9, 3, 5, false, true, false, false},    {12, 100, 0, false, false, true, true},
    {2, 65, 31, false, false, false, false}, {11, 7, 70, true, true, true, false},
};

TEST(Gemm, MatchesFp64OverEveryOption) {
  std::mt19937_64 rng(11);
  for (const Case& t : kCases) {
    SCOPED_TRACE(::testing::Message() << "rows " << t.rows << " cols " << t.cols << " depth " << t.depth
                                      << (t.transposed ? " aᵀ" : "") << (t.ranges ? " ranges" : "")
                                      << (t.accumulate ? " acc" : "") << (t.scale ? " scale" : ""));
    const Operands o(t, rng);
    std::vector<float> c = o.c;
    o.run(t, c);
    for (int64_t r = 0; r < t.rows; ++r) {
      const double s = t.scale ? o.scale[r] : 1.0;
      for (int64_t j = 0; j < t.cols; ++j) {
        double want = t.accumulate ? o.c[r * o.ldc + j] : 0.0, mag = std::abs(want);
        for (int64_t k = o.begin[r]; k < o.end[r]; ++k) {
          const double x = double(o.a[r * o.ars + k * o.acs]) * o.b[k * o.ldb + j];
          want += x, mag += std::abs(x);
        }
        ASSERT_NEAR(c[r * o.ldc + j], s * want, 1e-6 * std::abs(s) * mag + 1e-30) << r << ", " << j;
      }
      for (int64_t j = t.cols; j < o.ldc; ++j) ASSERT_TRUE(std::isnan(c[r * o.ldc + j])) << "wrote column " << j;
    }
  }
}

// Row by row, and in column slices of any width (whole vectors, tails), the bits are those of one call.
TEST(Gemm, BlockingDoesNotChangeBits) {
  std::mt19937_64 rng(12);
  for (const Case& t : kCases) {
    SCOPED_TRACE(::testing::Message() << "rows " << t.rows << " cols " << t.cols << " depth " << t.depth);
    const Operands o(t, rng);
    std::vector<float> whole = o.c, by_rows = o.c, by_cols = o.c;
    o.run(t, whole);
    const GemmOptions opt = o.options(t);
    for (int64_t r = 0; r < t.rows; ++r) {
      GemmOptions one = opt;
      if (one.row_scale) one.row_scale += r;
      if (one.k_begin) one.k_begin += r, one.k_end += r;
      const float* a_r = o.a.empty() ? nullptr : o.a.data() + r * o.ars;  // depth 0: no a (see below)
      gemm({by_rows.data() + r * o.ldc, o.ldc, 1, t.cols}, {a_r, o.ars, o.acs}, {o.b.data(), o.ldb, t.depth, t.cols},
           one);
    }
    for (int64_t j = 0, w = 3; j < t.cols; j += w, w = w * 2 + 1) {
      const int64_t n = std::min(w, t.cols - j);
      // A depth-0 case has no b at all (data() may be null: no offset into it).
      const float* b_j = o.b.empty() ? nullptr : o.b.data() + j;
      gemm({by_cols.data() + j, o.ldc, t.rows, n}, {o.a.data(), o.ars, o.acs}, {b_j, o.ldb, t.depth, n}, opt);
    }
    EXPECT_EQ(0, std::memcmp(whole.data(), by_rows.data(), whole.size() * sizeof(float))) << "row by row";
    EXPECT_EQ(0, std::memcmp(whole.data(), by_cols.data(), whole.size() * sizeof(float))) << "column slices";
  }
}

// A chain split at any depth into an overwrite then an accumulate gives the bits of the whole chain:
// the accumulate form continues the chain from c (and the scale, applied last, goes with the second).
TEST(Gemm, AccumulateContinuesTheChain) {
  std::mt19937_64 rng(13);
  const int64_t rows = 10, cols = 40, depth = 50;
  const std::vector<float> a = uniform(size_t(rows * depth), rng), b = uniform(size_t(depth * cols), rng);
  const std::vector<float> scale = uniform(size_t(rows), rng);
  std::vector<float> whole(size_t(rows * cols));
  gemm({whole.data(), cols, rows, cols}, plain(a.data(), depth), {b.data(), cols, depth, cols},
       {.row_scale = scale.data()});
  for (int64_t split : {0, 1, 17, 49, 50}) {
    std::vector<float> two(whole.size(), kNaN);
    std::vector<int32_t> lo(rows, 0), mid(rows, int32_t(split)), hi(rows, int32_t(depth));
    gemm({two.data(), cols, rows, cols}, plain(a.data(), depth), {b.data(), cols, depth, cols},
         {.k_begin = lo.data(), .k_end = mid.data()});
    gemm({two.data(), cols, rows, cols}, plain(a.data(), depth), {b.data(), cols, depth, cols},
         {.accumulate = true, .row_scale = scale.data(), .k_begin = mid.data(), .k_end = hi.data()});
    EXPECT_EQ(0, std::memcmp(whole.data(), two.data(), whole.size() * sizeof(float))) << "split at " << split;
  }
}

// Overwrite ignores c's old values (NaN included); an empty range gives 0 (overwrite) or c · scale.
TEST(Gemm, OverwriteAndEmptyRanges) {
  const int64_t rows = 7, cols = 19, depth = 4;
  std::vector<float> a(size_t(rows * depth), 1.0f), b(size_t(depth * cols), 2.0f), scale(rows, 3.0f);
  std::vector<int32_t> empty(rows, 2);
  std::vector<float> c(size_t(rows * cols), kNaN);
  gemm({c.data(), cols, rows, cols}, plain(a.data(), depth), {b.data(), cols, depth, cols});
  for (float x : c) ASSERT_EQ(x, 8.0f);
  gemm({c.data(), cols, rows, cols}, plain(a.data(), depth), {b.data(), cols, depth, cols},
       {.accumulate = true, .row_scale = scale.data(), .k_begin = empty.data(), .k_end = empty.data()});
  for (float x : c) ASSERT_EQ(x, 24.0f);
  gemm({c.data(), cols, rows, cols}, plain(a.data(), depth), {b.data(), cols, depth, cols},
       {.k_begin = empty.data(), .k_end = empty.data()});
  for (float x : c) ASSERT_EQ(x, 0.0f);
}

// Prefetching is a hint: with any rows to fetch (tails and ranges included) the bits are unchanged.
TEST(Gemm, PrefetchLeavesBitsUnchanged) {
  std::mt19937_64 rng(14);
  const std::vector<float> other = uniform(size_t(512 * 64), rng);
  RowsAhead ahead;
  ahead.rows[0] = other.data(), ahead.ld[0] = 64, ahead.cols[0] = 61, ahead.count = 300;
  ahead.rows[1] = other.data() + 64, ahead.ld[1] = 100, ahead.cols[1] = 17, ahead.write[1] = true;
  for (const Case& t : kCases) {
    const Operands o(t, rng);
    std::vector<float> plain_c = o.c, fetched = o.c;
    o.run(t, plain_c);
    GemmOptions opt = o.options(t);
    opt.ahead = &ahead;
    gemm({fetched.data(), o.ldc, t.rows, t.cols}, {o.a.data(), o.ars, o.acs}, {o.b.data(), o.ldb, t.depth, t.cols},
         opt);
    EXPECT_EQ(0, std::memcmp(plain_c.data(), fetched.data(), plain_c.size() * sizeof(float)))
        << "rows " << t.rows << " cols " << t.cols;
  }
}

}  // namespace
}  // namespace linattn::kernels
