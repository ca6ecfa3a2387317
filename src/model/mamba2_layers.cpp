// Mamba-2's SSD mixer as an attention kind (layers.hpp): dt and the D skip around the chunked decayed
// operator with a log decay per head and token (decay.hpp's Decay::token, simple GLA), on C, B, dt · x.
// float runs the chunked operator; double the fp64 token-by-token reference (for the gradient tests).
#include <cmath>
#include <stdexcept>
#include <vector>

#include "linattn/decay.hpp"
#include "linattn/model/layers.hpp"
#include "linattn/reference.hpp"
#include "model/head_views.hpp"

namespace linattn::model {
namespace {

using detail::part_view;

// The operator's inputs: q = C and k = B (parts 0 and 1 of qkv), the value dt · x ([B, T, H, hd], held in
// `value`) and g [B, T, H, 1] of the gate rows [B, T, H].
template <class T>
struct Mamba2Views {
  View4<const T> q, k, v, g;
};

template <class T>
Mamba2Views<T> mamba2_views(const T* qkv, const T* gate, const T* dt, std::vector<T>& value, const AttentionSpec& spec,
                            int64_t B, int64_t T_, int64_t C) {
  if (!spec.causal)
    throw std::invalid_argument(
        "linattn::model: mamba2 attention is causal only (the decoder's), got spec.causal false");
  if (!gate || !dt) throw std::invalid_argument("linattn::model: mamba2 attention needs its gate and dt, got null");
  const int64_t H = spec.heads;
  value.resize(size_t(B * T_ * C));
  mamba2_value(value.data(), qkv, dt, B * T_, C, H);
  return {part_view(qkv, 0, 3 * C, B, T_, H, C),
          part_view(qkv, 1, 3 * C, B, T_, H, C),
          bnhd(static_cast<const T*>(value.data()), B, T_, H, C / H),
          {gate, {B, T_, H, 1}, {T_ * H, H, 1, 1}}};
}

// dqkv's v part = dvalue · dt; ddt = Σ_d dvalue · x: the value's chain, back through dt · x.
template <class T>
void value_backward(T* dqkv, T* ddt, const T* dvalue, const T* qkv, const T* dt, int64_t rows, int64_t C, int64_t H) {
  const int64_t hd = C / H;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t h = 0; h < H; ++h) {
      const T* x = qkv + r * 3 * C + 2 * C + h * hd;
      const T* dv = dvalue + r * C + h * hd;
      T* dx = dqkv + r * 3 * C + 2 * C + h * hd;
      T sum = 0;
      for (int64_t d = 0; d < hd; ++d) {
        sum += dv[d] * x[d];
        dx[d] = dv[d] * dt[r * H + h];
      }
      ddt[r * H + h] = sum;
    }
}

}  // namespace

template <class T>
void mamba2_dt_forward(T* dt, const T* g, const T* a_log, int64_t rows, int64_t H) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t h = 0; h < H; ++h) dt[r * H + h] = -g[r * H + h] / std::exp(a_log[h]);
}

template <class T>
void mamba2_dt_backward(T* dx, const T* ddt, const T* dt, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dx[i] += ddt[i] * -std::expm1(-dt[i]);
}

template <class T>
void mamba2_skip_forward(T* attn, const T* qkv, const T* d, int64_t rows, int64_t C, int64_t H) {
  const int64_t hd = C / H;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < C; ++c) attn[r * C + c] += d[c / hd] * qkv[r * 3 * C + 2 * C + c];
}

template <class T>
void mamba2_skip_backward(T* dqkv, T* dd, const T* dattn, const T* qkv, const T* d, int64_t rows, int64_t C,
                          int64_t H) {
  const int64_t hd = C / H;
  for (int64_t h = 0; h < H; ++h) {
    T sum = 0;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = h * hd; c < (h + 1) * hd; ++c) {
        sum += dattn[r * C + c] * qkv[r * 3 * C + 2 * C + c];
        dqkv[r * 3 * C + 2 * C + c] += d[h] * dattn[r * C + c];
      }
    dd[h] += sum;
  }
}

DecayedAttentionOptions mamba2_options(const AttentionSpec& spec) {
  DecayedAttentionOptions options;
  options.decay = Decay::token;
  options.scale = 1.0f;  // y = Cᵀ h, unscaled
  options.chunk_size = spec.chunk_size;
  return options;
}

