// The transformer's dense layers: matmul, layernorm, GELU, residual, embedding, cross-entropy.
#include "linattn/model/layers.hpp"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <numbers>
#include <type_traits>

#include "kernels/gelu.hpp"

namespace linattn::model {
namespace {

// c: [M, N] = alpha · op(a) · op(b) + beta · c, row-major.
void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* a, int64_t lda, const float* b,
          int64_t ldb, float beta, float* c, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, int(M), int(N), int(K),
              alpha, a, int(lda), b, int(ldb), beta, c, int(ldc));
}
void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha, const double* a, int64_t lda,
          const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, int(M), int(N), int(K),
              alpha, a, int(lda), b, int(ldb), beta, c, int(ldc));
}

constexpr double kLayerNormEps = 1e-5;
// Below this many elements a parallel region costs more than it saves.
constexpr int64_t kParallelMin = 1 << 16;

}  // namespace

template <class T>
void matmul_forward(T* out, const T* inp, const T* w, const T* bias, int64_t N, int64_t C, int64_t OC) {
  for (int64_t i = 0; i < N; ++i)
    for (int64_t o = 0; o < OC; ++o) out[i * OC + o] = bias ? bias[o] : T(0);
  gemm(false, false, N, OC, C, T(1), inp, C, w, OC, T(1), out, OC);
}

template <class T>
void matmul_backward(T* dinp, T* dw, T* dbias, const T* dout, const T* inp, const T* w, int64_t N, int64_t C,
                     int64_t OC) {
  // out = inp · w + bias
  if (dinp) gemm(false, true, N, C, OC, T(1), dout, OC, w, OC, T(0), dinp, C);
  gemm(true, false, C, OC, N, T(1), inp, C, dout, OC, T(1), dw, OC);
  if (dbias)
    for (int64_t i = 0; i < N; ++i)
      for (int64_t o = 0; o < OC; ++o) dbias[o] += dout[i * OC + o];
}

template <class T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* inp, const T* gamma, const T* beta, int64_t N, int64_t C) {
#pragma omp parallel for schedule(static) if (N * C > kParallelMin)
  for (int64_t i = 0; i < N; ++i) {
    const T* x = inp + i * C;
    T m = 0;
    for (int64_t c = 0; c < C; ++c) m += x[c];
    m /= T(C);
    T var = 0;
    for (int64_t c = 0; c < C; ++c) var += (x[c] - m) * (x[c] - m);
    var /= T(C);
    const T s = T(1) / std::sqrt(var + T(kLayerNormEps));
    for (int64_t c = 0; c < C; ++c) out[i * C + c] = (x[c] - m) * s * gamma[c] + beta[c];
    mean[i] = m;
    rstd[i] = s;
  }
}

template <class T>
void layernorm_backward(T* dinp, T* dgamma, T* dbeta, const T* dout, const T* inp, const T* gamma, const T* mean,
                        const T* rstd, int64_t N, int64_t C) {
  // out = norm · gamma + beta, norm = (inp − mean) · rstd
  for (int64_t i = 0; i < N; ++i) {
    const T* x = inp + i * C;
    const T* dy = dout + i * C;
    T dnorm_mean = 0, dnorm_norm_mean = 0;
    for (int64_t c = 0; c < C; ++c) {
      const T norm = (x[c] - mean[i]) * rstd[i];
      dnorm_mean += dy[c] * gamma[c];
      dnorm_norm_mean += dy[c] * gamma[c] * norm;
    }
    dnorm_mean /= T(C);
    dnorm_norm_mean /= T(C);
    for (int64_t c = 0; c < C; ++c) {
      const T norm = (x[c] - mean[i]) * rstd[i];
      dgamma[c] += norm * dy[c];
      dbeta[c] += dy[c];
      dinp[i * C + c] += (dy[c] * gamma[c] - dnorm_mean - norm * dnorm_norm_mean) * rstd[i];
    }
  }
}

namespace {
template <class T>
constexpr T kGeluScale = T(0.7978845608028654);  // √(2/π)
constexpr int64_t kGeluBlock = 4096;
}  // namespace

// fp32: the vector-tanh versions of kernels/gelu.hpp; T = double below is their scalar spec.
template <class T>
void gelu_forward(T* out, const T* inp, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    // Threads split fixed ranges, so each element gets the same arithmetic for any thread count.
#pragma omp parallel for schedule(static) if (n > kParallelMin)
    for (int64_t i = 0; i < n; i += kGeluBlock) simd::gelu_forward(out + i, inp + i, std::min(kGeluBlock, n - i));
  } else {
    for (int64_t i = 0; i < n; ++i) {
      const T x = inp[i];
      out[i] = T(0.5) * x * (T(1) + std::tanh(kGeluScale<T> * (x + T(0.044715) * x * x * x)));
    }
  }
}

template <class T>
void gelu_backward(T* dinp, const T* dout, const T* inp, int64_t n) {
  // out = ½ x (1 + tanh(u)), u = √(2/π) (x + 0.044715 x³)
  if constexpr (std::is_same_v<T, float>) {
#pragma omp parallel for schedule(static) if (n > kParallelMin)
    for (int64_t i = 0; i < n; i += kGeluBlock)
      simd::gelu_backward(dinp + i, dout + i, inp + i, std::min(kGeluBlock, n - i));
  } else {
    for (int64_t i = 0; i < n; ++i) {
      const T x = inp[i];
      const T u = kGeluScale<T> * (x + T(0.044715) * x * x * x);
      const T th = std::tanh(u);
      const T du = kGeluScale<T> * (T(1) + T(3) * T(0.044715) * x * x);
      dinp[i] = dout[i] * (T(0.5) * (T(1) + th) + T(0.5) * x * (T(1) - th * th) * du);
    }
  }
}

