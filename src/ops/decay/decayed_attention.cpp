// The decayed family's chunked drivers: the boundary check, then per (sequence, head) a sweep of
// chunks (decay_chunk.hpp). The forward carries the state S: [K, V] from chunk to chunk; the backward
// runs the chunks forward once for the state before each, then in reverse with the state's gradient,
// and forms dg from each token's ∂L/∂b by a reverse cumulative sum. Work is split over (sequence, head)
// only, so every head's arithmetic is the same for any thread count.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/validate.hpp"
#include "ops/decay/decay_checks.hpp"
#include "ops/decay/decay_chunk.hpp"

namespace linattn {
namespace {

using detail::DecayChunk;
using detail::DecayHead;
using detail::DecayProblem;

// The inputs' regions for the aliasing check (g only where the decay has a gate tensor).
std::vector<boundary::Region> input_regions(ConstTensorView q, ConstTensorView k, ConstTensorView v,
                                            ConstTensorView g) {
  std::vector<boundary::Region> r{boundary::region("q", q), boundary::region("k", k), boundary::region("v", v)};
  if (g.data) r.push_back(boundary::region("g", g));
  return r;
}

// Copies state (b, h) of `from` ([N, H, K, V], empty: zero) into S: [K, Vp].
void load_state(float* S, int64_t Vp, std::span<const float> from, const DecayProblem& p, int64_t index) {
  for (int64_t c = 0; c < p.K; ++c) {
    float* row = S + c * Vp;
    if (from.empty())
      std::fill_n(row, Vp, 0.0f);
    else
      std::copy_n(from.data() + (index * p.K + c) * p.V, p.V, row), std::fill(row + p.V, row + Vp, 0.0f);
  }
}
void store_state(std::span<float> to, const float* S, int64_t Vp, const DecayProblem& p, int64_t index) {
  if (to.empty()) return;
  for (int64_t c = 0; c < p.K; ++c) std::copy_n(S + c * Vp, p.V, to.data() + (index * p.K + c) * p.V);
}

// out[c] (or out[0], one gate per token) += Σ_v dS_T ⊙ a_T S_{T−1}: the last token's gate gradient from
// the final state. S_last: the state before the last chunk, which starts at t_last.
void final_gate_share(DecayChunk& chunk, const DecayHead& x, const detail::DecaySequence& s, const float* S_last,
                      int64_t t_last, const float* dS, double* out) {
  const DecayProblem& p = chunk.problem();
  const int64_t Vp = chunk.Vp(), T = s.end - 1;
  std::vector<float> S(S_last, S_last + p.K * Vp);
  if (T > t_last) {  // the last chunk's tokens before T
    chunk.load(x, t_last, T, T - t_last);
    chunk.advance(S.data());
  }
  const float* g = x.g.data + x.g.offset(x.b, T, x.h, 0);
  for (int64_t c = 0; c < p.K; ++c) {
    const double a = std::exp(double(g[(p.decay == Decay::key ? c : 0) * x.g.stride[3]]));
    double sum = 0;
    for (int64_t e = 0; e < p.V; ++e) sum += double(dS[c * Vp + e]) * S[size_t(c * Vp + e)];
    out[p.decay == Decay::key ? c : 0] += a * sum;
  }
}

// Runs body(chunk, head, state index) for every (sequence, head), over the threads.
template <class Body>
void for_each_head(const DecayProblem& p, const DecayedAttentionOptions& options, bool backward, ConstTensorView q,
                   ConstTensorView k, ConstTensorView v, ConstTensorView g, Body body) {
  const int64_t tasks = int64_t(p.sequences.size()) * p.H;
#pragma omp parallel if (tasks > 1)
  {
    DecayChunk chunk(p, options, backward);
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < tasks; ++task) {
      const detail::DecaySequence& s = p.sequences[size_t(task / p.H)];
      const int64_t h = task % p.H;
      body(chunk, DecayHead{q, k, v, g, s.b, h}, s, s.n * p.H + h);
    }
  }
}

}  // namespace

void decayed_attention_forward(TensorView out, ConstTensorView q, ConstTensorView k, ConstTensorView v,
                               ConstTensorView g, const DecayedAttentionOptions& options,
                               std::span<const float> initial_state, std::span<float> final_state) {
  const char* op = "decayed_attention_forward";
  const DecayProblem p = detail::check_decay_arguments(op, q, k, v, g, options);
  detail::check_output_shape(op, "out", out, q, v);
  detail::check_decay_state(op, "initial_state", initial_state.size(), p);
  detail::check_decay_state(op, "final_state", final_state.size(), p);
  std::vector<boundary::Region> inputs = input_regions(q, k, v, g);
  inputs.push_back(boundary::region("initial_state", initial_state));
  const boundary::Region outputs[] = {boundary::region("out", out), boundary::region("final_state", final_state)};
  detail::check_outputs(op, outputs, inputs);
  for_each_head(p, options, false, q, k, v, g,
                [&](DecayChunk& chunk, const DecayHead& x, const detail::DecaySequence& s, int64_t index) {
                  std::vector<float> S(size_t(p.K * chunk.Vp()));
                  load_state(S.data(), chunk.Vp(), initial_state, p, index);
                  for (int64_t t = s.begin; t < s.end;) {
                    const int64_t n = chunk.load(x, t, s.end);
                    chunk.forward(S.data(), out, x, t);
                    t += n;
                  }
                  store_state(final_state, S.data(), chunk.Vp(), p, index);
                });
}

