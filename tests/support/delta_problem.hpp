#pragma once
// The delta rule's test problem (DeltaNet, Gated DeltaNet, KDA), shared by delta_rule_test and
// grouped_heads_test: a case (shapes, gate, numerics, layout, packed sequences, value heads per q/k
// head), its random tensors, the fp64 oracle's forward and backward, the fast chunked forward and
// backward, and their relative errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "linattn/delta.hpp"
#include "linattn/reference.hpp"
#include "support/finite_difference.hpp"
#include "support/tensors.hpp"

// In their own namespace: Case, Problem and Fast are every test's words.
namespace linattn::testing::delta {

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
  return delta_name(c.gate) + " B" + std::to_string(c.B) + " T" + std::to_string(c.T) + " H" + std::to_string(c.H) +
         (c.group > 1 ? " HV" + std::to_string(c.HV()) : "") + " K" + std::to_string(c.K) + " V" + std::to_string(c.V) +
         " C" + std::to_string(c.chunk) + " " + layout_name(c.layout) + (c.l2norm ? " l2norm" : "") + " g[" +
         std::to_string(c.g_lo) + "," + std::to_string(c.g_hi) + "] beta[" + std::to_string(c.beta_lo) + "," +
         std::to_string(c.beta_hi) + "]" + (c.cu_seqlens.empty() ? "" : " packed");
}

inline int64_t gate_cols(const Case& c) { return c.gate == DeltaGate::token ? 1 : c.gate == DeltaGate::key ? c.K : 0; }
inline int64_t sequences(const Case& c) { return c.cu_seqlens.empty() ? c.B : int64_t(c.cu_seqlens.size()) - 1; }

struct Problem {
  Case c;
  Tensor32 q, k, v, beta, g, dout;
  std::vector<float> initial, dfinal;
  DeltaRuleOptions options() const {
    DeltaRuleOptions o;
    o.gate = c.gate, o.qk_l2norm = c.l2norm, o.chunk_size = c.chunk, o.cu_seqlens = c.cu_seqlens;
    return o;
  }
  ConstTensorView gate() const { return gate_cols(c) > 0 ? ConstTensorView(g.view) : ConstTensorView{}; }
  size_t state_size() const { return size_t(sequences(c) * c.HV() * c.K * c.V); }
};

inline Problem make_problem(const Case& c, uint64_t seed = 1) {
  std::mt19937_64 rng(seed);
  Problem p{c,
            random_tensor({c.B, c.T, c.H, c.K}, c.layout, rng),
            random_tensor({c.B, c.T, c.H, c.K}, c.layout, rng, -c.key_scale, c.key_scale),
            random_tensor({c.B, c.T, c.HV(), c.V}, c.layout, rng),
            random_tensor({c.B, c.T, c.HV(), 1}, c.layout, rng, c.beta_lo, c.beta_hi),
            {},
            random_tensor({c.B, c.T, c.HV(), c.V}, c.layout, rng),
            {},
            {}};
  if (gate_cols(c) > 0) p.g = random_tensor({c.B, c.T, c.HV(), gate_cols(c)}, c.layout, rng, c.g_lo, c.g_hi);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (size_t i = 0; i < p.state_size(); ++i) p.initial.push_back(u(rng)), p.dfinal.push_back(u(rng));
  return p;
}

inline std::vector<double> widen(const std::vector<float>& x) { return {x.begin(), x.end()}; }

struct Oracle {
  reference::DecayedOutput forward;
  reference::DeltaGradients backward;
};
inline Oracle oracle(const Problem& p) {
  const reference::Tensor q = reference::to_double(p.q.view), k = reference::to_double(p.k.view),
                          v = reference::to_double(p.v.view), beta = reference::to_double(p.beta.view),
                          dout = reference::to_double(p.dout.view);
  reference::Tensor g;
  if (gate_cols(p.c) > 0) g = reference::to_double(p.g.view);
  const std::vector<double> initial = widen(p.initial), dfinal = widen(p.dfinal);
  const reference::Tensor* gp = gate_cols(p.c) > 0 ? &g : nullptr;
  return {reference::delta_rule_forward(q, k, v, beta, gp, p.options(), &initial),
          reference::delta_rule_backward(dout, &dfinal, q, k, v, beta, gp, p.options(), &initial)};
}

