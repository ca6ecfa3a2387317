// The decayed family token by token: per (sequence, head) and token, S = diag(a) S + k vᵀ and
// o = (scale · q)ᵀ S in one sweep over S (kernels::rank1_update_readout). Constant memory per token;
// the decode path and flash-linear-attention's fused_recurrent_*.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/validate.hpp"
#include "kernels/decay_factors.hpp"
#include "kernels/pack.hpp"
#include "kernels/rows.hpp"
#include "ops/decay/decay_checks.hpp"

namespace linattn {
namespace {

// T: the state's element type (float, or bf16 for a decoding state kept in half the bytes).
template <class T>
void recurrent(const char* op, TensorView out, ConstTensorView q, ConstTensorView k, ConstTensorView v,
               ConstTensorView g, std::span<T> state, const DecayedAttentionOptions& options) {
  const detail::DecayProblem p = detail::check_decay_arguments(op, q, k, v, g, options);
  detail::check_output_shape(op, "out", out, q, v);
  if (state.empty()) detail::fail_with(op, "state is empty, expected [N, H, K, V] = ", p.state_size(), " values");
  detail::check_decay_state(op, "state", state.size(), p);
  const boundary::Region outputs[] = {boundary::region("out", out), boundary::region("state", state)};
  detail::check_outputs(op, outputs, detail::decay_input_regions(q, k, v, g));
  const int64_t tasks = int64_t(p.sequences.size()) * p.H, K = p.K, V = p.V;
  const int64_t cols = p.gate_cols();
  const bool decays = p.decay != Decay::none;
#pragma omp parallel if (tasks > 1 && p.T * K * V >= (1 << 16))
  {
    // One scratch per thread for all its heads: a decode step allocates nothing per head.
    std::vector<float> buffer(size_t(4 * K + 2 * V + cols), 1.0f);
    float *qs = buffer.data(), *ks = qs + K, *a = ks + K, *ones = a + K, *vs = ones + K, *o = vs + V, *gs = o + V;
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < tasks; ++task) {
      const detail::DecaySequence& s = p.sequences[size_t(task / p.H)];
      const int64_t h = task % p.H;
      std::fill_n(a, K, float(std::exp(detail::constant_log_decay(options, h))));
      T* S = state.data() + (s.n * p.H + h) * K * V;
      for (int64_t t = s.begin; t < s.end; ++t) {
        kernels::pack_rows({qs, K, 1, K}, kernels::head_rows(q, s.b, h), t, 1, p.scale);
        kernels::pack_rows({ks, K, 1, K}, kernels::head_rows(k, s.b, h), t, 1);
        kernels::pack_rows({vs, V, 1, V}, kernels::head_rows(v, s.b, h), t, 1);
        if (cols > 0) kernels::pack_rows({gs, cols, 1, cols}, kernels::head_rows(g, s.b, h), t, 1);
        if (p.decay == Decay::key) kernels::mul_exp_difference(a, ones, gs, nullptr, 1.0f, K);  // a = e^{g}
        if (p.decay == Decay::token) std::fill_n(a, K, std::exp(gs[0]));
        kernels::rank1_update_readout(o, S, ks, vs, qs, K, V, decays ? a : nullptr);
        kernels::unpack_rows(kernels::head_rows(out, s.b, h), t, {o, V, 1, V}, 1);
      }
    }
  }
}

}  // namespace

void decayed_recurrent_forward(TensorView out, ConstTensorView q, ConstTensorView k, ConstTensorView v,
                               ConstTensorView g, std::span<float> state, const DecayedAttentionOptions& options) {
  recurrent("decayed_recurrent_forward", out, q, k, v, g, state, options);
}

void decayed_step(TensorView out, ConstTensorView q, ConstTensorView k, ConstTensorView v, ConstTensorView g,
                  RecurrentState& state, const DecayedAttentionOptions& options) {
  const char* op = "decayed_step";
  if (!options.cu_seqlens.empty())
    detail::fail(op, "options.cu_seqlens is given, expected none (a decoding state holds one sequence per batch row)");
  detail::check_decode_state(op, state, decay_name(options.decay), "decay_name(options.decay)", q, v);
  if (state.dtype() == DType::bf16)
    recurrent(op, out, q, k, v, g, state.S_bf16(), options);
  else
    recurrent(op, out, q, k, v, g, state.S(), options);
  state.set_position(state.position() + q.seq());
}

}  // namespace linattn
