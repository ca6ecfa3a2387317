#pragma once
// The decayed family's test problem (RetNet, lightning attention, simple GLA, GLA), shared by
// decayed_attention_test and decay_grouped_test: a case (shapes, decay, numerics, layout, packed sequences,
// value heads per q/k head), its random tensors, the fp64 oracle's forward and backward, the fast chunked
// forward and backward, and the oracle against finite differences.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "linattn/decay.hpp"
#include "linattn/reference.hpp"
#include "support/finite_difference.hpp"
#include "support/tensors.hpp"

// In their own namespace: Case, Problem and Fast are every test's words.
namespace linattn::testing::decay {

struct Case {
  int64_t B, T, H, K, V;
  Decay decay;
  int64_t chunk = 64;
  float g_lo = -0.7f, g_hi = 0.0f;  // log decays drawn in [g_lo, g_hi]
  Layout layout = Layout::bnhd;
  std::vector<int64_t> cu_seqlens = {};
  int64_t group = 1;  // value heads per q/k head: v, g, g_gamma, out and the states have HV = H · group
  int64_t HV() const { return H * group; }
};

inline std::string describe(const Case& c) {
  return decay_name(c.decay) + " B" + std::to_string(c.B) + " T" + std::to_string(c.T) + " H" + std::to_string(c.H) +
         (c.group > 1 ? " HV" + std::to_string(c.HV()) : "") + " K" + std::to_string(c.K) + " V" + std::to_string(c.V) +
         " C" + std::to_string(c.chunk) + " " + layout_name(c.layout) + " g[" + std::to_string(c.g_lo) + "," +
         std::to_string(c.g_hi) + "]" + (c.cu_seqlens.empty() ? "" : " packed");
}

inline int64_t gate_cols(const Case& c) { return c.decay == Decay::token ? 1 : c.decay == Decay::key ? c.K : 0; }
inline int64_t sequences(const Case& c) { return c.cu_seqlens.empty() ? c.B : int64_t(c.cu_seqlens.size()) - 1; }

// One problem: fp32 inputs (and their fp64 copies for the oracle), an initial state, a final-state
// gradient and an output gradient.
struct Problem {
  Case c;
  Tensor32 q, k, v, g, dout;
  std::vector<float> g_gamma, initial, dfinal;
  DecayedAttentionOptions options() const {
    DecayedAttentionOptions o;
    o.decay = c.decay, o.chunk_size = c.chunk, o.g_gamma = g_gamma, o.cu_seqlens = c.cu_seqlens;
    return o;
  }
  ConstTensorView gate() const { return gate_cols(c) > 0 ? ConstTensorView(g.view) : ConstTensorView{}; }
  size_t state_size() const { return size_t(sequences(c) * c.HV() * c.K * c.V); }
};

inline Problem make_problem(const Case& c, uint64_t seed = 1) {
  std::mt19937_64 rng(seed);
  Problem p{c,
            random_tensor({c.B, c.T, c.H, c.K}, c.layout, rng),
            random_tensor({c.B, c.T, c.H, c.K}, c.layout, rng),
            random_tensor({c.B, c.T, c.HV(), c.V}, c.layout, rng),
            {},
            random_tensor({c.B, c.T, c.HV(), c.V}, c.layout, rng),
            {},
            {},
            {}};
  if (gate_cols(c) > 0) p.g = random_tensor({c.B, c.T, c.HV(), gate_cols(c)}, c.layout, rng, c.g_lo, c.g_hi);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f), gate(c.g_lo, c.g_hi);
  if (c.decay == Decay::head)
    for (int64_t h = 0; h < c.HV(); ++h) p.g_gamma.push_back(gate(rng));
  for (size_t i = 0; i < p.state_size(); ++i) p.initial.push_back(u(rng)), p.dfinal.push_back(u(rng));
  return p;
}

inline std::vector<double> widen(const std::vector<float>& x) { return {x.begin(), x.end()}; }

struct Oracle {
  reference::DecayedOutput forward;
  reference::DecayedGradients backward;
};
inline Oracle oracle(const Problem& p) {
  const reference::Tensor q = reference::to_double(p.q.view), k = reference::to_double(p.k.view),
                          v = reference::to_double(p.v.view), dout = reference::to_double(p.dout.view);
  reference::Tensor g;
  if (gate_cols(p.c) > 0) g = reference::to_double(p.g.view);
  const std::vector<double> initial = widen(p.initial), dfinal = widen(p.dfinal);
  const reference::Tensor* gp = gate_cols(p.c) > 0 ? &g : nullptr;
  return {reference::decayed_attention_forward(q, k, v, gp, p.options(), &initial),
          reference::decayed_attention_backward(dout, &dfinal, q, k, v, gp, p.options(), &initial)};
}

