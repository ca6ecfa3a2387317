// The delta rule token by token: per sequence, head and token, S ← P + β k (v − Pᵀk)ᵀ with
// P = diag(a) S, and o = (scale · q)ᵀ S, in two sweeps over S (kernels::delta_update_readout), in place or
// from the caller's initial state into a fresh one (detail::TokenStates).
// Constant memory per token; the decode path and flash-linear-attention's fused_recurrent_*. With query groups
// (q and out with R·H heads) each state advances once a token and each of its R query heads reads it out.
#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "core/validate.hpp"
#include "kernels/decay_factors.hpp"
#include "kernels/half_views.hpp"
#include "kernels/pack.hpp"
#include "kernels/rows.hpp"
#include "linattn/half_attention.hpp"
#include "ops/delta/delta_checks.hpp"
#include "ops/recurrence/recurrent_tasks.hpp"

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

// The tokens of every sequence of p. I: the element type of the views (float, bf16 or f16: half rows are
// widened as a token is packed and o rounded as it is stored, the same bits as the fp32 operator on the
// widened values); T: the states' (float, or bf16 for a decoding state kept in half the bytes).
template <class I, class T>
void recurrent(const detail::DeltaProblem& p, View4<I> out, View4<const I> q, View4<const I> k, View4<const I> v,
               View4<const I> beta, View4<const I> g, const detail::TokenStates<T>& states) {
  const int64_t K = p.K, V = p.V;
  detail::token_sweep(
      p, out, q, k, v, g, states, 1.0f, [](detail::TokenRows&, int64_t, int64_t) {},
      [&](detail::TokenRows& rows) {  // each q/k head once, however many value heads read it
        normalise(rows.q, rows.factors, rows.qk_rows, K, p.qk_l2norm, p.scale);
        normalise(rows.k, rows.factors, rows.qk_rows, K, p.qk_l2norm, 1.0f);
      },
      [&](detail::TokenRows& rows, int64_t r, auto* S, const auto* before, int64_t b, int64_t t) {
        kernels::delta_update_readout(rows.o + r * V, S, rows.k_row(r), rows.v + r * V, rows.q_row(r),
                                      kernels::widened(beta(b, t, rows.first + r, 0)), K, V,
                                      p.gate_cols() > 0 ? rows.a + r * K : nullptr, before);
      },
      [&](detail::TokenRows& rows, float* x) { normalise(x, rows.factors, rows.qk_rows, K, p.qk_l2norm, p.scale); });
}

// The checks of an fp32 call: shapes, the size of the state it writes (`state`, named by its region) and of
// `initial` (an out-of-place call's initial_state; empty: none), and no output sharing memory with another or an
// input.
detail::DeltaProblem check_call(const char* op, TensorView out, ConstTensorView q, ConstTensorView k, ConstTensorView v,
                                ConstTensorView beta, ConstTensorView g, size_t state_size, boundary::Region state,
                                const DeltaRuleOptions& options, std::span<const float> initial = {}) {
  const detail::DeltaProblem p = detail::check_delta_arguments(op, q, k, v, beta, g, options);
  detail::check_recurrence_output(op, "out", out, q, v);
  detail::check_token_state(op, state_size, p, state.name);
  detail::check_state_span(op, "initial_state", initial.size(), p);
  const boundary::Region outputs[] = {boundary::region("out", out), state};
  std::vector<boundary::Region> inputs = detail::input_regions(q, k, v, {{"g", g}, {"beta", beta}});
  inputs.push_back(boundary::region("initial_state", initial));
  detail::check_outputs(op, outputs, inputs);
  return p;
}

// The checks of a half call, on the half views themselves (nothing is copied), then the same shape checks.
template <HalfType H>
detail::DeltaProblem check_call(const char* op, View4<H> out, HalfIn<H> q, HalfIn<H> k, HalfIn<H> v, HalfIn<H> beta,
                                HalfIn<H> g, size_t state_size, boundary::Region state,
                                const DeltaRuleOptions& options) {
  kernels::HalfCall<H> c(op);
  c.in_place("q", q), c.in_place("k", k), c.in_place("v", v), c.in_place("beta", beta), c.out_in_place("out", out);
  if (g.data) c.in_place("g", g);
  c.out_region(state);
  c.check();
  using kernels::shape_view;
  const detail::DeltaProblem p = detail::check_delta_arguments(op, shape_view(q), shape_view(k), shape_view(v),
                                                               shape_view(beta), shape_view(g), options);
  detail::check_recurrence_output(op, "out", shape_view(out), shape_view(q), shape_view(v));
  detail::check_token_state(op, state_size, p);
  return p;
}

