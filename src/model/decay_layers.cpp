// The layers that the decayed kinds (retnet, gla) add around their attention: GLA's log-sigmoid gate
// and the per-head output norm.
#include <algorithm>
#include <cmath>

#include "linattn/model/layers.hpp"

namespace linattn::model {
namespace {
constexpr double kHeadNormEps = 1e-5;
}  // namespace

// g: [n] = logsigmoid(x) / 16
template <class T>
void log_sigmoid_gate_forward(T* g, const T* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const T v = x[i];
    // logsigmoid(v) = min(v, 0) − log1p(exp(−|v|)): no overflow for large |v|.
    g[i] = (std::min(v, T(0)) - std::log1p(std::exp(-std::abs(v)))) / T(kGlaGateNormalizer);
  }
}

// dx: [n] = dg · σ(−x) / 16, σ(−x) = 1 − exp(logsigmoid(x)) = −expm1(16 g)
template <class T>
void log_sigmoid_gate_backward(T* dx, const T* dg, const T* g, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dx[i] = dg[i] * -std::expm1(T(kGlaGateNormalizer) * g[i]) / T(kGlaGateNormalizer);
}

// out: [rows, D] = (inp − mean) · rstd per row
template <class T>
void head_norm_forward(T* out, T* rstd, const T* inp, int64_t rows, int64_t D) {
  for (int64_t r = 0; r < rows; ++r) {
    const T* x = inp + r * D;
    T m = 0;
    for (int64_t d = 0; d < D; ++d) m += x[d];
    m /= T(D);
    T var = 0;
    for (int64_t d = 0; d < D; ++d) var += (x[d] - m) * (x[d] - m);
    var /= T(D);
    const T s = T(1) / std::sqrt(var + T(kHeadNormEps));
    for (int64_t d = 0; d < D; ++d) out[r * D + d] = (x[d] - m) * s;
    rstd[r] = s;
  }
}

// dinp: [rows, D] = rstd · (dout − mean(dout) − out · mean(dout ⊙ out))
template <class T>
void head_norm_backward(T* dinp, const T* dout, const T* out, const T* rstd, int64_t rows, int64_t D) {
  for (int64_t r = 0; r < rows; ++r) {
    const T* dy = dout + r * D;
    const T* y = out + r * D;
    T mean_dy = 0, mean_dy_y = 0;
    for (int64_t d = 0; d < D; ++d) {
      mean_dy += dy[d];
      mean_dy_y += dy[d] * y[d];
    }
    mean_dy /= T(D);
    mean_dy_y /= T(D);
    for (int64_t d = 0; d < D; ++d) dinp[r * D + d] = rstd[r] * (dy[d] - mean_dy - y[d] * mean_dy_y);
  }
}

#define LINATTN_MODEL_DECAY_LAYERS(T)                                          \
  template void log_sigmoid_gate_forward<T>(T*, const T*, int64_t);            \
  template void log_sigmoid_gate_backward<T>(T*, const T*, const T*, int64_t); \
  template void head_norm_forward<T>(T*, T*, const T*, int64_t, int64_t);      \
  template void head_norm_backward<T>(T*, const T*, const T*, const T*, int64_t, int64_t);
LINATTN_MODEL_DECAY_LAYERS(float)
LINATTN_MODEL_DECAY_LAYERS(double)
#undef LINATTN_MODEL_DECAY_LAYERS

}  // namespace linattn::model
