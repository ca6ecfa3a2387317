// The delta rule token by token: per (sequence, head) and token, S ← P + β k (v − Pᵀk)ᵀ with
// P = diag(a) S, and o = (scale · q)ᵀ S, in two sweeps over S (kernels::delta_update_readout).
// Constant memory per token; the decode path and flash-linear-attention's fused_recurrent_*.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/validate.hpp"
#include "kernels/decay_factors.hpp"
#include "kernels/pack.hpp"
#include "kernels/rows.hpp"
#include "ops/delta/delta_checks.hpp"

namespace linattn {
namespace {

// x ← x · factor / sqrt(Σ x² + ε) (flash-linear-attention's l2norm), or x · factor.
void normalise(float* x, int64_t n, bool l2norm, float factor) {
  float sum = 0;
  if (l2norm) kernels::row_dots(&sum, x, n, x, 1, n);
  const float f = l2norm ? float(factor / std::sqrt(double(sum) + detail::kL2NormEps)) : factor;
  for (int64_t i = 0; i < n; ++i) x[i] *= f;
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
  const int64_t tasks = int64_t(p.sequences.size()) * p.H, K = p.K, V = p.V, cols = p.gate_cols();
#pragma omp parallel if (tasks > 1 && p.T * K * V >= (1 << 16))
  {
    // One scratch per thread for all its heads: a decode step allocates nothing per head.
    std::vector<float> buffer(size_t(5 * K + 2 * V), 0.0f);
    float *qs = buffer.data(), *ks = qs + K, *a = ks + K, *gs = a + K, *ones = gs + K, *vs = ones + K, *o = vs + V;
    std::fill_n(ones, K, 1.0f);
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < tasks; ++task) {
      const detail::DecaySequence& s = p.sequences[size_t(task / p.H)];
      const int64_t h = task % p.H;
      T* S = state.data() + (s.n * p.H + h) * K * V;
      for (int64_t t = s.begin; t < s.end; ++t) {
        kernels::pack_rows({qs, K, 1, K}, kernels::head_rows(q, s.b, h), t, 1);
        kernels::pack_rows({ks, K, 1, K}, kernels::head_rows(k, s.b, h), t, 1);
        kernels::pack_rows({vs, V, 1, V}, kernels::head_rows(v, s.b, h), t, 1);
        normalise(qs, K, p.qk_l2norm, p.scale), normalise(ks, K, p.qk_l2norm, 1.0f);
        if (cols > 0) {
          kernels::pack_rows({gs, cols, 1, cols}, kernels::head_rows(g, s.b, h), t, 1);
          if (cols == 1)
            std::fill_n(a, K, std::exp(gs[0]));
          else
            kernels::mul_exp_difference(a, ones, gs, nullptr, 1.0f, K);  // a = e^{g}, vectorised
        }
        kernels::delta_update_readout(o, S, ks, vs, qs, beta(s.b, t, h, 0), K, V, cols > 0 ? a : nullptr);
        kernels::unpack_rows(kernels::head_rows(out, s.b, h), t, {o, V, 1, V}, 1);
      }
    }
  }
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
