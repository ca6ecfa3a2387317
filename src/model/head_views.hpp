#pragma once
// Head views of the model's row buffers, shared by the attention kinds' layers: part `part` (0 q, 1 k, 2 v) of
// the fused qkv rows as an operator's [B, T, H, C/H], and the fp64 reference's tensors of such a view.
#include <cstdint>

#include "linattn/reference.hpp"
#include "linattn/view.hpp"

namespace linattn::model::detail {

// Head view of part `part` of rows of width row: [B, T, H, C/H].
template <class T>
View4<T> part_view(T* base, int64_t part, int64_t row, int64_t B, int64_t T_, int64_t H, int64_t C) {
  const int64_t hd = C / H;
  return {base + part * C, {B, T_, H, hd}, {T_ * row, row, hd, 1}};
}

// The fp64 reference's tensor of a view, and back.
inline reference::Tensor to_tensor(View4<const double> view) {
  reference::Tensor t(view.extent);
  for (int64_t b = 0; b < view.extent[0]; ++b)
    for (int64_t n = 0; n < view.extent[1]; ++n)
      for (int64_t h = 0; h < view.extent[2]; ++h)
        for (int64_t d = 0; d < view.extent[3]; ++d) t(b, n, h, d) = view(b, n, h, d);
  return t;
}
inline void from_tensor(View4<double> view, const reference::Tensor& t) {
  for (int64_t b = 0; b < view.extent[0]; ++b)
    for (int64_t n = 0; n < view.extent[1]; ++n)
      for (int64_t h = 0; h < view.extent[2]; ++h)
        for (int64_t d = 0; d < view.extent[3]; ++d) view(b, n, h, d) = t(b, n, h, d);
}

}  // namespace linattn::model::detail
