#pragma once
// Copies between the strided rows of one head of a [B, N, H, D] view and the contiguous, zero-padded
// tiles the kernels work on (any layout looks the same to them once packed). Single-threaded.
#include <cstdint>
#include <type_traits>

#include "kernels/tile.hpp"
#include "linattn/half.hpp"
#include "linattn/view.hpp"

namespace linattn::kernels {

// The rows of one (b, h) head of a [B, N, H, D] view: element (n, d) at data[n·row + d·col].
template <class T>
struct HeadRows {
  T* data;
  int64_t row, col;
  T* at(int64_t n) const { return data + n * row; }
};
template <class T>
HeadRows<T> head_rows(View4<T> x, int64_t b, int64_t h) {
  return {x.data + b * x.stride[0] + h * x.stride[2], x.stride[1], x.stride[3]};
}
// Token n of batch row b of x with its heads [h, H) as the rows: element (r, d) is x(b, n, h + r, d). A decode
// step packs one token of a block of heads in one call.
template <class T>
HeadRows<T> token_rows(View4<T> x, int64_t b, int64_t n, int64_t h) {
  return {x.data + b * x.stride[0] + n * x.stride[1] + h * x.stride[2], x.stride[2], x.stride[3]};
}

// dst[r, c] = factor · src(n0 + r, c) for r < valid, c < dst.cols; 0 in the rows valid..dst.rows and
// the columns dst.cols..dst.ld (valid is clamped to [0, dst.rows]).
void pack_rows(Tile dst, HeadRows<const float> src, int64_t n0, int64_t valid, float factor = 1.0f);
// The same from bf16 or f16 rows, widened as they are packed (no fp32 copy of the whole view).
template <HalfType H>
void pack_rows(Tile dst, HeadRows<const H> src, int64_t n0, int64_t valid, float factor = 1.0f);
// Asks for rows [n0, n0 + rows) of src (cols elements each, fp32 or half) to be fetched into the caches:
// what a pass will pack next, while it works on what it packed last. Rows whose elements are strided are
// left out.
template <class T>
void prefetch_rows(HeadRows<const T> src, int64_t n0, int64_t rows, int64_t cols) {
  if (src.col != 1) return;
  for (int64_t r = 0; r < rows; ++r) {
    const char* row = reinterpret_cast<const char*>(src.at(n0 + r));
    for (int64_t byte = 0; byte < cols * int64_t(sizeof(T)); byte += 64) __builtin_prefetch(row + byte, 0, 2);
  }
}
// dst[c, r] = src(n0 + r, c) for c < dst.rows, r < dst.cols; 0 in the columns dst.cols..dst.ld.
void pack_rows_transposed(Tile dst, HeadRows<const float> src, int64_t n0);
// dst(n0 + r, c) = factor · src[r, c] for r < valid, 0 for valid ≤ r < src.rows; c < src.cols.
void unpack_rows(HeadRows<float> dst, int64_t n0, ConstTile src, int64_t valid, float factor = 1.0f);
// dst(n0 + r, c) += src[r, c] for r < src.rows, c < src.cols.
void add_rows(HeadRows<float> dst, int64_t n0, ConstTile src);
// dst(n0 + r, c) = src[r, c] rounded to nearest even, for r < src.rows, c < src.cols (bf16 or f16 rows).
template <HalfType H>
void unpack_rows(HeadRows<H> dst, int64_t n0, ConstTile src);
// dst(n0 + r, c) = src[r, c] for r < src.rows, c < src.cols, in rows of either storage (half: rounded to
// nearest even): a chunk's outputs.
template <class T>
void store_rows(HeadRows<T> dst, int64_t n0, ConstTile src) {
  if constexpr (std::is_same_v<T, float>)
    unpack_rows(dst, n0, src, src.rows);
  else
    unpack_rows(dst, n0, src);
}
// One element as fp32, of either storage, and one fp32 value as T (half: rounded to nearest even).
inline float widened(float x) { return x; }
template <HalfType H>
float widened(H x) {
  return to_float(x);
}
template <class T>
T narrowed(float x) {
  if constexpr (std::is_same_v<T, bf16>)
    return to_bf16(x);
  else if constexpr (std::is_same_v<T, f16>)
    return to_f16(x);
  else
    return x;
}

}  // namespace linattn::kernels
