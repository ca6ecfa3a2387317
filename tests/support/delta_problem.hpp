#pragma once
// The delta rule's (DeltaNet, Gated DeltaNet, KDA: delta_rule_test, grouped_heads_test): its case with β and
// l2norm, and its calls on the shared problem (support/recurrence_problem.hpp), with their relative errors.
#include <algorithm>

#include "linattn/delta.hpp"
#include "support/recurrence_problem.hpp"  // gtest, the oracle, tensors and the standard headers used below

// In their own namespace: Case, Problem and Fast are every test's words.
namespace linattn::testing::delta {

using recurrence::sequences;
using recurrence::widen;

struct Case {
  int64_t B, T, H, K, V;
  DeltaGate gate;
  bool l2norm = true;
  int64_t chunk = 64;
  float g_lo = -0.7f, g_hi = 0.0f;       // log decays drawn in [g_lo, g_hi]
  float beta_lo = 0.0f, beta_hi = 1.0f;  // β drawn in [beta_lo, beta_hi]
  Layout layout = Layout::bnhd;
  std::vector<int64_t> cu_seqlens = {};
  float key_scale = 1.0f;  // k drawn in ±key_scale (unnormalised keys when l2norm is off)
  int64_t group = 1;       // value heads per q/k head: v, beta, g, out and the states have HV = H · group
  int64_t HV() const { return H * group; }
};

inline std::string describe(const Case& c) {
  return delta_name(c.gate) + recurrence::describe_shapes(c) + (c.l2norm ? " l2norm" : "") + " beta[" +
         std::to_string(c.beta_lo) + "," + std::to_string(c.beta_hi) + "]" + (c.cu_seqlens.empty() ? "" : " packed");
}

inline int64_t gate_cols(const Case& c) { return c.gate == DeltaGate::token ? 1 : c.gate == DeltaGate::key ? c.K : 0; }

// One problem: fp32 inputs (q, k, v, g, dout, the states: recurrence::Inputs) and β [B, T, HV, 1].
struct Problem : recurrence::Inputs {
  Case c;
  Tensor32 beta;
  DeltaRuleOptions options() const {
    DeltaRuleOptions o;
    o.gate = c.gate, o.qk_l2norm = c.l2norm, o.chunk_size = c.chunk, o.cu_seqlens = c.cu_seqlens;
    return o;
  }
  size_t state_size() const { return recurrence::state_size(c); }
  void recurrent_forward(TensorView out, std::vector<float>& state) const {
    delta_rule_recurrent_forward(out, q.view, k.view, v.view, beta.view, gate(), state, options());
  }
  // The chunked forward on slice(x) of every input, without packed sequences.
  template <class Slice>
  void forward_unpacked(TensorView out, Slice&& slice, std::span<const float> init, std::span<float> fin) const {
    DeltaRuleOptions o = options();
    o.cu_seqlens = {};
    delta_rule_forward(out, slice(q.view), slice(k.view), slice(v.view), slice(beta.view),
                       gate_cols > 0 ? slice(g.view) : ConstTensorView{}, o, init, fin);
  }
};

inline Problem make_problem(const Case& c, uint64_t seed = 1) {
  std::mt19937_64 rng(seed);
  Problem p{recurrence::random_inputs(c, gate_cols(c), rng, c.key_scale), c, {}};
  p.beta = random_tensor({c.B, c.T, c.HV(), 1}, c.layout, rng, c.beta_lo, c.beta_hi);
  return p;
}

struct Oracle {
  reference::DecayedOutput forward;
  reference::DeltaGradients backward;
};
inline Oracle oracle(const Problem& p) {
  const recurrence::Inputs64 x = recurrence::inputs64(p);
  const reference::Tensor beta = reference::to_double(p.beta.view);
  return {reference::delta_rule_forward(x.q, x.k, x.v, beta, x.gate(), p.options(), &x.initial),
          reference::delta_rule_backward(x.dout, &x.dfinal, x.q, x.k, x.v, beta, x.gate(), p.options(), &x.initial)};
}

struct Fast : recurrence::Outputs {
  Tensor32 dbeta;
};
// The chunked forward and backward, with q and k as given (the problem's, or others of their batch and length:
// q and k repeated to HV heads).
inline Fast run_fast(const Problem& p, ConstTensorView q, ConstTensorView k) {
  const Case& c = p.c;
  Fast f{recurrence::make_outputs(c, p.gate_cols, q, k), make_tensor({c.B, c.T, c.HV(), 1}, c.layout)};
  delta_rule_forward(f.out.view, q, k, p.v.view, p.beta.view, p.gate(), p.options(), p.initial, f.final_state);
  delta_rule_backward(f.dq.view, f.dk.view, f.dv.view, f.dbeta.view, f.dg_view(), f.dinitial, p.dout.view, p.dfinal, q,
                      k, p.v.view, p.beta.view, p.gate(), p.options(), p.initial);
  return f;
}
inline Fast run_fast(const Problem& p) { return run_fast(p, p.q.view, p.k.view); }

struct Errors {
  double out, final_state, dq, dk, dv, dbeta, dg, dinitial;
  double worst() const { return std::max({out, final_state, dq, dk, dv, dbeta, dg, dinitial}); }
};
inline Errors errors(const Problem& p) {
  const Oracle o = oracle(p);
  const Fast f = run_fast(p);
  return {relative_error(f.out.view, o.forward.out),
          relative_error(f.final_state, o.forward.final_state),
          relative_error(f.dq.view, o.backward.dq),
          relative_error(f.dk.view, o.backward.dk),
          relative_error(f.dv.view, o.backward.dv),
          relative_error(f.dbeta.view, o.backward.dbeta),
          p.gate_cols > 0 ? relative_error(f.dg.view, o.backward.dg) : 0.0,
          relative_error(f.dinitial, o.backward.dinitial_state)};
}

// The fp32 path against the oracle: every output and gradient within `tol` of its magnitude.
inline void expect_matches_oracle(const Case& c, double tol = 5e-5) {
  SCOPED_TRACE(describe(c));
  const Errors e = errors(make_problem(c));
  recurrence::expect_each_below({{"out", e.out},
                                 {"final_state", e.final_state},
                                 {"dq", e.dq},
                                 {"dk", e.dk},
                                 {"dv", e.dv},
                                 {"dbeta", e.dbeta},
                                 {"dg", e.dg},
                                 {"dinitial_state", e.dinitial}},
                                tol);
}

// The oracle's backward against central differences of its forward, within 1e-6. The problem's own tensors
// (query groups: a q and dout of more heads in place of its own).
inline void expect_oracle_gradients_match_finite_differences(const Problem& p) {
  recurrence::Inputs64 x = recurrence::inputs64(p);
  reference::Tensor beta = reference::to_double(p.beta.view);
  const DeltaRuleOptions options = p.options();
  reference::DeltaGradients grads;
  recurrence::expect_oracle_gradients(
      x, [&] { return reference::delta_rule_forward(x.q, x.k, x.v, beta, x.gate(), options, &x.initial); },
      [&] {
        grads = reference::delta_rule_backward(x.dout, &x.dfinal, x.q, x.k, x.v, beta, x.gate(), options, &x.initial);
        return grads;
      },
      1e-6, {&beta.data, &grads.dbeta.data});
}
inline void expect_oracle_gradients_match_finite_differences(const Case& c, uint64_t seed) {
  SCOPED_TRACE(describe(c));
  expect_oracle_gradients_match_finite_differences(make_problem(c, seed));
}

inline constexpr DeltaGate kAllGates[] = {DeltaGate::none, DeltaGate::token, DeltaGate::key};

}  // namespace linattn::testing::delta
