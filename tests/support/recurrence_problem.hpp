#pragma once
// What every recurrence family's test problem shares (support/decay_problem.hpp, support/delta_problem.hpp):
// the case's shapes in words, the random q, k, v, log decays, output gradient and states, the fast path's
// outputs and gradients, the inputs' fp64 copies for the oracle, the oracle against finite differences, and
// the checks every family runs alike (the token-by-token forward against the oracle, on 1 to 3 threads;
// packed sequences that do not leak). A family's case has the fields B, T, H, K, V, chunk, g_lo, g_hi,
// layout, cu_seqlens and HV(); its problem derives from Inputs and has options(), gate(),
// recurrent_forward(out, state) and forward_unpacked(out, slice, initial, final).
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <initializer_list>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "linattn/reference.hpp"
#include "support/finite_difference.hpp"
#include "support/packed.hpp"
#include "support/recurrence_threads.hpp"
#include "support/tensors.hpp"

namespace linattn::testing::recurrence {

template <class Case>
int64_t sequences(const Case& c) {
  return c.cu_seqlens.empty() ? c.B : int64_t(c.cu_seqlens.size()) - 1;
}
template <class Case>
size_t state_size(const Case& c) {
  return size_t(sequences(c) * c.HV() * c.K * c.V);
}

// " B2 T65 H2 [HV4] K7 V5 C32 bnhd g[lo,hi]": what follows the family's gate name in a trace.
template <class Case>
std::string describe_shapes(const Case& c) {
  return " B" + std::to_string(c.B) + " T" + std::to_string(c.T) + " H" + std::to_string(c.H) +
         (c.HV() != c.H ? " HV" + std::to_string(c.HV()) : "") + " K" + std::to_string(c.K) + " V" +
         std::to_string(c.V) + " C" + std::to_string(c.chunk) + " " + layout_name(c.layout) + " g[" +
         std::to_string(c.g_lo) + "," + std::to_string(c.g_hi) + "]";
}

inline std::vector<double> widen(const std::vector<float>& x) { return {x.begin(), x.end()}; }

// The inputs every recurrence reads: q, k [B, T, H, K], v and dout [B, T, HV, V], the log decays g
// [B, T, HV, gate_cols] (none when gate_cols is 0), the initial state and the final state's gradient.
struct Inputs {
  Tensor32 q, k, v, g, dout;
  std::vector<float> initial, dfinal;
  int64_t gate_cols = 0;
  ConstTensorView gate() const { return gate_cols > 0 ? ConstTensorView(g.view) : ConstTensorView{}; }
};

// Drawn in this order from rng: q, k (in ±key_scale), v, dout, g (in [g_lo, g_hi]), then the states, one
// value of each in turn (in ±1).
template <class Case>
Inputs random_inputs(const Case& c, int64_t gate_cols, std::mt19937_64& rng, float key_scale = 1.0f) {
  Inputs in{random_tensor({c.B, c.T, c.H, c.K}, c.layout, rng),
            random_tensor({c.B, c.T, c.H, c.K}, c.layout, rng, -key_scale, key_scale),
            random_tensor({c.B, c.T, c.HV(), c.V}, c.layout, rng),
            {},
            random_tensor({c.B, c.T, c.HV(), c.V}, c.layout, rng),
            {},
            {},
            gate_cols};
  if (gate_cols > 0) in.g = random_tensor({c.B, c.T, c.HV(), gate_cols}, c.layout, rng, c.g_lo, c.g_hi);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (size_t i = 0; i < state_size(c); ++i) in.initial.push_back(u(rng)), in.dfinal.push_back(u(rng));
  return in;
}

// The fp64 copies of the inputs, for the oracle.
struct Inputs64 {
  reference::Tensor q, k, v, g, dout;
  std::vector<double> initial, dfinal;
  bool gated = false;
  reference::Tensor* gate() { return gated ? &g : nullptr; }
  const reference::Tensor* gate() const { return gated ? &g : nullptr; }
};
inline Inputs64 inputs64(const Inputs& in) {
  Inputs64 x{reference::to_double(in.q.view),
             reference::to_double(in.k.view),
             reference::to_double(in.v.view),
             {},
             reference::to_double(in.dout.view),
             widen(in.initial),
             widen(in.dfinal),
             in.gate_cols > 0};
  if (x.gated) x.g = reference::to_double(in.g.view);
  return x;
}

// The outputs and gradients of the fast chunked forward and backward, sized for q and k as given (the
// problem's, or others of their batch and length: q and k repeated to HV heads).
struct Outputs {
  Tensor32 out, dq, dk, dv, dg;
  std::vector<float> final_state, dinitial;
  TensorView dg_view() const { return dg.storage.empty() ? TensorView{} : dg.view; }
};
template <class Case>
Outputs make_outputs(const Case& c, int64_t gate_cols, ConstTensorView q, ConstTensorView k) {
  Outputs f{make_tensor({c.B, c.T, c.HV(), c.V}, c.layout),
            make_tensor(q.extent, c.layout),
            make_tensor(k.extent, c.layout),
            make_tensor({c.B, c.T, c.HV(), c.V}, c.layout),
            {},
            std::vector<float>(state_size(c)),
            std::vector<float>(state_size(c))};
  if (gate_cols > 0) f.dg = make_tensor({c.B, c.T, c.HV(), gate_cols}, c.layout);
  return f;
}

// Each named error below tol.
inline void expect_each_below(std::initializer_list<std::pair<const char*, double>> errors, double tol) {
  for (const auto& [name, error] : errors) EXPECT_LT(error, tol) << name;
}

// The oracle's backward is the derivative of its forward (loss = Σ out·dout + Σ final·dfinal): every
// gradient against central differences, within tol. forward() gives the oracle's DecayedOutput and backward()
// its gradients (dq, dk, dv, dg, dinitial_state) at x as it stands; `own` is a family's own input and its
// gradient (β, dβ), or none.
template <class Forward, class Backward>
void expect_oracle_gradients(Inputs64& x, Forward&& forward, Backward&& backward, double tol,
                             std::pair<std::vector<double>*, const std::vector<double>*> own = {}) {
  auto loss = [&] {
    const reference::DecayedOutput r = forward();
    return output_loss(r.out.data, x.dout.data, r.final_state, x.dfinal);
  };
  const auto grads = backward();
  for (double e : scaled_gradient_errors({{&x.q.data, &grads.dq.data},
                                          {&x.k.data, &grads.dk.data},
                                          {&x.v.data, &grads.dv.data},
                                          {&x.initial, &grads.dinitial_state},
                                          {x.gated ? &x.g.data : nullptr, &grads.dg.data},
                                          own},
                                         loss))
    EXPECT_LT(e, tol);
}

// The token-by-token forward from the problem's initial state: out and the final state against the oracle;
// over_threads: on 1, 2 and 3 threads, each bit for bit the single thread's result.
template <class Case>
void expect_recurrent_matches_oracle(const Case& c, bool over_threads = false) {
  SCOPED_TRACE(describe(c));
  const auto p = make_problem(c);
  const auto o = oracle(p);
  auto run = [&](TensorView out, std::vector<float>& state) { p.recurrent_forward(out, state); };
  const std::array<int64_t, 4> out_extent{c.B, c.T, c.HV(), c.V};
  if (over_threads)
    expect_recurrence_over_threads(out_extent, c.layout, p.initial, o.forward.out, o.forward.final_state, run);
  else
    expect_recurrence(out_extent, c.layout, p.initial, o.forward.out, o.forward.final_state, run);
}

// A packed case (c.cu_seqlens given): the chunked forward and backward against the oracle, and each sequence
// alone gives the packed run's rows: nothing crosses a boundary.
template <class Case>
void expect_packed_sequences_match_and_do_not_leak(const Case& c) {
  expect_matches_oracle(c);
  const auto packed = make_problem(c);
  const auto whole = run_fast(packed);
  expect_each_sequence_alone(c.cu_seqlens, {c.HV(), c.K, c.V}, packed.initial, whole.out.view, whole.final_state,
                             [&](TensorView out, auto slice, std::span<const float> init, std::span<float> fin) {
                               packed.forward_unpacked(out, slice, init, fin);
                             });
}

}  // namespace linattn::testing::recurrence
