#pragma once
// The walk that every recurrence family's fp64 oracle shares, token by token from the formulas (no
// chunks, no SIMD, nothing of the fast path): per (sequence, head) the state S: [K, V] goes from the
// initial state through the family's own step S_t = f(S_{t−1}, token t), and every family reads out
// o_t = scale · S_tᵀ q_t. The backward keeps every state of a sequence (the oracles are for small
// problems), runs the read-out's gradients and hands the family's step back its own. h counts the value
// heads; q is read at head p.qk_head(h) (grouped value heads), and its gradient sums over the group. With
// query groups the state of head h is read out by each of its query heads p.q_head(h, r) into out's head
// p.out_head(h, r), and the backward takes each read-out's share in turn.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "linattn/reference.hpp"
#include "ops/recurrence/recurrence_checks.hpp"

namespace linattn::detail {

// State `index` of `from` ([N·H, K, V]) as a [K, V] matrix, or zeros where from is null.
inline std::vector<double> reference_state(const RecurrenceProblem& p, int64_t index, const std::vector<double>* from) {
  const int64_t KV = p.K * p.V;
  if (!from) return std::vector<double>(size_t(KV), 0.0);
  return std::vector<double>(from->begin() + index * KV, from->begin() + (index + 1) * KV);
}

// a[κ] = exp(g_t[κ]) for κ < K of token t of batch row b, head h: g's column (token) or κ's (key), else
// constant_log (a fixed decay per head; 0 without a gate).
inline void reference_decay(std::vector<double>& a, const RecurrenceProblem& p, const reference::Tensor* g, int64_t b,
                            int64_t t, int64_t h, double constant_log = 0.0) {
  for (int64_t x = 0; x < p.K; ++x) {
    double log_a = constant_log;
    if (p.gate == Gate::token) log_a = (*g)(b, t, h, 0);
    if (p.gate == Gate::key) log_a = (*g)(b, t, h, x);
    a[size_t(x)] = std::exp(log_a);
  }
}

// advance(S, b, t, h): the family's step, S_t from S_{t−1} in place for token t of batch row b, head h.
template <class Advance>
reference::DecayedOutput reference_forward(const RecurrenceProblem& p, const reference::Tensor& q,
                                           const std::vector<double>* initial_state, Advance&& advance) {
  reference::DecayedOutput result{reference::Tensor({p.B, p.T, p.H * p.queries, p.V}),
                                  std::vector<double>(size_t(p.state_size()))};
  for (const Sequence& s : p.sequences)
    for (int64_t h = 0; h < p.H; ++h) {
      std::vector<double> S = reference_state(p, s.n * p.H + h, initial_state);
      for (int64_t t = s.begin; t < s.end; ++t) {
        advance(S, s.b, t, h);
        for (int64_t r = 0; r < p.queries; ++r)
          for (int64_t y = 0; y < p.V; ++y) {
            double o = 0;
            for (int64_t x = 0; x < p.K; ++x) o += q(s.b, t, p.q_head(h, r), x) * S[size_t(x * p.V + y)];
            result.out(s.b, t, p.out_head(h, r), y) = p.scale * o;
          }
      }
      std::copy(S.begin(), S.end(), result.final_state.begin() + (s.n * p.H + h) * p.K * p.V);
    }
  return result;
}

// The reverse sweep: dq (zeroed, q's shape) and dinitial_state ([N, H, K, V]) are written; per token,
// from the last, dS (the gradient of S_t) takes each read-out's share (dS += scale · q_t do_tᵀ,
// dq_t = scale · S_t do_t, for every query head reading S), then step_back(dS, S_t, S_{t−1}, b, t, h) writes
// the family's gradients of token t and leaves in dS the gradient of S_{t−1}.
template <class Advance, class StepBack>
void reference_backward(const RecurrenceProblem& p, const reference::Tensor& q, const reference::Tensor& dout,
                        const std::vector<double>* initial_state, const std::vector<double>* dfinal_state,
                        reference::Tensor& dq, std::vector<double>& dinitial_state, Advance&& advance,
                        StepBack&& step_back) {
  const int64_t KV = p.K * p.V;
  for (const Sequence& s : p.sequences)
    for (int64_t h = 0; h < p.H; ++h) {
      // Every state S_t of the sequence, S_{begin−1} first: the reverse sweep reads S_t and S_{t−1}.
      std::vector<double> states(size_t((s.end - s.begin + 1) * KV));
      std::vector<double> S = reference_state(p, s.n * p.H + h, initial_state);
      std::copy(S.begin(), S.end(), states.begin());
      for (int64_t t = s.begin; t < s.end; ++t) {
        advance(S, s.b, t, h);
        std::copy(S.begin(), S.end(), states.begin() + (t - s.begin + 1) * KV);
      }
      std::vector<double> dS = reference_state(p, s.n * p.H + h, dfinal_state);
      for (int64_t t = s.end - 1; t >= s.begin; --t) {
        const double* St = states.data() + (t - s.begin + 1) * KV;
        for (int64_t r = 0; r < p.queries; ++r) {
          const int64_t hq = p.q_head(h, r), ho = p.out_head(h, r);
          for (int64_t x = 0; x < p.K; ++x) {
            double d = 0;
            for (int64_t y = 0; y < p.V; ++y) {
              dS[size_t(x * p.V + y)] += p.scale * q(s.b, t, hq, x) * dout(s.b, t, ho, y);
              d += St[x * p.V + y] * dout(s.b, t, ho, y);
            }
            dq(s.b, t, hq, x) += p.scale * d;
          }
        }
        step_back(dS, St, St - KV, s.b, t, h);
      }
      std::copy(dS.begin(), dS.end(), dinitial_state.begin() + (s.n * p.H + h) * KV);
    }
}

}  // namespace linattn::detail
