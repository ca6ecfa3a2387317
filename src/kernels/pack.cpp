// Packing and unpacking of tiles (see pack.hpp): plain loops on contiguous rows, which the compiler
// vectorises; the strided ones element by element.
#include "kernels/pack.hpp"

#include <algorithm>
#include <cstring>
#include <span>
#include <vector>

namespace linattn::kernels {

void pack_rows(Tile dst, HeadRows<const float> src, int64_t n0, int64_t valid, float factor) {
  valid = std::clamp<int64_t>(valid, 0, dst.rows);
  // One stretch both sides (a token's side-by-side heads): one copy, not a call per row (a decode step
  // packs three rows a head every token, and those calls cost it 8%).
  if (src.col == 1 && src.row == dst.cols && dst.ld == dst.cols && factor == 1.0f && valid > 0) {
    std::memcpy(dst.data, src.at(n0), size_t(valid * dst.cols) * sizeof(float));
    std::fill(dst.row(valid), dst.row(dst.rows), 0.0f);
    return;
  }
  for (int64_t r = 0; r < valid; ++r) {
    const float* in = src.at(n0 + r);
    float* out = dst.row(r);
    if (src.col == 1 && factor == 1.0f) {
      std::memcpy(out, in, size_t(dst.cols) * sizeof(float));
    } else if (src.col == 1) {
      for (int64_t c = 0; c < dst.cols; ++c) out[c] = factor * in[c];
    } else {
      for (int64_t c = 0; c < dst.cols; ++c) out[c] = factor * in[c * src.col];
    }
    std::fill(out + dst.cols, out + dst.ld, 0.0f);
  }
  std::fill(dst.row(valid), dst.row(dst.rows), 0.0f);
}

template <HalfType H>
void pack_rows(Tile dst, HeadRows<const H> src, int64_t n0, int64_t valid, float factor) {
  valid = std::clamp<int64_t>(valid, 0, dst.rows);
  if (src.col == 1 && src.row == dst.cols && dst.ld == dst.cols && factor == 1.0f) {  // one stretch both sides
    const size_t n = size_t(valid * dst.cols);
    convert(std::span<float>(dst.data, n), std::span<const H>(src.at(n0), n));
    std::fill(dst.row(valid), dst.row(dst.rows), 0.0f);
    return;
  }
  std::vector<H> gathered(src.col == 1 ? 0 : size_t(dst.cols));
  for (int64_t r = 0; r < valid; ++r) {
    const H* in = src.at(n0 + r);
    if (src.col != 1) {
      for (int64_t c = 0; c < dst.cols; ++c) gathered[size_t(c)] = in[c * src.col];
      in = gathered.data();
    }
    float* out = dst.row(r);
    convert(std::span<float>(out, size_t(dst.cols)), std::span<const H>(in, size_t(dst.cols)));
    if (factor != 1.0f)
      for (int64_t c = 0; c < dst.cols; ++c) out[c] *= factor;
    std::fill(out + dst.cols, out + dst.ld, 0.0f);
  }
  std::fill(dst.row(valid), dst.row(dst.rows), 0.0f);
}
template void pack_rows<bf16>(Tile, HeadRows<const bf16>, int64_t, int64_t, float);
template void pack_rows<f16>(Tile, HeadRows<const f16>, int64_t, int64_t, float);

template <HalfType H>
void unpack_rows(HeadRows<H> dst, int64_t n0, ConstTile src) {
  std::vector<H> rounded(dst.col == 1 ? 0 : size_t(src.cols));
  for (int64_t r = 0; r < src.rows; ++r) {
    H* out = dst.at(n0 + r);
    const std::span<const float> in(src.row(r), size_t(src.cols));
    if (dst.col == 1) {
      convert(std::span<H>(out, size_t(src.cols)), in);
    } else {  // round the row, then scatter it
      convert(std::span<H>(rounded), in);
      for (int64_t c = 0; c < src.cols; ++c) out[c * dst.col] = rounded[size_t(c)];
    }
  }
}
template void unpack_rows<bf16>(HeadRows<bf16>, int64_t, ConstTile);
template void unpack_rows<f16>(HeadRows<f16>, int64_t, ConstTile);

void pack_rows_transposed(Tile dst, HeadRows<const float> src, int64_t n0) {
  for (int64_t c = 0; c < dst.rows; ++c) std::fill(dst.row(c) + dst.cols, dst.row(c) + dst.ld, 0.0f);
  for (int64_t r = 0; r < dst.cols; ++r) {  // reads each row once (measured faster than column order)
    const float* in = src.at(n0 + r);
    for (int64_t c = 0; c < dst.rows; ++c) dst.data[c * dst.ld + r] = in[c * src.col];
  }
}

void unpack_rows(HeadRows<float> dst, int64_t n0, ConstTile src, int64_t valid, float factor) {
  valid = std::clamp<int64_t>(valid, 0, src.rows);
  if (dst.col == 1 && dst.row == src.cols && src.ld == src.cols && factor == 1.0f && valid == src.rows) {
    if (valid > 0) std::memcpy(dst.at(n0), src.data, size_t(valid * src.cols) * sizeof(float));
    return;
  }
  for (int64_t r = 0; r < src.rows; ++r) {
    float* out = dst.at(n0 + r);
    const float* in = src.row(r);
    if (r >= valid) {
      for (int64_t c = 0; c < src.cols; ++c) out[c * dst.col] = 0.0f;
    } else if (dst.col == 1 && factor == 1.0f) {
      std::memcpy(out, in, size_t(src.cols) * sizeof(float));
    } else if (dst.col == 1) {
      for (int64_t c = 0; c < src.cols; ++c) out[c] = factor * in[c];
    } else {
      for (int64_t c = 0; c < src.cols; ++c) out[c * dst.col] = factor * in[c];
    }
  }
}

void add_rows(HeadRows<float> dst, int64_t n0, ConstTile src) {
  for (int64_t r = 0; r < src.rows; ++r) {
    float* out = dst.at(n0 + r);
    const float* in = src.row(r);
    for (int64_t c = 0; c < src.cols; ++c) out[c * dst.col] += in[c];
  }
}

}  // namespace linattn::kernels
