// The encoder classifier's mean pool over each sequence's real tokens, and its backward.
#include <algorithm>

#include "linattn/model/layers.hpp"

namespace linattn::model {
namespace {
// Σ_t w[b, t] (T_ when weights is null).
template <class T>
T weight_sum(const T* weights, int64_t b, int64_t T_) {
  if (!weights) return T(T_);
  T sum = 0;
  for (int64_t t = 0; t < T_; ++t) sum += weights[b * T_ + t];
  return sum;
}
}  // namespace

template <class T>
void mean_pool_forward(T* out, const T* inp, const T* weights, int64_t B, int64_t T_, int64_t C) {
  for (int64_t b = 0; b < B; ++b) {
    T* o = out + b * C;
    std::fill(o, o + C, T(0));
    const T total = weight_sum(weights, b, T_);
    if (total == 0) continue;
    for (int64_t t = 0; t < T_; ++t) {
      const T w = (weights ? weights[b * T_ + t] : T(1)) / total;
      if (w == 0) continue;
      const T* x = inp + (b * T_ + t) * C;
      for (int64_t c = 0; c < C; ++c) o[c] += w * x[c];
    }
  }
}

template <class T>
void mean_pool_backward(T* dinp, const T* dout, const T* weights, int64_t B, int64_t T_, int64_t C) {
  for (int64_t b = 0; b < B; ++b) {
    const T total = weight_sum(weights, b, T_);
    for (int64_t t = 0; t < T_; ++t) {
      const T w = total == 0 ? T(0) : (weights ? weights[b * T_ + t] : T(1)) / total;
      T* d = dinp + (b * T_ + t) * C;
      for (int64_t c = 0; c < C; ++c) d[c] = w * dout[b * C + c];
    }
  }
}

template void mean_pool_forward(float*, const float*, const float*, int64_t, int64_t, int64_t);
template void mean_pool_forward(double*, const double*, const double*, int64_t, int64_t, int64_t);
template void mean_pool_backward(float*, const float*, const float*, int64_t, int64_t, int64_t);
template void mean_pool_backward(double*, const double*, const double*, int64_t, int64_t, int64_t);

}  // namespace linattn::model
