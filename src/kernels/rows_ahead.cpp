#include "kernels/rows_ahead.hpp"

#include <algorithm>
#include <utility>

namespace linattn::kernels {
namespace {

// n rows (clamped to x's sequence from n0) of x and y (y may be empty); first(v, n) gives a view's
// first row and its pitch. A view whose rows are not contiguous is left out.
template <class First>
RowsAhead rows_of(ConstTensorView x, ConstTensorView y, bool for_write, int64_t n0, int64_t n, First first) {
  RowsAhead a;
  n = std::min(n, x.seq() - n0);
  if (n <= 0) return a;
  const ConstTensorView xy[2] = {x, y};
  int region = 0;
  for (int i = 0; i < 2; ++i) {
    if (!xy[i].data || xy[i].stride[3] != 1) continue;
    const auto [row, pitch] = first(xy[i], n);
    a.rows[region] = row, a.ld[region] = pitch, a.cols[region] = xy[i].dim();
    a.write[region] = for_write && i == 1;
    ++region;
  }
  a.count = n;
  return a;
}

}  // namespace

RowsAhead head_rows_ahead(ConstTensorView x, ConstTensorView y, bool for_write, int64_t b, int64_t h, int64_t n0,
                          int64_t n) {
  return rows_of(x, y, for_write, n0, n, [&](ConstTensorView z, int64_t) {
    return std::pair{z.data + b * z.stride[0] + h * z.stride[2] + n0 * z.stride[1], z.stride[1]};
  });
}

bool tokens_dense(ConstTensorView x) {
  return x.stride[3] == 1 && x.stride[2] == x.dim() && x.stride[1] == x.heads() * x.dim();
}

RowsAhead dense_part_ahead(ConstTensorView x, ConstTensorView y, bool for_write, int64_t b, int64_t n0, int64_t n,
                           int64_t part) {
  return rows_of(x, y, for_write, n0, n, [&](ConstTensorView z, int64_t rows) {
    return std::pair{z.data + b * z.stride[0] + n0 * z.stride[1] + part * rows * z.dim(), z.dim()};
  });
}

}  // namespace linattn::kernels
