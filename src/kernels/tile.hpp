#pragma once
// The argument types of every kernel: a row-major tile {pointer, leading dimension, rows, cols}, the
// one pad constant its rows are rounded up to, and a strided operand for products that read a tile
// or its transpose without a copy.
#include <cstdint>

namespace linattn::kernels {

// Row pitch granule of packed tiles: 16 floats (one AVX-512 vector, two AVX2 vectors).
inline constexpr int64_t kPad = 16;
inline constexpr int64_t padded(int64_t n) { return (n + kPad - 1) / kPad * kPad; }

// rows × cols floats, row r at data + r·ld (ld ≥ cols).
template <class T>
struct TileOf {
  T* data = nullptr;
  int64_t ld = 0, rows = 0, cols = 0;
  T* row(int64_t r) const { return data + r * ld; }
  operator TileOf<const T>() const { return {data, ld, rows, cols}; }  // NOLINT: a tile is readable
};
using Tile = TileOf<float>;
using ConstTile = TileOf<const float>;

// Element (r, k) at data[r·row + k·col]: {p, ld, 1} reads a row-major matrix, {p, 1, ld} its transpose.
struct Strided {
  const float* data = nullptr;
  int64_t row = 0, col = 0;
};
inline Strided plain(const float* data, int64_t ld) { return {data, ld, 1}; }
inline Strided transposed(const float* data, int64_t ld) { return {data, 1, ld}; }

}  // namespace linattn::kernels
