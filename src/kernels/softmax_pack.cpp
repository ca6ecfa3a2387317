// Packing and unpacking of softmax attention tiles (see the header).
#include "kernels/softmax_pack.hpp"

#include <algorithm>

namespace linattn::kernels {

void softmax_pack_rows(float* dst, int64_t ld, int64_t rows, ConstTensorView x, int64_t b, int64_t h, int64_t n0,
                       int64_t count, float factor) {
  const int64_t dim = x.dim();
  for (int64_t r = 0; r < rows; ++r) {
    float* out = dst + r * ld;
    int64_t c = 0;
    if (r < count) {
      const float* in = x.row(b, n0 + r, h);
      if (x.stride[3] == 1) {  // the usual layouts: a loop the compiler vectorises
        for (; c < dim; ++c) out[c] = factor * in[c];
      } else {
        for (; c < dim; ++c) out[c] = factor * in[c * x.stride[3]];
      }
    }
    std::fill(out + c, out + ld, 0.0f);
  }
}

void softmax_pack_rows_transposed(float* dst, int64_t ld, ConstTensorView x, int64_t b, int64_t h, int64_t n0,
                                  int64_t count) {
  const int64_t dim = x.dim();
  for (int64_t c = 0; c < dim; ++c) std::fill(dst + c * ld + count, dst + (c + 1) * ld, 0.0f);
  for (int64_t r = 0; r < count; ++r) {  // reads each row once (measured faster than column order)
    const float* in = x.row(b, n0 + r, h);
    for (int64_t c = 0; c < dim; ++c) dst[c * ld + r] = in[c * x.stride[3]];
  }
}

void softmax_unpack_rows(TensorView x, const float* src, int64_t ld, int64_t b, int64_t h, int64_t n0, int64_t count,
                         float factor) {
  for (int64_t r = 0; r < count; ++r) {
    float* out = x.row(b, n0 + r, h);
    if (x.stride[3] == 1) {
      for (int64_t c = 0; c < x.dim(); ++c) out[c] = factor * src[r * ld + c];
    } else {
      for (int64_t c = 0; c < x.dim(); ++c) out[c * x.stride[3]] = factor * src[r * ld + c];
    }
  }
}

}  // namespace linattn::kernels
