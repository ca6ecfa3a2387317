// The linear passes' tile kernels on their own: kernels::feature_tile (φ of a tile with its column sums
// and its dot products, over ragged widths) against fp64, and the GEMMs' row scaling and prefetching
// (which must not change a bit) against fp64 and against themselves; kernels::running_dots (the causal
// denominators of the distributed forward's finishing pass) against fp64.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/feature_map_elementwise.hpp"
#include "kernels/gemm.hpp"
#include "kernels/rows.hpp"

namespace linattn::kernels {
namespace {

double phi_of(TileMap map, double x) {
  switch (map) {
    case TileMap::elu:
      return x > 0 ? x + 1 : std::exp(x);
    case TileMap::relu:
      return x > 0 ? x : 0;
    default:
      return x;
  }
}

std::vector<float> uniform(size_t n, std::mt19937_64& rng, float lo, float hi) {
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> x(n);
  for (float& v : x) v = u(rng);
  return x;
}

TEST(LinearKernels, FeatureTileMatchesFp64WithSumsAndDots) {
  std::mt19937_64 rng(1);
  for (TileMap map : {TileMap::elu, TileMap::relu, TileMap::identity})
    for (int64_t cols : {1, 15, 16, 17, 59, 64, 100})
      for (int64_t rows : {1, 5, 64}) {
        const int64_t ldx = cols + 3, ldp = padded(cols);
        const std::vector<float> x = uniform(size_t(rows * ldx), rng, -3, 3);
        std::vector<float> phi(size_t(rows * ldp), -7.0f), dots(static_cast<size_t>(rows));
        std::vector<float> sum = uniform(size_t(ldp), rng, -1, 1), dot = uniform(size_t(ldp), rng, -1, 1);
        const std::vector<float> sum0 = sum;
        FeatureTile t;
        t.x = x.data(), t.ldx = ldx, t.phi = phi.data(), t.ldp = ldp, t.rows = rows, t.cols = cols, t.map = map;
        t.sum = sum.data(), t.dot = dot.data(), t.dots = dots.data();
        feature_tile(t);
        for (int64_t c = 0; c < ldp; ++c) {
          double want_sum = sum0[c], scale = std::abs(sum0[c]);
          for (int64_t r = 0; r < rows; ++r) {
            const double want = c < cols ? phi_of(map, x[r * ldx + c]) : 0.0;
            const float got = phi[r * ldp + c];
            if (c >= cols) {
              EXPECT_EQ(got, 0.0f) << "padding lane " << c << " of row " << r;
            } else {
              EXPECT_NEAR(got, want, 4e-7 * std::abs(want) + 1e-38) << "map " << int(map) << " cols " << cols;
            }
            want_sum += want, scale += std::abs(want);
          }
          EXPECT_NEAR(sum[c], want_sum, 1e-6 * scale + 1e-30) << "column sum " << c;
        }
        for (int64_t r = 0; r < rows; ++r) {
          double want = 0, scale = 0;
          for (int64_t c = 0; c < cols; ++c) {
            want += phi_of(map, x[r * ldx + c]) * dot[c];
            scale += std::abs(phi_of(map, x[r * ldx + c]) * dot[c]);
          }
          EXPECT_NEAR(dots[r], want, 1e-6 * scale + 1e-30) << "dot of row " << r;
        }
      }
}

TEST(LinearKernels, GemmRowScaleMatchesFp64) {
  std::mt19937_64 rng(2);
  for (int64_t rows : {1, 6, 7, 64})
    for (int64_t cols : {16, 48, 64, 80}) {
      const int64_t depth = 37, lda = depth + 1, ldb = cols + 16, ldc = cols + 32;
      const std::vector<float> a = uniform(size_t(rows * lda), rng, -1, 1),
                               b = uniform(size_t(depth * ldb), rng, -1, 1);
      const std::vector<float> scale = uniform(size_t(rows), rng, 0.5f, 2.0f);
      std::vector<float> c(size_t(rows * ldc), 9.0f);
      gemm({c.data(), ldc, rows, cols}, plain(a.data(), lda), {b.data(), ldb, depth, cols},
           {.row_scale = scale.data()});
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < cols; ++j) {
          double want = 0, mag = 0;
          for (int64_t k = 0; k < depth; ++k) {
            want += double(a[r * lda + k]) * b[k * ldb + j];
            mag += std::abs(double(a[r * lda + k]) * b[k * ldb + j]);
          }
          EXPECT_NEAR(c[r * ldc + j], scale[r] * want, 1e-6 * scale[r] * mag) << r << "," << j;
        }
      for (int64_t r = 0; r < rows; ++r) EXPECT_EQ(c[r * ldc + cols], 9.0f) << "wrote past the columns";
    }
}

TEST(LinearKernels, RunningDotsMatchFp64) {
  std::mt19937_64 rng(5);
  for (int64_t rows : {1, 7, 63, 256})
    for (int64_t cols : {1, 15, 16, 64, 67}) {
      const int64_t lda = cols + 3, ldb = cols + 5;
      const std::vector<float> a = uniform(size_t(rows * lda), rng, 0, 2), b = uniform(size_t(rows * ldb), rng, 0, 2);
      std::vector<float> z = uniform(size_t(cols), rng, 0, 50), out(size_t(rows), -1.0f);
      std::vector<double> want_z(z.begin(), z.end());
      kernels::running_dots(out.data(), a.data(), lda, b.data(), ldb, z.data(), rows, cols);
      for (int64_t r = 0; r < rows; ++r) {
        double want = 0;
        for (int64_t c = 0; c < cols; ++c) {
          want_z[size_t(c)] += b[size_t(r * ldb + c)];
          want += double(a[size_t(r * lda + c)]) * want_z[size_t(c)];
        }
        EXPECT_NEAR(out[size_t(r)], want, 1e-5 * want) << rows << "×" << cols << " row " << r;
      }
      for (int64_t c = 0; c < cols; ++c) EXPECT_NEAR(z[size_t(c)], want_z[size_t(c)], 1e-5 * want_z[size_t(c)]);
    }
}

// Prefetching is a hint: results are bitwise those of the plain GEMM whatever the rows asked for.
TEST(LinearKernels, PrefetchDoesNotChangeResults) {
  std::mt19937_64 rng(3);
  const int64_t rows = 64, depth = 64, cols = 64;
  const std::vector<float> a = uniform(size_t(rows * depth), rng, -1, 1), b = uniform(size_t(depth * cols), rng, -1, 1);
  const std::vector<float> other = uniform(size_t(4096 * 64), rng, -1, 1);
  std::vector<float> plain(size_t(rows * cols), 0.5f), acc_plain = plain;
  gemm({plain.data(), cols, rows, cols}, {a.data(), depth, 1}, {b.data(), cols, depth, cols});
  gemm({acc_plain.data(), cols, rows, cols}, {a.data(), 1, depth}, {b.data(), cols, depth, cols}, {.accumulate = true});
  // One region, two regions, more lines than the GEMM has steps, a strided region, a write region.
  RowsAhead cases[4];
  cases[0].rows[0] = other.data(), cases[0].ld[0] = 64, cases[0].cols[0] = 64, cases[0].count = 64;
  cases[1] = cases[0], cases[1].rows[1] = other.data() + 64 * 64, cases[1].ld[1] = 128, cases[1].cols[1] = 59;
  cases[1].write[1] = true;
  cases[2] = cases[0], cases[2].count = 4096;
  cases[3] = cases[0], cases[3].ld[0] = 1000, cases[3].count = 200;
  for (const RowsAhead& ahead : cases) {
    std::vector<float> set(plain.size(), 0.5f), acc(plain.size(), 0.5f);
    gemm({set.data(), cols, rows, cols}, {a.data(), depth, 1}, {b.data(), cols, depth, cols}, {.ahead = &ahead});
    gemm({acc.data(), cols, rows, cols}, {a.data(), 1, depth}, {b.data(), cols, depth, cols},
         {.accumulate = true, .ahead = &ahead});
    EXPECT_EQ(0, std::memcmp(set.data(), plain.data(), plain.size() * sizeof(float)));
    EXPECT_EQ(0, std::memcmp(acc.data(), acc_plain.data(), plain.size() * sizeof(float)));
  }
}

}  // namespace
}  // namespace linattn::kernels
