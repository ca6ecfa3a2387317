#pragma once
// The decayed family's test problem (RetNet, lightning attention, simple GLA, GLA: decayed_attention_test,
// decay_grouped_test): its case, its g_gamma, and its calls of the fast paths and the oracle on the shared
// problem of support/recurrence_problem.hpp.
#include "linattn/decay.hpp"
#include "support/recurrence_problem.hpp"  // gtest, the oracle, tensors and the standard headers used below

// In their own namespace: Case, Problem and Fast are every test's words.
namespace linattn::testing::decay {

using recurrence::sequences;
using recurrence::widen;

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
  return decay_name(c.decay) + recurrence::describe_shapes(c) + (c.cu_seqlens.empty() ? "" : " packed");
}

inline int64_t gate_cols(const Case& c) { return c.decay == Decay::token ? 1 : c.decay == Decay::key ? c.K : 0; }

// One problem: fp32 inputs (q, k, v, g, dout, the states: recurrence::Inputs) and, for the retention family's
// fixed decays, g_gamma [HV].
struct Problem : recurrence::Inputs {
  Case c;
  std::vector<float> g_gamma;
  DecayedAttentionOptions options() const {
    DecayedAttentionOptions o;
    o.decay = c.decay, o.chunk_size = c.chunk, o.g_gamma = g_gamma, o.cu_seqlens = c.cu_seqlens;
    return o;
  }
  size_t state_size() const { return recurrence::state_size(c); }
  void recurrent_forward(TensorView out, std::vector<float>& state) const {
    decayed_recurrent_forward(out, q.view, k.view, v.view, gate(), state, options());
  }
  // The chunked forward on slice(x) of every input, without packed sequences.
  template <class Slice>
  void forward_unpacked(TensorView out, Slice&& slice, std::span<const float> init, std::span<float> fin) const {
    DecayedAttentionOptions o = options();
    o.cu_seqlens = {};
    decayed_attention_forward(out, slice(q.view), slice(k.view), slice(v.view),
                              gate_cols > 0 ? slice(g.view) : ConstTensorView{}, o, init, fin);
  }
};

inline Problem make_problem(const Case& c, uint64_t seed = 1) {
  std::mt19937_64 rng(seed);
  Problem p{recurrence::random_inputs(c, gate_cols(c), rng), c, {}};
  std::uniform_real_distribution<float> gate(c.g_lo, c.g_hi);
  if (c.decay == Decay::head)
    for (int64_t h = 0; h < c.HV(); ++h) p.g_gamma.push_back(gate(rng));
  return p;
}

struct Oracle {
  reference::DecayedOutput forward;
  reference::DecayedGradients backward;
};
inline Oracle oracle(const Problem& p) {
  const recurrence::Inputs64 x = recurrence::inputs64(p);
  return {reference::decayed_attention_forward(x.q, x.k, x.v, x.gate(), p.options(), &x.initial),
          reference::decayed_attention_backward(x.dout, &x.dfinal, x.q, x.k, x.v, x.gate(), p.options(), &x.initial)};
}

using Fast = recurrence::Outputs;
// The chunked forward and backward, with q and k as given (the problem's, or others of their batch and length:
// q and k repeated to HV heads).
inline Fast run_fast(const Problem& p, ConstTensorView q, ConstTensorView k) {
  Fast f = recurrence::make_outputs(p.c, p.gate_cols, q, k);
  decayed_attention_forward(f.out.view, q, k, p.v.view, p.gate(), p.options(), p.initial, f.final_state);
  decayed_attention_backward(f.dq.view, f.dk.view, f.dv.view, f.dg_view(), f.dinitial, p.dout.view, p.dfinal, q, k,
                             p.v.view, p.gate(), p.options(), p.initial);
  return f;
}
inline Fast run_fast(const Problem& p) { return run_fast(p, p.q.view, p.k.view); }

// The fp32 path against the oracle: every output and gradient within `tol` of its magnitude.
inline void expect_matches_oracle(const Case& c, double tol = 2e-4) {
  SCOPED_TRACE(describe(c));
  const Problem p = make_problem(c);
  const Oracle o = oracle(p);
  const Fast f = run_fast(p);
  recurrence::expect_each_below({{"out", relative_error(f.out.view, o.forward.out)},
                                 {"final_state", relative_error(f.final_state, o.forward.final_state)},
                                 {"dq", relative_error(f.dq.view, o.backward.dq)},
                                 {"dk", relative_error(f.dk.view, o.backward.dk)},
                                 {"dv", relative_error(f.dv.view, o.backward.dv)},
                                 {"dinitial_state", relative_error(f.dinitial, o.backward.dinitial_state)},
                                 {"dg", p.gate_cols > 0 ? relative_error(f.dg.view, o.backward.dg) : 0.0}},
                                tol);
}

// The oracle's backward against central differences of its forward, within tol. The problem's own tensors
// (query groups: a q and dout of more heads in place of its own).
inline void expect_oracle_gradients_match_finite_differences(const Problem& p, double tol = 1e-7) {
  recurrence::Inputs64 x = recurrence::inputs64(p);
  const DecayedAttentionOptions options = p.options();
  recurrence::expect_oracle_gradients(
      x, [&] { return reference::decayed_attention_forward(x.q, x.k, x.v, x.gate(), options, &x.initial); },
      [&] {
        return reference::decayed_attention_backward(x.dout, &x.dfinal, x.q, x.k, x.v, x.gate(), options, &x.initial);
      },
      tol);
}
inline void expect_oracle_gradients_match_finite_differences(const Case& c, uint64_t seed, double tol = 1e-7) {
  SCOPED_TRACE(describe(c));
  expect_oracle_gradients_match_finite_differences(make_problem(c, seed), tol);
}

inline constexpr Decay kAllDecays[] = {Decay::none, Decay::retention, Decay::head, Decay::token, Decay::key};

}  // namespace linattn::testing::decay