struct Fast {
  Tensor32 out, dq, dk, dv, dg;
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
         {},
         std::vector<float>(p.state_size()),
         std::vector<float>(p.state_size())};
  if (gate_cols(c) > 0) f.dg = make_tensor({c.B, c.T, c.HV(), gate_cols(c)}, c.layout);
  decayed_attention_forward(f.out.view, q, k, p.v.view, p.gate(), p.options(), p.initial, f.final_state);
  decayed_attention_backward(f.dq.view, f.dk.view, f.dv.view, gate_cols(c) > 0 ? f.dg.view : TensorView{}, f.dinitial,
                             p.dout.view, p.dfinal, q, k, p.v.view, p.gate(), p.options(), p.initial);
  return f;
}
inline Fast run_fast(const Problem& p) { return run_fast(p, p.q.view, p.k.view); }

// The fp32 path against the oracle: every output and gradient within `tol` of its magnitude.
inline void expect_matches_oracle(const Case& c, double tol = 2e-4) {
  SCOPED_TRACE(describe(c));
  const Problem p = make_problem(c);
  const Oracle o = oracle(p);
  const Fast f = run_fast(p);
  EXPECT_LT(relative_error(f.out.view, o.forward.out), tol) << "out";
  EXPECT_LT(relative_error(f.final_state, o.forward.final_state), tol) << "final_state";
  EXPECT_LT(relative_error(f.dq.view, o.backward.dq), tol) << "dq";
  EXPECT_LT(relative_error(f.dk.view, o.backward.dk), tol) << "dk";
  EXPECT_LT(relative_error(f.dv.view, o.backward.dv), tol) << "dv";
  EXPECT_LT(relative_error(f.dinitial, o.backward.dinitial_state), tol) << "dinitial_state";
  if (gate_cols(c) > 0) {
    EXPECT_LT(relative_error(f.dg.view, o.backward.dg), tol) << "dg";
  }
}

// The oracle's backward is the derivative of its forward (loss = Σ out·dout + Σ final·dfinal): every gradient
// against central differences, within tol.
// The problem's own tensors (query groups: a q and dout of more heads in place of its own).
inline void expect_oracle_gradients_match_finite_differences(const Problem& p, double tol = 1e-7) {
  const Case& c = p.c;
  reference::Tensor q = reference::to_double(p.q.view), k = reference::to_double(p.k.view),
                    v = reference::to_double(p.v.view), dout = reference::to_double(p.dout.view), g;
  if (gate_cols(c) > 0) g = reference::to_double(p.g.view);
  std::vector<double> initial = widen(p.initial);
  const std::vector<double> dfinal = widen(p.dfinal);
  const DecayedAttentionOptions options = p.options();
  reference::Tensor* gp = gate_cols(c) > 0 ? &g : nullptr;
  auto loss = [&] {
    const reference::DecayedOutput r = reference::decayed_attention_forward(q, k, v, gp, options, &initial);
    return output_loss(r.out.data, dout.data, r.final_state, dfinal);
  };
  const reference::DecayedGradients grads =
      reference::decayed_attention_backward(dout, &dfinal, q, k, v, gp, options, &initial);
  for (double e : scaled_gradient_errors({{&q.data, &grads.dq.data},
                                          {&k.data, &grads.dk.data},
                                          {&v.data, &grads.dv.data},
                                          {&initial, &grads.dinitial_state},
                                          {gp ? &g.data : nullptr, &grads.dg.data}},
                                         loss))
    EXPECT_LT(e, tol);
}
inline void expect_oracle_gradients_match_finite_differences(const Case& c, uint64_t seed, double tol = 1e-7) {
  SCOPED_TRACE(describe(c));
  expect_oracle_gradients_match_finite_differences(make_problem(c, seed), tol);
}

inline constexpr Decay kAllDecays[] = {Decay::none, Decay::retention, Decay::head, Decay::token, Decay::key};

}  // namespace linattn::testing::decay
