// The layers of the delta kinds (deltanet, gated_deltanet, kda): β, the log decay of Gated DeltaNet
// and KDA, and the attention itself on the delta rule (delta.hpp). float runs the chunked operator;
// double runs the fp64 token-by-token oracle (for the gradient tests).
#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "linattn/delta.hpp"
#include "linattn/model/layers.hpp"
#include "linattn/reference.hpp"
#include "model/head_views.hpp"

namespace linattn::model {
namespace {

using detail::from_tensor;
using detail::to_tensor;

// softplus(x) = log(1 + eˣ) = max(x, 0) + log1p(e^−|x|): no overflow for large |x|.
template <class T>
T softplus(T x) {
  return std::max(x, T(0)) + std::log1p(std::exp(-std::abs(x)));
}

// The views of one block's tensors, [B, T, ·] rows as the operator's [B, T, H, ·].
template <class T>
struct DeltaViews {
  View4<T> q, k, v;  // parts 0, 1, 2 of the qkv rows [B, T, 3C]
  View4<T> beta;     // [B, T, H, 1] of rows [B, T, H]
  View4<T> g;        // [B, T, H, 1] (gated_deltanet) or [B, T, H, C/H] (kda) of the gate rows; empty for deltanet
};

// qkv: [B, T, 3C]; gate: [B, T, gate_width]; beta: [B, T, H].
template <class T>
DeltaViews<T> delta_views(T* qkv, T* gate, T* beta, const AttentionSpec& spec, int64_t B, int64_t T_, int64_t C) {
  const int64_t H = spec.heads, hd = C / H, row = 3 * C;
  if (!beta) throw std::invalid_argument("linattn::model: a delta kind's attention needs beta, got null");
  DeltaViews<T> views;
  views.q = {qkv, {B, T_, H, hd}, {T_ * row, row, hd, 1}};
  views.k = {qkv + C, {B, T_, H, hd}, {T_ * row, row, hd, 1}};
  views.v = {qkv + 2 * C, {B, T_, H, hd}, {T_ * row, row, hd, 1}};
  views.beta = {beta, {B, T_, H, 1}, {T_ * H, H, 1, 1}};
  const DeltaGate kind = delta_gate_of(spec.kind);
  if (kind != DeltaGate::none && !gate)
    throw std::invalid_argument(std::string("linattn::model: ") + attention_name(spec.kind) +
                                " attention needs its gate, got null");
  if (kind == DeltaGate::token) views.g = {gate, {B, T_, H, 1}, {T_ * H, H, 1, 1}};
  if (kind == DeltaGate::key) views.g = {gate, {B, T_, H, hd}, {T_ * C, C, hd, 1}};
  return views;
}

}  // namespace

// beta: [n] = sigmoid(x) = 1 / (1 + e^−x)
template <class T>
void delta_beta_forward(T* beta, const T* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) beta[i] = T(1) / (T(1) + std::exp(-x[i]));
}

// dx: [n] = dbeta · β (1 − β)
template <class T>
void delta_beta_backward(T* dx, const T* dbeta, const T* beta, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dx[i] = dbeta[i] * beta[i] * (T(1) - beta[i]);
}

// g: [rows, H · per_head] = −exp(a_log[h]) · softplus(x)
template <class T>
void delta_gate_forward(T* g, const T* x, const T* a_log, int64_t rows, int64_t H, int64_t per_head) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t h = 0; h < H; ++h) {
      const T a = std::exp(a_log[h]);
      for (int64_t d = 0; d < per_head; ++d) {
        const int64_t i = (r * H + h) * per_head + d;
        g[i] = -a * softplus(x[i]);
      }
    }
}

// dx = dg · −a · sigmoid(x), sigmoid(x) = 1 − e^−softplus(x) = −expm1(g / a); da_log += Σ dg · g
template <class T>
void delta_gate_backward(T* dx, T* da_log, const T* dg, const T* g, const T* a_log, int64_t rows, int64_t H,
                         int64_t per_head) {
  for (int64_t h = 0; h < H; ++h) {
    const T a = std::exp(a_log[h]);
    T sum = 0;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t d = 0; d < per_head; ++d) {
        const int64_t i = (r * H + h) * per_head + d;
        sum += dg[i] * g[i];
        dx[i] = dg[i] * -a * -std::expm1(g[i] / a);
      }
    da_log[h] += sum;
  }
}

DeltaRuleOptions delta_options(const AttentionSpec& spec) {
  DeltaRuleOptions options;
  options.gate = delta_gate_of(spec.kind);
  options.qk_l2norm = true;  // as DeltaNet and Gated DeltaNet train: unit keys keep each update a contraction
  options.chunk_size = spec.chunk_size;
  return options;
}