void decayed_attention_backward(TensorView dq, TensorView dk, TensorView dv, TensorView dg,
                                std::span<float> dinitial_state, ConstTensorView dout,
                                std::span<const float> dfinal_state, ConstTensorView q, ConstTensorView k,
                                ConstTensorView v, ConstTensorView g, const DecayedAttentionOptions& options,
                                std::span<const float> initial_state) {
  const char* op = "decayed_attention_backward";
  const DecayProblem p = detail::check_decay_arguments(op, q, k, v, g, options);
  detail::check_output_shape(op, "dout", dout, q, v);
  detail::check_like(op, "dq", dq, q, "q");
  detail::check_like(op, "dk", dk, k, "k");
  detail::check_like(op, "dv", dv, v, "v");
  const int64_t cols = p.gate_cols();
  if (cols > 0)
    detail::check_like(op, "dg", dg, g, "g");
  else if (dg.data)
    detail::fail_with(op, "dg is given for decay '", decay_name(p.decay), "', expected an empty view (no gate tensor)");
  detail::check_decay_state(op, "initial_state", initial_state.size(), p);
  detail::check_decay_state(op, "dfinal_state", dfinal_state.size(), p);
  detail::check_decay_state(op, "dinitial_state", dinitial_state.size(), p);
  std::vector<boundary::Region> inputs = input_regions(q, k, v, g);
  for (const boundary::Region& r : {boundary::region("dout", dout), boundary::region("dfinal_state", dfinal_state),
                                    boundary::region("initial_state", initial_state)})
    inputs.push_back(r);
  std::vector<boundary::Region> outputs{boundary::region("dq", dq), boundary::region("dk", dk),
                                        boundary::region("dv", dv), boundary::region("dinitial_state", dinitial_state)};
  if (cols > 0) outputs.push_back(boundary::region("dg", dg));
  detail::check_outputs(op, outputs, inputs);
  for_each_head(p, options, true, q, k, v, g,
                [&](DecayChunk& chunk, const DecayHead& x, const detail::DecaySequence& s, int64_t index) {
                  const int64_t KVp = p.K * chunk.Vp();
                  // The state before each chunk (and after the last), and each chunk's start.
                  // Reused from head to head (a thread's heads are alike): no reallocation, no page faults.
                  std::vector<float>& states = chunk.states();
                  states.clear();
                  states.reserve(size_t((s.end - s.begin) / std::max<int64_t>(options.chunk_size, 1) + 2) * KVp);
                  states.resize(size_t(KVp));
                  std::vector<int64_t> starts{s.begin};
                  load_state(states.data(), chunk.Vp(), initial_state, p, index);
                  for (int64_t t = s.begin; t < s.end;) {
                    t += chunk.load(x, t, s.end);
                    states.resize(states.size() + size_t(KVp));
                    std::copy_n(states.end() - 2 * KVp, KVp, states.end() - KVp);
                    chunk.advance(states.data() + states.size() - KVp);
                    starts.push_back(t);
                  }
                  std::vector<float> dS(static_cast<size_t>(KVp));
                  load_state(dS.data(), chunk.Vp(), dfinal_state, p, index);
                  std::vector<double> gate_grad(size_t((s.end - s.begin) * cols), 0.0);
                  // The final state's part of ∂L/∂b at the last token T: Σ_v dS_T ⊙ a_T S_{T−1}, with a_T S_{T−1}
                  // formed directly (S_T − k_T v_Tᵀ would cancel two O(1) terms under strong decay).
                  if (cols > 0 && starts.size() >= 2)
                    final_gate_share(chunk, x, s, states.data() + (starts.size() - 2) * size_t(KVp),
                                     starts[starts.size() - 2], dS.data(),
                                     gate_grad.data() + (s.end - s.begin - 1) * cols);
                  for (int64_t i = int64_t(starts.size()) - 2; i >= 0; --i) {
                    const int64_t t0 = starts[size_t(i)], n = starts[size_t(i) + 1] - t0;
                    chunk.load(x, t0, s.end, n);
                    chunk.backward(states.data() + i * KVp, dS.data(), dout, dq, dk, dv,
                                   gate_grad.data() + (t0 - s.begin) * cols, i == int64_t(starts.size()) - 2, x, t0);
                  }
                  store_state(dinitial_state, dS.data(), chunk.Vp(), p, index);
                  // dg_t = Σ_{u ≥ t} ∂L/∂b_u: b_u is the sum of g up to u.
                  if (cols > 0) {
                    std::vector<double> sum(static_cast<size_t>(cols), 0.0);
                    for (int64_t t = s.end - 1; t >= s.begin; --t) {
                      float* row = dg.data + dg.offset(s.b, t, x.h, 0);
                      for (int64_t c = 0; c < cols; ++c) {
                        sum[size_t(c)] += gate_grad[size_t((t - s.begin) * cols + c)];
                        row[c * dg.stride[3]] = float(sum[size_t(c)]);
                      }
                    }
                  }
                });
}

}  // namespace linattn
