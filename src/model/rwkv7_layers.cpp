// RWKV-7's generalized delta rule as an attention kind (layers.hpp): the removal a = −κ̂, b = κ̂ ⊙ ā around the
// DPLR operator (dplr.hpp). float runs its token-by-token operator; double the fp64 reference (for the gradient
// tests).
#include <cmath>
#include <stdexcept>
#include <vector>

#include "linattn/dplr.hpp"
#include "linattn/model/layers.hpp"
#include "linattn/reference.hpp"
#include "model/head_views.hpp"

namespace linattn::model {
namespace {

using detail::part_view;

// κ̂'s ε: smooth at k = 0, negligible against a key's squared norm otherwise.
constexpr double kRemovalNormEps = 1e-6;

// 1 / √(‖k‖² + ε) of the head dim hd at k.
template <class T>
T inverse_norm(const T* k, int64_t hd) {
  T sum = 0;
  for (int64_t d = 0; d < hd; ++d) sum += k[d] * k[d];
  return T(1) / std::sqrt(sum + T(kRemovalNormEps));
}

// The operator's inputs: q, k, v (parts of qkv), a and b ([B, T, H, hd], held in `a`, `b`) and gk of the gate
// rows [B, T, C].
template <class T>
struct Rwkv7Views {
  View4<const T> q, k, v, a, b, gk;
};

template <class T>
Rwkv7Views<T> rwkv7_views(const T* qkv, const T* gate, const T* abar, std::vector<T>& a, std::vector<T>& b,
                          const AttentionSpec& spec, int64_t B, int64_t T_, int64_t C) {
  if (!spec.causal)
    throw std::invalid_argument(
        "linattn::model: rwkv7 attention is causal only (the decoder's), got spec.causal false");
  if (!gate || !abar) throw std::invalid_argument("linattn::model: rwkv7 attention needs its gate and ā, got null");
  const int64_t H = spec.heads, hd = C / H;
  a.resize(size_t(B * T_ * C));
  b.resize(a.size());
  rwkv7_removal(a.data(), b.data(), qkv, abar, B * T_, C, H);
  const T *ap = a.data(), *bp = b.data();
  return {part_view(qkv, 0, 3 * C, B, T_, H, C),
          part_view(qkv, 1, 3 * C, B, T_, H, C),
          part_view(qkv, 2, 3 * C, B, T_, H, C),
          bnhd(ap, B, T_, H, hd),
          bnhd(bp, B, T_, H, hd),
          bnhd(gate, B, T_, H, hd)};
}

}  // namespace

template <class T>
void rwkv7_removal(T* a, T* b, const T* qkv, const T* abar, int64_t rows, int64_t C, int64_t H) {
  const int64_t hd = C / H;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t h = 0; h < H; ++h) {
      const T* k = qkv + r * 3 * C + C + h * hd;
      const T s = inverse_norm(k, hd);
      for (int64_t d = 0; d < hd; ++d) {
        const int64_t i = r * C + h * hd + d;
        a[i] = -k[d] * s;
        b[i] = k[d] * s * abar[i];
      }
    }
}

// With κ̂ = k·s, s = (‖k‖² + ε)^−½: ∂κ̂_i/∂k_j = s (δ_ij − κ̂_i κ̂_j), so dk = s (dκ̂ − κ̂ (κ̂ · dκ̂)), where
// dκ̂ = −da + db ⊙ ā; dā = db ⊙ κ̂.
template <class T>
void rwkv7_removal_backward(T* dqkv, T* dabar, const T* da, const T* db, const T* qkv, const T* abar, int64_t rows,
                            int64_t C, int64_t H) {
  const int64_t hd = C / H;
  std::vector<T> dkappa(static_cast<size_t>(hd));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t h = 0; h < H; ++h) {
      const T* k = qkv + r * 3 * C + C + h * hd;
      T* dk = dqkv + r * 3 * C + C + h * hd;
      const T s = inverse_norm(k, hd);
      T kappa_dot = 0;
      for (int64_t d = 0; d < hd; ++d) {
        const int64_t i = r * C + h * hd + d;
        dkappa[d] = -da[i] + db[i] * abar[i];
        dabar[i] = db[i] * k[d] * s;
        kappa_dot += k[d] * s * dkappa[d];
      }
      for (int64_t d = 0; d < hd; ++d) dk[d] += s * (dkappa[d] - k[d] * s * kappa_dot);
    }
}

DplrOptions rwkv7_options() {
  DplrOptions options;
  options.scale = 1.0f;  // o = S r, unscaled, as chunk_rwkv7
  return options;
}

