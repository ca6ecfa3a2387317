// The recurrent kinds in the encoder: the causal operator run forwards and on the time-reversed
// sequence (its real tokens; the padding stays at the end), the two outputs added (layers.hpp).
#include <algorithm>
#include <span>
#include <vector>

#include "linattn/model/layers.hpp"

namespace linattn::model {
namespace {

// Where row t of sequence b goes in the reversed pass: its real tokens t < lengths[b] reversed, the padding
// left where it is, after them (lengths empty: every token is real). An involution, so it maps back too.
int64_t flipped_row(std::span<const int64_t> lengths, int64_t b, int64_t T_, int64_t t) {
  const int64_t n = lengths.empty() ? T_ : lengths[size_t(b)];
  return t < n ? n - 1 - t : t;
}

// [B, T, width] rows in the reversed pass's order; empty when x is null (the kinds without a gate or β).
template <class T>
std::vector<T> flipped(const T* x, std::span<const int64_t> lengths, int64_t B, int64_t T_, int64_t width) {
  std::vector<T> y;
  if (!x) return y;
  y.resize(size_t(B * T_ * width));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T_; ++t)
      std::copy_n(x + (b * T_ + t) * width, width, y.begin() + (b * T_ + flipped_row(lengths, b, T_, t)) * width);
  return y;
}

// to[b, t] += the reversed pass's row of token t: its result, back in order.
template <class T>
void add_flipped(T* to, const std::vector<T>& from, std::span<const int64_t> lengths, int64_t B, int64_t T_,
                 int64_t width) {
  if (!to) return;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T_; ++t) {
      const T* src = from.data() + (b * T_ + flipped_row(lengths, b, T_, t)) * width;
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
  causal.key_lengths = {};  // the causal passes need no mask: in both orders the padding follows the real tokens
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
  const std::span<const int64_t> n = spec.key_lengths;
  std::vector<T> qkv_r = flipped(qkv, n, B, T_, 3 * C), gate_r = flipped(gate, n, B, T_, G),
                 beta_r = flipped(beta, n, B, T_, H);
  std::vector<T> out_r(size_t(B * T_ * C));
  attention_forward<T>(out_r.data(), nullptr, qkv_r.data(), causal, B, T_, C, data_or_null(gate_r),
                       data_or_null(beta_r));
  add_flipped(out, out_r, n, B, T_, C);
}

template <class T>
void bidirectional_backward(T* dqkv, const T* dout, const T* qkv, const AttentionSpec& spec, int64_t B, int64_t T_,
                            int64_t C, const T* gate, T* dgate, const T* beta, T* dbeta) {
  const AttentionSpec causal = causal_of(spec);
  const int64_t H = spec.heads, G = gate_width(spec.kind, C, H);
  // The recurrent kinds' backward reads neither the output nor lse.
  attention_backward<T>(dqkv, dout, qkv, nullptr, nullptr, causal, B, T_, C, gate, dgate, beta, dbeta);
  const std::span<const int64_t> n = spec.key_lengths;
  const std::vector<T> qkv_r = flipped(qkv, n, B, T_, 3 * C), dout_r = flipped(dout, n, B, T_, C),
                       gate_r = flipped(gate, n, B, T_, G), beta_r = flipped(beta, n, B, T_, H);
  std::vector<T> dqkv_r(size_t(B * T_ * 3 * C)), dgate_r(gate ? size_t(B * T_ * G) : 0),
      dbeta_r(beta ? size_t(B * T_ * H) : 0);
  attention_backward<T>(dqkv_r.data(), dout_r.data(), qkv_r.data(), nullptr, nullptr, causal, B, T_, C,
                        gate_r.empty() ? nullptr : gate_r.data(), data_or_null(dgate_r),
                        beta_r.empty() ? nullptr : beta_r.data(), data_or_null(dbeta_r));
  add_flipped(dqkv, dqkv_r, n, B, T_, 3 * C);
  add_flipped(dgate, dgate_r, n, B, T_, G);
  add_flipped(dbeta, dbeta_r, n, B, T_, H);
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
