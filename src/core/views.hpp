#pragma once
// Part of a tensor view, for the drivers that run a pass over some of the tokens (the causal
// cross-attention's prefix, the distributed shards' segments).
#include <cstdint>

#include "linattn/view.hpp"

namespace linattn::detail {

// Tokens [begin, begin + count) of x ([B, N, H, D], any strides): a view of the same memory.
template <class T>
View4<T> seq_slice(View4<T> x, int64_t begin, int64_t count) {
  View4<T> s = x;
  s.data += begin * x.stride[1];
  s.extent[1] = count;
  return s;
}

}  // namespace linattn::detail