template <>
void delta_attention_forward<float>(float* out, const float* qkv, const float* gate, const float* beta,
                                    const AttentionSpec& spec, int64_t B, int64_t T_, int64_t C,
                                    const SequenceParallel& parallel) {
  const auto x = delta_views(qkv, gate, beta, spec, B, T_, C);
  const int64_t H = spec.heads, hd = C / H;
  parallel.delta_forward(bnhd(out, B, T_, H, hd), ConstTensorView(x.q), ConstTensorView(x.k), ConstTensorView(x.v),
                         ConstTensorView(x.beta), ConstTensorView(x.g), delta_options(spec));
}

template <>
void delta_attention_backward<float>(float* dqkv, float* dgate, float* dbeta, const float* dout, const float* qkv,
                                     const float* gate, const float* beta, const AttentionSpec& spec, int64_t B,
                                     int64_t T_, int64_t C, const SequenceParallel& parallel) {
  const auto x = delta_views(qkv, gate, beta, spec, B, T_, C);
  if (!dbeta || (x.g.data && !dgate))
    throw std::invalid_argument(
        "linattn::model: a delta kind's backward needs dbeta (and dgate with a gate), got null");
  // dq, dk, dv straight into their parts of dqkv: disjoint interleaved slices, as the other kinds do.
  const auto d = delta_views(dqkv, x.g.data ? dgate : nullptr, dbeta, spec, B, T_, C);
  const int64_t H = spec.heads, hd = C / H;
  parallel.delta_backward(d.q, d.k, d.v, d.beta, d.g, bnhd(dout, B, T_, H, hd), ConstTensorView(x.q),
                          ConstTensorView(x.k), ConstTensorView(x.v), ConstTensorView(x.beta), ConstTensorView(x.g),
                          delta_options(spec));
}

template <>
void delta_attention_forward<double>(double* out, const double* qkv, const double* gate, const double* beta,
                                     const AttentionSpec& spec, int64_t B, int64_t T_, int64_t C,
                                     const SequenceParallel& parallel) {
  require_single_process(parallel, "the fp64 delta rule");
  const auto x = delta_views(qkv, gate, beta, spec, B, T_, C);
  const reference::Tensor g = x.g.data ? to_tensor(x.g) : reference::Tensor();
  const reference::DecayedOutput o = reference::delta_rule_forward(
      to_tensor(x.q), to_tensor(x.k), to_tensor(x.v), to_tensor(x.beta), x.g.data ? &g : nullptr, delta_options(spec));
  from_tensor(bnhd(out, B, T_, spec.heads, C / spec.heads), o.out);
}

template <>
void delta_attention_backward<double>(double* dqkv, double* dgate, double* dbeta, const double* dout, const double* qkv,
                                      const double* gate, const double* beta, const AttentionSpec& spec, int64_t B,
                                      int64_t T_, int64_t C, const SequenceParallel& parallel) {
  require_single_process(parallel, "the fp64 delta rule");
  const auto x = delta_views(qkv, gate, beta, spec, B, T_, C);
  if (!dbeta || (x.g.data && !dgate))
    throw std::invalid_argument(
        "linattn::model: a delta kind's backward needs dbeta (and dgate with a gate), got null");
  const reference::Tensor g = x.g.data ? to_tensor(x.g) : reference::Tensor();
  const int64_t H = spec.heads, hd = C / H;
  const reference::DeltaGradients r =
      reference::delta_rule_backward(to_tensor(bnhd(dout, B, T_, H, hd)), nullptr, to_tensor(x.q), to_tensor(x.k),
                                     to_tensor(x.v), to_tensor(x.beta), x.g.data ? &g : nullptr, delta_options(spec));
  const auto d = delta_views(dqkv, x.g.data ? dgate : nullptr, dbeta, spec, B, T_, C);
  from_tensor(d.q, r.dq);
  from_tensor(d.k, r.dk);
  from_tensor(d.v, r.dv);
  from_tensor(d.beta, r.dbeta);
  if (x.g.data) from_tensor(d.g, r.dg);
}

#define LINATTN_MODEL_DELTA_LAYERS(T)                                                     \
  template void delta_beta_forward<T>(T*, const T*, int64_t);                             \
  template void delta_beta_backward<T>(T*, const T*, const T*, int64_t);                  \
  template void delta_gate_forward<T>(T*, const T*, const T*, int64_t, int64_t, int64_t); \
  template void delta_gate_backward<T>(T*, T*, const T*, const T*, const T*, int64_t, int64_t, int64_t);
LINATTN_MODEL_DELTA_LAYERS(float)
LINATTN_MODEL_DELTA_LAYERS(double)
#undef LINATTN_MODEL_DELTA_LAYERS

}  // namespace linattn::model