template <class T>
void mamba2_value(T* value, const T* qkv, const T* dt, int64_t rows, int64_t C, int64_t H) {
  const int64_t hd = C / H;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < C; ++c) value[r * C + c] = dt[r * H + c / hd] * qkv[r * 3 * C + 2 * C + c];
}

template <class T>
void mamba2_attention_forward(T* out, const T* qkv, const T* gate, const T* beta, const AttentionSpec& spec, int64_t B,
                              int64_t T_, int64_t C, const SequenceParallel& parallel) {
  std::vector<T> value;
  const Mamba2Views<T> x = mamba2_views(qkv, gate, beta, value, spec, B, T_, C);
  const View4<T> o = bnhd(out, B, T_, spec.heads, C / spec.heads);
  if constexpr (std::is_same_v<T, float>) {
    parallel.decayed_forward(o, x.q, x.k, x.v, x.g, mamba2_options(spec));
  } else {
    require_single_process(parallel, "the fp64 mamba2 attention");
    const reference::Tensor g = detail::to_tensor(x.g);
    detail::from_tensor(o, reference::decayed_attention_forward(detail::to_tensor(x.q), detail::to_tensor(x.k),
                                                                detail::to_tensor(x.v), &g, mamba2_options(spec))
                               .out);
  }
}

template <class T>
void mamba2_attention_backward(T* dqkv, T* dgate, T* dbeta, const T* dout, const T* qkv, const T* gate, const T* beta,
                               const AttentionSpec& spec, int64_t B, int64_t T_, int64_t C,
                               const SequenceParallel& parallel) {
  if (!dgate || !dbeta)
    throw std::invalid_argument("linattn::model: mamba2's backward needs dgate and dbeta, got null");
  std::vector<T> value, dvalue(size_t(B * T_ * C));
  const Mamba2Views<T> x = mamba2_views(qkv, gate, beta, value, spec, B, T_, C);
  const int64_t H = spec.heads, hd = C / H;
  const View4<T> dq = part_view(dqkv, 0, 3 * C, B, T_, H, C), dk = part_view(dqkv, 1, 3 * C, B, T_, H, C),
                 dv = bnhd(dvalue.data(), B, T_, H, hd), dg{dgate, {B, T_, H, 1}, {T_ * H, H, 1, 1}};
  const View4<const T> dy = bnhd(dout, B, T_, H, hd);
  if constexpr (std::is_same_v<T, float>) {
    parallel.decayed_backward(dq, dk, dv, dg, dy, x.q, x.k, x.v, x.g, mamba2_options(spec));
  } else {
    require_single_process(parallel, "the fp64 mamba2 attention");
    const reference::Tensor g = detail::to_tensor(x.g);
    const reference::DecayedGradients d =
        reference::decayed_attention_backward(detail::to_tensor(dy), nullptr, detail::to_tensor(x.q),
                                              detail::to_tensor(x.k), detail::to_tensor(x.v), &g, mamba2_options(spec));
    detail::from_tensor(dq, d.dq);
    detail::from_tensor(dk, d.dk);
    detail::from_tensor(dv, d.dv);
    detail::from_tensor(dg, d.dg);
  }
  value_backward(dqkv, dbeta, static_cast<const T*>(dvalue.data()), qkv, beta, B * T_, C, H);
}

#define LINATTN_MODEL_MAMBA2_LAYERS(T)                                                                                 \
  template void mamba2_dt_forward<T>(T*, const T*, const T*, int64_t, int64_t);                                        \
  template void mamba2_dt_backward<T>(T*, const T*, const T*, int64_t);                                                \
  template void mamba2_skip_forward<T>(T*, const T*, const T*, int64_t, int64_t, int64_t);                             \
  template void mamba2_skip_backward<T>(T*, T*, const T*, const T*, const T*, int64_t, int64_t, int64_t);              \
  template void mamba2_value<T>(T*, const T*, const T*, int64_t, int64_t, int64_t);                                    \
  template void mamba2_attention_forward<T>(T*, const T*, const T*, const T*, const AttentionSpec&, int64_t, int64_t,  \
                                            int64_t, const SequenceParallel&);                                         \
  template void mamba2_attention_backward<T>(T*, T*, T*, const T*, const T*, const T*, const T*, const AttentionSpec&, \
                                             int64_t, int64_t, int64_t, const SequenceParallel&);
LINATTN_MODEL_MAMBA2_LAYERS(float)
LINATTN_MODEL_MAMBA2_LAYERS(double)
#undef LINATTN_MODEL_MAMBA2_LAYERS

}  // namespace linattn::model
