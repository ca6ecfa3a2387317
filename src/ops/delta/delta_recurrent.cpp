// The delta rule token by token: per sequence, head and token, S ← P + β k (v − Pᵀk)ᵀ with
// P = diag(a) S, and o = (scale · q)ᵀ S, in two sweeps over S (kernels::delta_update_readout).
// Constant memory per token; the decode path and flash-linear-attention's fused_recurrent_*.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/validate.hpp"
#include "kernels/decay_factors.hpp"
#include "kernels/pack.hpp"
#include "kernels/rows.hpp"
#include "ops/decay/recurrent_tasks.hpp"
#include "ops/delta/delta_checks.hpp"

namespace linattn {
namespace {

// Each row r of x: [rows, n] ← x_r · factor / sqrt(Σ x_r² + ε) (flash-linear-attention's l2norm), or x_r ·
// factor; f: [rows] scratch. The rows of a block scaled in one call: a decode step's per-row loops cost it more
// than the scaling.
void normalise(float* x, float* f, int64_t rows, int64_t n, bool l2norm, float factor) {
  for (int64_t r = 0; r < rows; ++r) {
    float sum = 0;
    if (l2norm) kernels::row_dots(&sum, x + r * n, n, x + r * n, 1, n);
    f[r] = l2norm ? float(factor / std::sqrt(double(sum) + detail::kL2NormEps)) : factor;
  }
  if (l2norm || factor != 1.0f) kernels::scale_rows(x, n, x, n, f, rows, n);
}

// T: the state's element type (float, or bf16 for a decoding state kept in half the bytes).
template <class T>
void recurrent(const char* op, TensorView out, ConstTensorView q, ConstTensorView k, ConstTensorView v,
               ConstTensorView beta, ConstTensorView g, std::span<T> state, const DeltaRuleOptions& options) {
  const detail::DeltaProblem p = detail::check_delta_arguments(op, q, k, v, beta, g, options);
  detail::check_output_shape(op, "out", out, q, v);
  if (state.empty()) detail::fail_with(op, "state is empty, expected [N, H, K, V] = ", p.state_size(), " values");
  detail::check_delta_state(op, "state", state.size(), p);
  const boundary::Region outputs[] = {boundary::region("out", out), boundary::region("state", state)};
  detail::check_outputs(op, outputs, detail::delta_input_regions(q, k, v, beta, g));
  const int64_t N = int64_t(p.sequences.size()), K = p.K, V = p.V, cols = p.gate_cols();
  const auto floats = detail::TokenRows::floats_per_head(K, V, cols);
  detail::for_each_head_block(
      N, p.H, N * p.H * p.T * K * V, floats, [&](int64_t n, int64_t h0, int64_t heads, float* scratch) {
        const detail::DecaySequence& s = p.sequences[size_t(n)];
        detail::TokenRows rows(scratch, heads, K, V, cols);
        for (int64_t t = s.begin; t < s.end; ++t) {
          rows.load(q, k, v, g, s.b, t, h0, 1.0f, t + 1 < s.end ? t + 1 : -1);
          normalise(rows.q, rows.factors, heads, K, p.qk_l2norm, p.scale);
          normalise(rows.k, rows.factors, heads, K, p.qk_l2norm, 1.0f);
          for (int64_t r = 0; r < heads; ++r)
            kernels::delta_update_readout(rows.o + r * V, state.data() + (s.n * p.H + h0 + r) * K * V, rows.k + r * K,
                                          rows.v + r * V, rows.q + r * K, beta(s.b, t, h0 + r, 0), K, V,
                                          cols > 0 ? rows.a + r * K : nullptr);
          rows.store(out, s.b, t, h0);
        }
      });
}

}  // namespace

void delta_rule_recurrent_forward(TensorView out, ConstTensorView q, ConstTensorView k, ConstTensorView v,
                                  ConstTensorView beta, ConstTensorView g, std::span<float> state,
                                  const DeltaRuleOptions& options) {
  recurrent("delta_rule_recurrent_forward", out, q, k, v, beta, g, state, options);
}

void delta_rule_step(TensorView out, ConstTensorView q, ConstTensorView k, ConstTensorView v, ConstTensorView beta,
                     ConstTensorView g, RecurrentState& state, const DeltaRuleOptions& options) {
  const char* op = "delta_rule_step";
  if (!options.cu_seqlens.empty())
    detail::fail(op, "options.cu_seqlens is given, expected none (a decoding state holds one sequence per batch row)");
  detail::check_decode_state(op, state, delta_name(options.gate), "delta_name(options.gate)", q, v);
  if (state.dtype() == DType::bf16)
    recurrent(op, out, q, k, v, beta, g, state.S_bf16(), options);
  else
    recurrent(op, out, q, k, v, beta, g, state.S(), options);
  state.set_position(state.position() + q.seq());
}

}  // namespace linattn
