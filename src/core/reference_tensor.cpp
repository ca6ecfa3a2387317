#include "linattn/reference.hpp"

namespace linattn::reference {

Tensor::Tensor(std::array<int64_t, 4> extent_)
    : extent(extent_), data(size_t(extent_[0] * extent_[1] * extent_[2] * extent_[3]), 0.0) {}

Tensor to_double(ConstTensorView x) {
  Tensor t(x.extent);
  for (int64_t b = 0; b < x.extent[0]; ++b)
    for (int64_t n = 0; n < x.extent[1]; ++n)
      for (int64_t h = 0; h < x.extent[2]; ++h)
        for (int64_t d = 0; d < x.extent[3]; ++d) t(b, n, h, d) = x(b, n, h, d);
  return t;
}

}  // namespace linattn::reference