struct Fast {
  Tensor32 out, dq, dk, dv, dbeta, dg;
  std::vector<float> final_state, dinitial;
};
// The chunked forward and backward, with q and k as given (the problem's, or others of their batch and length:
// q and k repeated to HV heads).
inline Fast run_fast(const Problem& p, ConstTensorView q, ConstTensorView k) {
  const Case& c = p.c;
  Fast f{make_tensor({c.B, c.T, c.HV(), c.V}, c.layout),
         make_tensor(q.extent, c.layout),
         make_tensor(k.extent, c.layout),
         make_tensor({c.B, c.T, c.HV(), c.V}, c.layout),
         make_tensor({c.B, c.T, c.HV(), 1}, c.layout),
         {},
         std::vector<float>(p.state_size()),
         std::vector<float>(p.state_size())};
  if (gate_cols(c) > 0) f.dg = make_tensor({c.B, c.T, c.HV(), gate_cols(c)}, c.layout);
  delta_rule_forward(f.out.view, q, k, p.v.view, p.beta.view, p.gate(), p.options(), p.initial, f.final_state);
  delta_rule_backward(f.dq.view, f.dk.view, f.dv.view, f.dbeta.view, gate_cols(c) > 0 ? f.dg.view : TensorView{},
                      f.dinitial, p.dout.view, p.dfinal, q, k, p.v.view, p.beta.view, p.gate(), p.options(), p.initial);
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
          gate_cols(p.c) > 0 ? relative_error(f.dg.view, o.backward.dg) : 0.0,
          relative_error(f.dinitial, o.backward.dinitial_state)};
}

// The fp32 path against the oracle: every output and gradient within `tol` of its magnitude.
inline void expect_matches_oracle(const Case& c, double tol = 5e-5) {
  SCOPED_TRACE(describe(c));
  const Errors e = errors(make_problem(c));
  EXPECT_LT(e.out, tol) << "out";
  EXPECT_LT(e.final_state, tol) << "final_state";
  EXPECT_LT(e.dq, tol) << "dq";
  EXPECT_LT(e.dk, tol) << "dk";
  EXPECT_LT(e.dv, tol) << "dv";
  EXPECT_LT(e.dbeta, tol) << "dbeta";
  EXPECT_LT(e.dg, tol) << "dg";
  EXPECT_LT(e.dinitial, tol) << "dinitial_state";
}

// The oracle's backward is the derivative of its forward (loss = Σ out·dout + Σ final·dfinal): every gradient
// against central differences.
// The problem's own tensors (query groups: a q and dout of more heads in place of its own).
inline void expect_oracle_gradients_match_finite_differences(const Problem& p) {
  const Case& c = p.c;
  reference::Tensor q = reference::to_double(p.q.view), k = reference::to_double(p.k.view),
                    v = reference::to_double(p.v.view), beta = reference::to_double(p.beta.view),
                    dout = reference::to_double(p.dout.view), g;
  if (gate_cols(c) > 0) g = reference::to_double(p.g.view);
  std::vector<double> initial = widen(p.initial);
  const std::vector<double> dfinal = widen(p.dfinal);
  const DeltaRuleOptions options = p.options();
  reference::Tensor* gp = gate_cols(c) > 0 ? &g : nullptr;
  auto loss = [&] {
    const reference::DecayedOutput r = reference::delta_rule_forward(q, k, v, beta, gp, options, &initial);
    return output_loss(r.out.data, dout.data, r.final_state, dfinal);
  };
  const reference::DeltaGradients grads =
      reference::delta_rule_backward(dout, &dfinal, q, k, v, beta, gp, options, &initial);
  for (double e : scaled_gradient_errors({{&q.data, &grads.dq.data},
                                          {&k.data, &grads.dk.data},
                                          {&v.data, &grads.dv.data},
                                          {&beta.data, &grads.dbeta.data},
                                          {&initial, &grads.dinitial_state},
                                          {gp ? &g.data : nullptr, &grads.dg.data}},
                                         loss))
    EXPECT_LT(e, 1e-6);
}
inline void expect_oracle_gradients_match_finite_differences(const Case& c, uint64_t seed) {
  SCOPED_TRACE(describe(c));
  expect_oracle_gradients_match_finite_differences(make_problem(c, seed));
}

inline constexpr DeltaGate kAllGates[] = {DeltaGate::none, DeltaGate::token, DeltaGate::key};

}  // namespace linattn::testing::delta