template <class T>
void rwkv7_attention_forward(T* out, const T* qkv, const T* gate, const T* beta, const AttentionSpec& spec, int64_t B,
                             int64_t T_, int64_t C, const SequenceParallel& parallel) {
  // The DPLR operator has no sequence-parallel scan in the model's group (sequence_parallel.hpp).
  require_single_process(parallel, "rwkv7 attention");
  std::vector<T> a, b;
  const Rwkv7Views<T> x = rwkv7_views(qkv, gate, beta, a, b, spec, B, T_, C);
  const int64_t H = spec.heads, hd = C / H;
  const View4<T> o = bnhd(out, B, T_, H, hd);
  if constexpr (std::is_same_v<T, float>) {
    std::vector<float> state(size_t(B * H * hd * hd), 0.0f);
    dplr_delta_rule_recurrent_forward(o, x.q, x.k, x.v, x.a, x.b, x.gk, state, rwkv7_options());
  } else {
    using detail::to_tensor;
    detail::from_tensor(
        o, reference::dplr_delta_rule_forward(to_tensor(x.q), to_tensor(x.k), to_tensor(x.v), to_tensor(x.a),
                                              to_tensor(x.b), to_tensor(x.gk), rwkv7_options())
               .out);
  }
}

template <class T>
void rwkv7_attention_backward(T* dqkv, T* dgate, T* dbeta, const T* dout, const T* qkv, const T* gate, const T* beta,
                              const AttentionSpec& spec, int64_t B, int64_t T_, int64_t C,
                              const SequenceParallel& parallel) {
  require_single_process(parallel, "rwkv7 attention");
  if (!dgate || !dbeta) throw std::invalid_argument("linattn::model: rwkv7's backward needs dgate and dbeta, got null");
  std::vector<T> a, b, da(size_t(B * T_ * C)), db(da.size());
  const Rwkv7Views<T> x = rwkv7_views(qkv, gate, beta, a, b, spec, B, T_, C);
  const int64_t H = spec.heads, hd = C / H;
  const View4<T> dq = part_view(dqkv, 0, 3 * C, B, T_, H, C), dk = part_view(dqkv, 1, 3 * C, B, T_, H, C),
                 dv = part_view(dqkv, 2, 3 * C, B, T_, H, C), dav = bnhd(da.data(), B, T_, H, hd),
                 dbv = bnhd(db.data(), B, T_, H, hd), dgk = bnhd(dgate, B, T_, H, hd);
  const View4<const T> dy = bnhd(dout, B, T_, H, hd);
  if constexpr (std::is_same_v<T, float>) {
    dplr_delta_rule_recurrent_backward(dq, dk, dv, dav, dbv, dgk, {}, dy, {}, x.q, x.k, x.v, x.a, x.b, x.gk,
                                       rwkv7_options());
  } else {
    using detail::to_tensor;
    const reference::DplrGradients d =
        reference::dplr_delta_rule_backward(to_tensor(dy), nullptr, to_tensor(x.q), to_tensor(x.k), to_tensor(x.v),
                                            to_tensor(x.a), to_tensor(x.b), to_tensor(x.gk), rwkv7_options());
    detail::from_tensor(dq, d.dq);
    detail::from_tensor(dk, d.dk);
    detail::from_tensor(dv, d.dv);
    detail::from_tensor(dav, d.da);
    detail::from_tensor(dbv, d.db);
    detail::from_tensor(dgk, d.dgk);
  }
  rwkv7_removal_backward(dqkv, dbeta, static_cast<const T*>(da.data()), static_cast<const T*>(db.data()), qkv, beta,
                         B * T_, C, H);
}

#define LINATTN_MODEL_RWKV7_LAYERS(T)                                                                                 \
  template void rwkv7_removal<T>(T*, T*, const T*, const T*, int64_t, int64_t, int64_t);                              \
  template void rwkv7_removal_backward<T>(T*, T*, const T*, const T*, const T*, const T*, int64_t, int64_t, int64_t); \
  template void rwkv7_attention_forward<T>(T*, const T*, const T*, const T*, const AttentionSpec&, int64_t, int64_t,  \
                                           int64_t, const SequenceParallel&);                                         \
  template void rwkv7_attention_backward<T>(T*, T*, T*, const T*, const T*, const T*, const T*, const AttentionSpec&, \
                                            int64_t, int64_t, int64_t, const SequenceParallel&);
LINATTN_MODEL_RWKV7_LAYERS(float)
LINATTN_MODEL_RWKV7_LAYERS(double)
#undef LINATTN_MODEL_RWKV7_LAYERS

}  // namespace linattn::model
