// The blocks' multi-head attention (causal in the decoder, not in the encoder classifier): q, k, v are strided views
// into the fused qkv rows, so heads need no copies. float runs linattn's operators; double runs the fp64 reference. The
// delta kinds are in delta_layers.cpp, mamba2 in mamba2_layers.cpp, rwkv7 in rwkv7_layers.cpp.
#include <algorithm>
#include <stdexcept>
#include <vector>

#include "linattn/decay.hpp"
#include "linattn/linear_attention.hpp"
#include "linattn/linformer.hpp"
#include "linattn/model/layers.hpp"
#include "linattn/reference.hpp"
#include "linattn/softmax_attention.hpp"
#include "model/head_views.hpp"

namespace linattn::model {
namespace {

using detail::part_view;

LinearAttentionOptions linear_options(const AttentionSpec& spec) {
  LinearAttentionOptions options;
  options.feature_map = spec.feature_map;
  options.causal = spec.causal;
  options.chunk_size = spec.chunk_size;
  options.key_lengths = spec.key_lengths;  // the encoder's padding enters no sum
  return options;
}

// GLA's gate rows [B, T, C] as the operator's g: [B, T, H, C/H]; an empty view for retnet.
template <class T>
View4<T> gate_view(T* gate, const AttentionSpec& spec, int64_t B, int64_t T_, int64_t C) {
  if (spec.kind != AttentionKind::gla) return {};
  if (!gate) throw std::invalid_argument("linattn::model: gla attention needs its gate, got null");
  return part_view(gate, 0, C, B, T_, spec.heads, C);
}

LinformerOptions linformer_options(const AttentionSpec& spec) {
  LinformerOptions options;
  options.projected_length = spec.linformer_length;
  options.max_length = spec.max_length;
  options.key_lengths = spec.key_lengths;
  return options;
}
// The size of E (and of F) in the projections [2, H, P, N_max] that linformer takes in the gate's place.
int64_t projection_size(const AttentionSpec& spec) { return spec.heads * spec.linformer_length * spec.max_length; }

SoftmaxAttentionOptions softmax_options(const AttentionSpec& spec) {
  SoftmaxAttentionOptions options;
  options.causal = spec.causal;
  options.key_lengths = spec.key_lengths;
  return options;
}

// The fp64 reference's tensor of one part of qkv, and back.
reference::Tensor to_tensor(const double* base, int64_t part, int64_t row, int64_t B, int64_t T_, int64_t H,
                            int64_t C) {
  return detail::to_tensor(part_view(base, part, row, B, T_, H, C));
}
void from_tensor(double* base, int64_t part, int64_t row, const reference::Tensor& t, int64_t H, int64_t C) {
  detail::from_tensor(part_view(base, part, row, t.extent[0], t.extent[1], H, C), t);
}

}  // namespace

DecayedAttentionOptions decayed_options(const AttentionSpec& spec) {
  DecayedAttentionOptions options;
  options.decay = decay_of(spec.kind);
  options.chunk_size = spec.chunk_size;
  return options;
}

template <>
void attention_forward<float>(float* out, float* lse, const float* qkv, const AttentionSpec& spec, int64_t B,
                              int64_t T_, int64_t C, const float* gate, const float* beta,
                              const SequenceParallel& parallel) {
  if (runs_both_directions(spec)) {
    require_single_process(parallel, "the encoder's attention");
    return bidirectional_forward(out, qkv, spec, B, T_, C, gate, beta);
  }
  if (is_delta(spec.kind)) return delta_attention_forward(out, qkv, gate, beta, spec, B, T_, C, parallel);
  if (spec.kind == AttentionKind::mamba2)
    return mamba2_attention_forward(out, qkv, gate, beta, spec, B, T_, C, parallel);
  if (spec.kind == AttentionKind::rwkv7) return rwkv7_attention_forward(out, qkv, gate, beta, spec, B, T_, C, parallel);
  const int64_t H = spec.heads;
  const ConstTensorView q = part_view(qkv, 0, 3 * C, B, T_, H, C), k = part_view(qkv, 1, 3 * C, B, T_, H, C),
                        v = part_view(qkv, 2, 3 * C, B, T_, H, C);
  const TensorView o = part_view(out, 0, C, B, T_, H, C);
  if (spec.kind == AttentionKind::softmax) {
    parallel.softmax_forward(o, {lse, size_t(B * H * T_)}, q, k, v, softmax_options(spec));
  } else if (spec.kind == AttentionKind::linformer) {
    require_single_process(parallel, "the encoder's attention");
    const auto n = size_t(projection_size(spec));
    linformer_attention_forward(o, {lse, size_t(B * H * T_)}, q, k, v, {gate, n}, {gate + n, n},
                                linformer_options(spec));
  } else if (is_decayed(spec.kind)) {
    parallel.decayed_forward(o, q, k, v, gate_view(gate, spec, B, T_, C), decayed_options(spec));
  } else if (!spec.causal) {  // the encoder's: the group's linear_forward is the causal operator
    require_single_process(parallel, "the encoder's attention");
    linear_attention_forward(o, q, k, v, linear_options(spec));
  } else {
    parallel.linear_forward(o, q, k, v, linear_options(spec));
  }
}

template <>
void attention_backward<float>(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse,
                               const AttentionSpec& spec, int64_t B, int64_t T_, int64_t C, const float* gate,
                               float* dgate, const float* beta, float* dbeta, const SequenceParallel& parallel) {
  if (runs_both_directions(spec)) {
    require_single_process(parallel, "the encoder's attention");
    return bidirectional_backward(dqkv, dout, qkv, spec, B, T_, C, gate, dgate, beta, dbeta);
  }
  if (is_delta(spec.kind))
    return delta_attention_backward(dqkv, dgate, dbeta, dout, qkv, gate, beta, spec, B, T_, C, parallel);
  if (spec.kind == AttentionKind::mamba2)
    return mamba2_attention_backward(dqkv, dgate, dbeta, dout, qkv, gate, beta, spec, B, T_, C, parallel);
  if (spec.kind == AttentionKind::rwkv7)
    return rwkv7_attention_backward(dqkv, dgate, dbeta, dout, qkv, gate, beta, spec, B, T_, C, parallel);
  const int64_t H = spec.heads;
  const ConstTensorView q = part_view(qkv, 0, 3 * C, B, T_, H, C), k = part_view(qkv, 1, 3 * C, B, T_, H, C),
                        v = part_view(qkv, 2, 3 * C, B, T_, H, C);
  const ConstTensorView dout_view = part_view(dout, 0, C, B, T_, H, C);
  // dq, dk, dv written straight into their parts of dqkv: disjoint interleaved slices, which the
  // operators accept as outputs.
  const TensorView dq = part_view(dqkv, 0, 3 * C, B, T_, H, C), dk = part_view(dqkv, 1, 3 * C, B, T_, H, C),
                   dv = part_view(dqkv, 2, 3 * C, B, T_, H, C);
  if (spec.kind == AttentionKind::softmax) {
    const ConstTensorView out_view = part_view(out, 0, C, B, T_, H, C);
    parallel.softmax_backward(dq, dk, dv, dout_view, q, k, v, out_view, {lse, size_t(B * H * T_)},
                              softmax_options(spec));
  } else if (spec.kind == AttentionKind::linformer) {
    require_single_process(parallel, "the encoder's attention");
    const auto n = size_t(projection_size(spec));
    linformer_attention_backward(dq, dk, dv, {dgate, n}, {dgate + n, n}, dout_view, q, k, v, {gate, n}, {gate + n, n},
                                 part_view(out, 0, C, B, T_, H, C), {lse, size_t(B * H * T_)}, linformer_options(spec));
  } else if (is_decayed(spec.kind)) {
    parallel.decayed_backward(dq, dk, dv, gate_view(dgate, spec, B, T_, C), dout_view, q, k, v,
                              gate_view(gate, spec, B, T_, C), decayed_options(spec));
  } else if (!spec.causal) {
    require_single_process(parallel, "the encoder's attention");
    linear_attention_backward(dq, dk, dv, dout_view, q, k, v, linear_options(spec));
  } else {
    parallel.linear_backward(dq, dk, dv, dout_view, q, k, v, linear_options(spec));
  }
}

template <>
void attention_forward<double>(double* out, double* lse, const double* qkv, const AttentionSpec& spec, int64_t B,
                               int64_t T_, int64_t C, const double* gate, const double* beta,
                               const SequenceParallel& parallel) {
  require_single_process(parallel, "the fp64 attention");
  if (runs_both_directions(spec)) return bidirectional_forward(out, qkv, spec, B, T_, C, gate, beta);
  if (is_delta(spec.kind)) return delta_attention_forward(out, qkv, gate, beta, spec, B, T_, C);
  if (spec.kind == AttentionKind::mamba2) return mamba2_attention_forward(out, qkv, gate, beta, spec, B, T_, C);
  if (spec.kind == AttentionKind::rwkv7) return rwkv7_attention_forward(out, qkv, gate, beta, spec, B, T_, C);
  const int64_t H = spec.heads;
  const reference::Tensor q = to_tensor(qkv, 0, 3 * C, B, T_, H, C), k = to_tensor(qkv, 1, 3 * C, B, T_, H, C),
                          v = to_tensor(qkv, 2, 3 * C, B, T_, H, C);
  if (spec.kind == AttentionKind::softmax) {
    std::vector<double> lse64;
    from_tensor(out, 0, C, reference::softmax_attention_forward(q, k, v, softmax_options(spec), &lse64), H, C);
    for (size_t i = 0; i < lse64.size(); ++i) lse[i] = lse64[i];
  } else if (spec.kind == AttentionKind::linformer) {
    const int64_t n = projection_size(spec);
    const std::vector<double> E(gate, gate + n), F(gate + n, gate + 2 * n);
    from_tensor(out, 0, C, reference::linformer_attention_forward(q, k, v, E, F, linformer_options(spec)), H, C);
  } else if (is_decayed(spec.kind)) {
    gate_view(gate, spec, B, T_, C);  // checks that gla has its gate
    const reference::Tensor g =
        spec.kind == AttentionKind::gla ? to_tensor(gate, 0, C, B, T_, H, C) : reference::Tensor();
    const reference::DecayedOutput o = reference::decayed_attention_forward(
        q, k, v, spec.kind == AttentionKind::gla ? &g : nullptr, decayed_options(spec));
    from_tensor(out, 0, C, o.out, H, C);
  } else {
    from_tensor(out, 0, C, reference::linear_attention_forward(q, k, v, linear_options(spec)), H, C);
  }
}

template <>
void attention_backward<double>(double* dqkv, const double* dout, const double* qkv, const double*, const double*,
                                const AttentionSpec& spec, int64_t B, int64_t T_, int64_t C, const double* gate,
                                double* dgate, const double* beta, double* dbeta, const SequenceParallel& parallel) {
  require_single_process(parallel, "the fp64 attention");
  if (runs_both_directions(spec))
    return bidirectional_backward(dqkv, dout, qkv, spec, B, T_, C, gate, dgate, beta, dbeta);
  if (is_delta(spec.kind)) return delta_attention_backward(dqkv, dgate, dbeta, dout, qkv, gate, beta, spec, B, T_, C);
  if (spec.kind == AttentionKind::mamba2)
    return mamba2_attention_backward(dqkv, dgate, dbeta, dout, qkv, gate, beta, spec, B, T_, C);
  if (spec.kind == AttentionKind::rwkv7)
    return rwkv7_attention_backward(dqkv, dgate, dbeta, dout, qkv, gate, beta, spec, B, T_, C);
  const int64_t H = spec.heads;
  const reference::Tensor q = to_tensor(qkv, 0, 3 * C, B, T_, H, C), k = to_tensor(qkv, 1, 3 * C, B, T_, H, C),
                          v = to_tensor(qkv, 2, 3 * C, B, T_, H, C), dy = to_tensor(dout, 0, C, B, T_, H, C);
  if (spec.kind == AttentionKind::linformer) {
    const int64_t n = projection_size(spec);
    const std::vector<double> E(gate, gate + n), F(gate + n, gate + 2 * n);
    const reference::LinformerGradients d =
        reference::linformer_attention_backward(dy, q, k, v, E, F, linformer_options(spec));
    from_tensor(dqkv, 0, 3 * C, d.dq, H, C);
    from_tensor(dqkv, 1, 3 * C, d.dk, H, C);
    from_tensor(dqkv, 2, 3 * C, d.dv, H, C);
    std::copy(d.dE.begin(), d.dE.end(), dgate);
    std::copy(d.dF.begin(), d.dF.end(), dgate + n);
    return;
  }
  if (is_decayed(spec.kind)) {
    gate_view(gate, spec, B, T_, C);
    const bool gla = spec.kind == AttentionKind::gla;
    if (gla && !dgate) throw std::invalid_argument("linattn::model: gla attention needs dgate, got null");
    const reference::Tensor g = gla ? to_tensor(gate, 0, C, B, T_, H, C) : reference::Tensor();
    const reference::DecayedGradients d =
        reference::decayed_attention_backward(dy, nullptr, q, k, v, gla ? &g : nullptr, decayed_options(spec));
    from_tensor(dqkv, 0, 3 * C, d.dq, H, C);
    from_tensor(dqkv, 1, 3 * C, d.dk, H, C);
    from_tensor(dqkv, 2, 3 * C, d.dv, H, C);
    if (gla) from_tensor(dgate, 0, C, d.dg, H, C);
    return;
  }
  const reference::Gradients g = spec.kind == AttentionKind::softmax
                                     ? reference::softmax_attention_backward(dy, q, k, v, softmax_options(spec))
                                     : reference::linear_attention_backward(dy, q, k, v, linear_options(spec));
  from_tensor(dqkv, 0, 3 * C, g.dq, H, C);
  from_tensor(dqkv, 1, 3 * C, g.dk, H, C);
  from_tensor(dqkv, 2, 3 * C, g.dv, H, C);
}

}  // namespace linattn::model
