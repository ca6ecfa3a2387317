#pragma once
// Reproducible draws of the random projections ω used by the random-feature maps.
#include <cstdint>
#include <random>
#include <vector>

namespace linattn::detail {

// Standard normal numbers from std::mt19937_64 by Box-Muller, written out here so that the stream
// depends only on the seed: std::normal_distribution's algorithm differs between standard libraries.
class NormalStream {
 public:
  explicit NormalStream(uint64_t seed) : engine_(seed) {}
  double next();
  // chi(k): the norm of a k-dim standard normal vector, drawn as exactly that.
  double chi(int64_t k);

 private:
  double uniform_open();  // in (0, 1)
  std::mt19937_64 engine_;
  double spare_ = 0;
  bool has_spare_ = false;
};

// ω: [rows, dim] row-major, entries i.i.d. N(0, 1).
std::vector<double> gaussian_omega(int64_t rows, int64_t dim, uint64_t seed);

// ω: [rows, dim] row-major, block-orthogonal: each block of `dim` consecutive rows is orthogonal
// (Haar-distributed directions: the Q of a QR of a Gaussian matrix, by Gram-Schmidt in fp64) and each
// row's norm is redrawn from chi(dim), so every row is marginally N(0, I) like an i.i.d. row. The
// last block keeps its leading rows when dim does not divide rows.
std::vector<double> orthogonal_omega(int64_t rows, int64_t dim, uint64_t seed);

}  // namespace linattn::detail
