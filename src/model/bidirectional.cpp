// The recurrent kinds in the encoder: the causal operator run forwards and on the time-reversed
// sequence, the two outputs added (layers.hpp).
#include <algorithm>
#include <vector>

#include "linattn/model/layers.hpp"

namespace linattn::model {
namespace {

// [B, T, width] rows with the T axis reversed; empty when x is null (the kinds without a gate or β).
template <class T>
std::vector<T> flipped(const T* x, int64_t B, int64_t T_, int64_t width) {
  std::vector<T> y;
  if (!x) return y;
  y.resize(size_t(B * T_ * width));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T_; ++t)
      std::copy_n(x + (b * T_ + t) * width, width, y.begin() + (b * T_ + (T_ - 1 - t)) * width);
  return y;
}

// to[b, t] += from[b, T − 1 − t]: the reversed pass's result, back in order.
template <class T>
void add_flipped(T* to, const std::vector<T>& from, int64_t B, int64_t T_, int64_t width) {
  if (!to) return;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T_; ++t) {
      const T* src = from.data() + (b * T_ + (T_ - 1 - t)) * width;
      T* dst = to + (b * T_ + t) * width;
      for (int64_t i = 0; i < width; ++i) dst[i] += src[i];
    }
}

template <class T>
T* data_or_null(std::vector<T>& v) {
  return v.empty() ? nullptr : v.data();
}

AttentionSpec causal_of(const AttentionSpec& spec) {
  AttentionSpec causal = spec;
  causal.causal = true;
  return causal;
}

}  // namespace

bool runs_both_directions(const AttentionSpec& spec) {
  return !spec.causal && (is_decayed(spec.kind) || is_delta(spec.kind));
}

template <class T>
void bidirectional_forward(T* out, const T* qkv, const AttentionSpec& spec, int64_t B, int64_t T_, int64_t C,
                           const T* gate, const T* beta) {
  const AttentionSpec causal = causal_of(spec);
  const int64_t H = spec.heads, G = gate_width(spec.kind, C, H);
  attention_forward<T>(out, nullptr, qkv, causal, B, T_, C, gate, beta);
  std::vector<T> qkv_r = flipped(qkv, B, T_, 3 * C), gate_r = flipped(gate, B, T_, G), beta_r = flipped(beta, B, T_, H);
  std::vector<T> out_r(size_t(B * T_ * C));
  attention_forward<T>(out_r.data(), nullptr, qkv_r.data(), causal, B, T_, C, data_or_null(gate_r),
                       data_or_null(beta_r));
  add_flipped(out, out_r, B, T_, C);
}

template <class T>
void bidirectional_backward(T* dqkv, const T* dout, const T* qkv, const AttentionSpec& spec, int64_t B, int64_t T_,
                            int64_t C, const T* gate, T* dgate, const T* beta, T* dbeta) {
  const AttentionSpec causal = causal_of(spec);
  const int64_t H = spec.heads, G = gate_width(spec.kind, C, H);
  // The recurrent kinds' backward reads neither the output nor lse.
  attention_backward<T>(dqkv, dout, qkv, nullptr, nullptr, causal, B, T_, C, gate, dgate, beta, dbeta);
  const std::vector<T> qkv_r = flipped(qkv, B, T_, 3 * C), dout_r = flipped(dout, B, T_, C),
                       gate_r = flipped(gate, B, T_, G), beta_r = flipped(beta, B, T_, H);
  std::vector<T> dqkv_r(size_t(B * T_ * 3 * C)), dgate_r(gate ? size_t(B * T_ * G) : 0),
      dbeta_r(beta ? size_t(B * T_ * H) : 0);
  attention_backward<T>(dqkv_r.data(), dout_r.data(), qkv_r.data(), nullptr, nullptr, causal, B, T_, C,
                        gate_r.empty() ? nullptr : gate_r.data(), data_or_null(dgate_r),
                        beta_r.empty() ? nullptr : beta_r.data(), data_or_null(dbeta_r));
  add_flipped(dqkv, dqkv_r, B, T_, 3 * C);
  add_flipped(dgate, dgate_r, B, T_, G);
  add_flipped(dbeta, dbeta_r, B, T_, H);
}

template void bidirectional_forward(float*, const float*, const AttentionSpec&, int64_t, int64_t, int64_t, const float*,
                                    const float*);
template void bidirectional_forward(double*, const double*, const AttentionSpec&, int64_t, int64_t, int64_t,
                                    const double*, const double*);
template void bidirectional_backward(float*, const float*, const float*, const AttentionSpec&, int64_t, int64_t,
                                     int64_t, const float*, float*, const float*, float*);
template void bidirectional_backward(double*, const double*, const double*, const AttentionSpec&, int64_t, int64_t,
                                     int64_t, const double*, double*, const double*, double*);

}  // namespace linattn::model
