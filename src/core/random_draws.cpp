#include "core/random_draws.hpp"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <numbers>

namespace linattn::detail {

std::vector<double> gaussian_omega(int64_t rows, int64_t dim, uint64_t seed) {
  Random normal(seed);
  std::vector<double> omega(size_t(rows * dim));
  for (double& w : omega) w = normal.normal();
  return omega;
}

namespace {
// Rows of g: [n, n] row-major, orthonormalised in order by Gram-Schmidt, each projection pass done
// twice ("twice is enough", Giraud et al. 2005) so that they are orthogonal to rounding. Row r is
// then the r-th row of Q in g = R Q with R lower triangular and positive on its diagonal, which
// makes Q Haar-distributed. Our own loop, not LAPACK's dgeqrf: OpenBLAS's result changed with its
// thread count, and the draws must not.
void orthonormalise_rows(std::vector<double>& g, int64_t n) {
  for (int64_t r = 0; r < n; ++r) {
    double* row = g.data() + r * n;
    for (int pass = 0; pass < 2; ++pass)
      for (int64_t i = 0; i < r; ++i) {
        const double* done = g.data() + i * n;
        double dot = 0;
        for (int64_t d = 0; d < n; ++d) dot += done[d] * row[d];
        for (int64_t d = 0; d < n; ++d) row[d] -= dot * done[d];
      }
    double norm = 0;
    for (int64_t d = 0; d < n; ++d) norm += row[d] * row[d];
    norm = std::sqrt(norm);
    assert(norm > 0);  // a Gaussian block is singular with probability 0
    for (int64_t d = 0; d < n; ++d) row[d] /= norm;
  }
}
}  // namespace

std::vector<double> orthogonal_omega(int64_t rows, int64_t dim, uint64_t seed) {
  Random normal(seed);
  std::vector<double> omega(size_t(rows * dim));
  std::vector<double> block(size_t(dim * dim));
  for (int64_t first = 0; first < rows; first += dim) {
    for (double& g : block) g = normal.normal();
    orthonormalise_rows(block, dim);
    // Each direction scaled to a chi(dim) norm, the norm of a Gaussian row.
    for (int64_t r = 0; r < std::min(dim, rows - first); ++r) {
      const double norm = normal.chi(dim);
      for (int64_t d = 0; d < dim; ++d) omega[size_t((first + r) * dim + d)] = norm * block[size_t(r * dim + d)];
    }
  }
  return omega;
}

}  // namespace linattn::detail