// A decode step's state, of either storage: out, q, k, v, beta, g of element type I.
template <class I>
void step(const char* op, View4<I> out, View4<const I> q, View4<const I> k, View4<const I> v, View4<const I> beta,
          View4<const I> g, RecurrentState& state, const DeltaRuleOptions& options) {
  using kernels::shape_view;
  detail::decode_step<I>(
      op, state, !options.cu_seqlens.empty(), delta_name(options.gate), "delta_name(options.gate)", shape_view(q),
      shape_view(v), true,
      [&](const detail::DecodeState& S) { return check_call(op, out, q, k, v, beta, g, S.size, S.region, options); },
      [&](const detail::DeltaProblem& p, auto S) { recurrent(p, out, q, k, v, beta, g, detail::TokenStates{S}); });
}

}  // namespace

void delta_rule_recurrent_forward(TensorView out, ConstTensorView q, ConstTensorView k, ConstTensorView v,
                                  ConstTensorView beta, ConstTensorView g, std::span<float> state,
                                  const DeltaRuleOptions& options) {
  const char* op = "delta_rule_recurrent_forward";
  const detail::DeltaProblem p =
      check_call(op, out, q, k, v, beta, g, state.size(), boundary::region("state", state), options);
  recurrent(p, out, q, k, v, beta, g, detail::TokenStates{state});
}

void delta_rule_recurrent_forward(TensorView out, ConstTensorView q, ConstTensorView k, ConstTensorView v,
                                  ConstTensorView beta, ConstTensorView g, std::span<const float> initial_state,
                                  std::span<float> final_state, const DeltaRuleOptions& options) {
  const char* op = "delta_rule_recurrent_forward";
  const detail::DeltaProblem p = check_call(op, out, q, k, v, beta, g, final_state.size(),
                                            boundary::region("final_state", final_state), options, initial_state);
  if (initial_state.empty()) std::fill(final_state.begin(), final_state.end(), 0.0f);  // zero, then in place
  recurrent(p, out, q, k, v, beta, g, detail::TokenStates<float>{final_state, initial_state});
}

template <HalfType H>
void delta_rule_recurrent_forward(View4<H> out, HalfIn<H> q, HalfIn<H> k, HalfIn<H> v, HalfIn<H> beta, HalfIn<H> g,
                                  std::span<float> state, const DeltaRuleOptions& options) {
  const char* op = "delta_rule_recurrent_forward";
  const detail::DeltaProblem p =
      check_call(op, out, q, k, v, beta, g, state.size(), boundary::region("state", state), options);
  recurrent(p, out, q, k, v, beta, g, detail::TokenStates{state});
}

void delta_rule_step(TensorView out, ConstTensorView q, ConstTensorView k, ConstTensorView v, ConstTensorView beta,
                     ConstTensorView g, RecurrentState& state, const DeltaRuleOptions& options) {
  step("delta_rule_step", out, q, k, v, beta, g, state, options);
}

template <HalfType H>
void delta_rule_step(View4<H> out, HalfIn<H> q, HalfIn<H> k, HalfIn<H> v, HalfIn<H> beta, HalfIn<H> g,
                     RecurrentState& state, const DeltaRuleOptions& options) {
  step("delta_rule_step", out, q, k, v, beta, g, state, options);
}

#define LINATTN_DELTA_RECURRENT_HALF(H)                                                                      \
  template void delta_rule_recurrent_forward<H>(View4<H>, View4<const H>, View4<const H>, View4<const H>,    \
                                                View4<const H>, View4<const H>, std::span<float>,            \
                                                const DeltaRuleOptions&);                                    \
  template void delta_rule_step<H>(View4<H>, View4<const H>, View4<const H>, View4<const H>, View4<const H>, \
                                   View4<const H>, RecurrentState&, const DeltaRuleOptions&);
LINATTN_DELTA_RECURRENT_HALF(bf16)
LINATTN_DELTA_RECURRENT_HALF(f16)
#undef LINATTN_DELTA_RECURRENT_HALF

}  // namespace linattn