template <class T>
void residual_forward(T* out, const T* a, const T* b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

template <class T>
void sinusoid_position(T* pe, int64_t position, int64_t C) {
  // pe[2i] = sin(p / 10000^(2i/C)), pe[2i+1] = cos(same); in fp64 so that positions near 64K stay exact.
  for (int64_t c = 0; c < C; ++c) {
    const double frequency = std::pow(10000.0, -double(c - c % 2) / double(C));
    const double angle = double(position) * frequency;
    pe[c] = T(c % 2 == 0 ? std::sin(angle) : std::cos(angle));
  }
}

template <class T>
void embedding_forward(T* out, const int32_t* tokens, const T* wte, int64_t B, int64_t T_, int64_t C,
                       int64_t position0) {
  for (int64_t t = 0; t < T_; ++t) {
    T* first = out + t * C;  // row (0, t) holds the position's encoding, copied to every batch
    sinusoid_position(first, position0 + t, C);
    for (int64_t b = B - 1; b >= 0; --b) {
      T* row = out + (b * T_ + t) * C;
      const T* e = wte + int64_t(tokens[b * T_ + t]) * C;
      for (int64_t c = 0; c < C; ++c) row[c] = first[c] + e[c];
    }
  }
}

template <class T>
void embedding_backward(T* dwte, const T* dout, const int32_t* tokens, int64_t B, int64_t T_, int64_t C) {
  for (int64_t i = 0; i < B * T_; ++i) {
    T* d = dwte + int64_t(tokens[i]) * C;
    for (int64_t c = 0; c < C; ++c) d[c] += dout[i * C + c];
  }
}

template <class T>
T cross_entropy_forward(T* probs, const T* logits, const int32_t* targets, const T* weights, int64_t N, int64_t V,
                        double total) {
  double loss = 0, here = 0;
  for (int64_t i = 0; i < N; ++i) {
    const T* x = logits + i * V;
    T* p = probs + i * V;
    T max = x[0];
    for (int64_t v = 1; v < V; ++v) max = std::max(max, x[v]);
    T sum = 0;
    for (int64_t v = 0; v < V; ++v) sum += p[v] = std::exp(x[v] - max);
    for (int64_t v = 0; v < V; ++v) p[v] /= sum;
    const double w = weights ? double(weights[i]) : 1.0;
    if (w == 0) continue;
    // −log p[target] = log Σ exp(x − max) − (x[target] − max), without rounding p first
    loss += w * (std::log(double(sum)) - double(x[targets[i]] - max));
    here += w;
  }
  if (total == 0) total = here;
  return total > 0 ? T(loss / total) : T(0);
}

template <class T>
void cross_entropy_backward(T* dlogits, const T* probs, const int32_t* targets, const T* weights, int64_t N, int64_t V,
                            double total) {
  // loss = Σ_i w_i · −log probs[i, targets[i]] / total
  if (total == 0)
    for (int64_t i = 0; i < N; ++i) total += weights ? double(weights[i]) : 1.0;
  for (int64_t i = 0; i < N; ++i) {
    const T scale = total > 0 ? T((weights ? double(weights[i]) : 1.0) / total) : T(0);
    for (int64_t v = 0; v < V; ++v)
      dlogits[i * V + v] = scale * (probs[i * V + v] - (v == int64_t(targets[i]) ? T(1) : T(0)));
  }
}

#define LINATTN_MODEL_LAYERS(T)                                                                                        \
  template void matmul_forward<T>(T*, const T*, const T*, const T*, int64_t, int64_t, int64_t);                        \
  template void matmul_backward<T>(T*, T*, T*, const T*, const T*, const T*, int64_t, int64_t, int64_t);               \
  template void layernorm_forward<T>(T*, T*, T*, const T*, const T*, const T*, int64_t, int64_t);                      \
  template void layernorm_backward<T>(T*, T*, T*, const T*, const T*, const T*, const T*, const T*, int64_t, int64_t); \
  template void gelu_forward<T>(T*, const T*, int64_t);                                                                \
  template void gelu_backward<T>(T*, const T*, const T*, int64_t);                                                     \
  template void residual_forward<T>(T*, const T*, const T*, int64_t);                                                  \
  template void sinusoid_position<T>(T*, int64_t, int64_t);                                                            \
  template void embedding_forward<T>(T*, const int32_t*, const T*, int64_t, int64_t, int64_t, int64_t);                \
  template void embedding_backward<T>(T*, const T*, const int32_t*, int64_t, int64_t, int64_t);                        \
  template T cross_entropy_forward<T>(T*, const T*, const int32_t*, const T*, int64_t, int64_t, double);               \
  template void cross_entropy_backward<T>(T*, const T*, const int32_t*, const T*, int64_t, int64_t, double);
LINATTN_MODEL_LAYERS(float)
LINATTN_MODEL_LAYERS(double)
#undef LINATTN_MODEL_LAYERS

}  // namespace linattn::model
