#pragma once
// The reproducible draws of the random projections ω used by the random-feature maps, from the one
// generator (linattn/random.hpp).
#include <cstdint>
#include <vector>

#include "linattn/random.hpp"

namespace linattn::detail {

// ω: [rows, dim] row-major, entries i.i.d. N(0, 1).
std::vector<double> gaussian_omega(int64_t rows, int64_t dim, uint64_t seed);

// ω: [rows, dim] row-major, block-orthogonal: each block of `dim` consecutive rows is orthogonal
// (Haar-distributed directions: the Q of a QR of a Gaussian matrix, by Gram-Schmidt in fp64) and each
// row's norm is redrawn from chi(dim), so every row is marginally N(0, I) like an i.i.d. row. The
// last block keeps its leading rows when dim does not divide rows.
std::vector<double> orthogonal_omega(int64_t rows, int64_t dim, uint64_t seed);

}  // namespace linattn::detail
