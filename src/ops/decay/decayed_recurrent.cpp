// The decayed family token by token: per sequence, head and token, S = diag(a) S + k vᵀ and
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
#include "ops/decay/recurrent_tasks.hpp"

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
  const int64_t N = int64_t(p.sequences.size()), K = p.K, V = p.V, cols = p.gate_cols();
  const bool decays = p.decay != Decay::none;
  const auto floats = detail::TokenRows::floats_per_head(K, V, cols);
  detail::for_each_head_block(
      N, p.H, N * p.H * p.T * K * V, floats, [&](int64_t n, int64_t h0, int64_t heads, float* scratch) {
        const detail::DecaySequence& s = p.sequences[size_t(n)];
        detail::TokenRows rows(scratch, heads, K, V, cols);
        if (cols == 0)
          for (int64_t r = 0; r < heads; ++r)
            std::fill_n(rows.a + r * K, K, float(std::exp(detail::constant_log_decay(options, h0 + r))));
        for (int64_t t = s.begin; t < s.end; ++t) {
          rows.load(q, k, v, g, s.b, t, h0, p.scale, t + 1 < s.end ? t + 1 : -1);
          for (int64_t r = 0; r < heads; ++r)
            kernels::rank1_update_readout(rows.o + r * V, state.data() + (s.n * p.H + h0 + r) * K * V, rows.k + r * K,
                                          rows.v + r * V, rows.q + r * K, K, V, decays ? rows.a + r * K : nullptr);
          rows.store(out, s.b, t, h0);
        }
      });
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
