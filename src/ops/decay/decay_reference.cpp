// fp64 oracle of the decayed family, token by token from the recurrence (no chunks, no SIMD):
//   S_t = diag(a_t) S_{t−1} + k_t v_tᵀ,  a_t = exp(g_t),  o_t = scale · S_tᵀ q_t,
// and its reverse sweep for the gradients. Shares only the argument checks with the fast path.
#include <cmath>

#include "core/validate.hpp"
#include "linattn/reference.hpp"
#include "ops/decay/decay_checks.hpp"

namespace linattn::reference {
namespace {

detail::DecayProblem check(const char* op, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor* g,
                           const DecayedAttentionOptions& options, const std::vector<double>* initial) {
  const ConstTensorView gs = g ? detail::shape_only(op, "g", g->extent, g->data.size()) : ConstTensorView{};
  const detail::DecayProblem p = detail::check_decay_arguments(
      op, detail::shape_only(op, "q", q.extent, q.data.size()), detail::shape_only(op, "k", k.extent, k.data.size()),
      detail::shape_only(op, "v", v.extent, v.data.size()), gs, options);
  if (initial) detail::check_state_span(op, "initial_state", initial->size(), p);
  return p;
}

// a_t[κ] = exp(g_t[κ]) of token t of batch row b, head h, for κ < K.
void decay_of(std::vector<double>& a, const detail::DecayProblem& p, const Tensor* g,
              const DecayedAttentionOptions& options, int64_t b, int64_t t, int64_t h) {
  for (int64_t x = 0; x < p.K; ++x) {
    double log_a = detail::constant_log_decay(options, h);
    if (p.decay == Decay::token) log_a = (*g)(b, t, h, 0);
    if (p.decay == Decay::key) log_a = (*g)(b, t, h, x);
    a[size_t(x)] = std::exp(log_a);
  }
}

// S: [K, V] of the state at the start of sequence s, head h.
void start_state(std::vector<double>& S, const detail::DecayProblem& p, const detail::Sequence& s, int64_t h,
                 const std::vector<double>* initial) {
  const size_t size = size_t(p.K * p.V);
  if (initial)
    S.assign(initial->begin() + (s.n * p.H + h) * p.K * p.V, initial->begin() + (s.n * p.H + h) * p.K * p.V + size);
  else
    S.assign(size, 0.0);
}

// S ← diag(a) S + k vᵀ for token t.
void advance(std::vector<double>& S, const std::vector<double>& a, const detail::DecayProblem& p, const Tensor& k,
             const Tensor& v, int64_t b, int64_t t, int64_t h) {
  for (int64_t x = 0; x < p.K; ++x)
    for (int64_t y = 0; y < p.V; ++y) {
      double& s = S[size_t(x * p.V + y)];
      s = a[size_t(x)] * s + k(b, t, h, x) * v(b, t, h, y);
    }
}

}  // namespace

DecayedOutput decayed_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor* g,
                                        const DecayedAttentionOptions& options,
                                        const std::vector<double>* initial_state) {
  const char* op = "reference::decayed_attention_forward";
  const detail::DecayProblem p = check(op, q, k, v, g, options, initial_state);
  DecayedOutput result{Tensor({p.B, p.T, p.H, p.V}), std::vector<double>(size_t(p.state_size()))};
  std::vector<double> S, a(size_t(p.K));
  for (const detail::Sequence& s : p.sequences)
    for (int64_t h = 0; h < p.H; ++h) {
      start_state(S, p, s, h, initial_state);
      for (int64_t t = s.begin; t < s.end; ++t) {
        decay_of(a, p, g, options, s.b, t, h);
        advance(S, a, p, k, v, s.b, t, h);
        for (int64_t y = 0; y < p.V; ++y) {
          double o = 0;
          for (int64_t x = 0; x < p.K; ++x) o += q(s.b, t, h, x) * S[size_t(x * p.V + y)];
          result.out(s.b, t, h, y) = p.scale * o;
        }
      }
      std::copy(S.begin(), S.end(), result.final_state.begin() + (s.n * p.H + h) * p.K * p.V);
    }
  return result;
}

DecayedGradients decayed_attention_backward(const Tensor& dout, const std::vector<double>* dfinal_state,
                                            const Tensor& q, const Tensor& k, const Tensor& v, const Tensor* g,
                                            const DecayedAttentionOptions& options,
                                            const std::vector<double>* initial_state) {
  const char* op = "reference::decayed_attention_backward";
  const detail::DecayProblem p = check(op, q, k, v, g, options, initial_state);
  detail::check_output_shape(op, "dout", detail::shape_only(op, "dout", dout.extent, dout.data.size()),
                             detail::shape_only(q.extent), detail::shape_only(v.extent));
  if (dfinal_state) detail::check_state_span(op, "dfinal_state", dfinal_state->size(), p);
  DecayedGradients r{Tensor(q.extent), Tensor(k.extent), Tensor(v.extent), g ? Tensor(g->extent) : Tensor(),
                     std::vector<double>(size_t(p.state_size()))};
  const int64_t KV = p.K * p.V;
  std::vector<double> a(size_t(p.K)), dS, S;
  for (const detail::Sequence& s : p.sequences)
    for (int64_t h = 0; h < p.H; ++h) {
      // Every state S_{t} of the sequence, S_{begin−1} first: the reverse sweep reads S_t and S_{t−1}.
      const int64_t n = s.end - s.begin;
      std::vector<double> states(size_t((n + 1) * KV));
      start_state(S, p, s, h, initial_state);
      std::copy(S.begin(), S.end(), states.begin());
      for (int64_t t = s.begin; t < s.end; ++t) {
        decay_of(a, p, g, options, s.b, t, h);
        advance(S, a, p, k, v, s.b, t, h);
        std::copy(S.begin(), S.end(), states.begin() + (t - s.begin + 1) * KV);
      }
      if (dfinal_state)
        dS.assign(dfinal_state->begin() + (s.n * p.H + h) * KV, dfinal_state->begin() + (s.n * p.H + h + 1) * KV);
      else
        dS.assign(size_t(KV), 0.0);
      for (int64_t t = s.end - 1; t >= s.begin; --t) {
        const double* St = states.data() + (t - s.begin + 1) * KV;
        const double* Sprev = states.data() + (t - s.begin) * KV;
        decay_of(a, p, g, options, s.b, t, h);
        for (int64_t x = 0; x < p.K; ++x) {
          double dq = 0;
          for (int64_t y = 0; y < p.V; ++y) {
            dS[size_t(x * p.V + y)] += p.scale * q(s.b, t, h, x) * dout(s.b, t, h, y);
            dq += St[x * p.V + y] * dout(s.b, t, h, y);
          }
          r.dq(s.b, t, h, x) = p.scale * dq;
        }
        for (int64_t x = 0; x < p.K; ++x) {
          double dk = 0, da = 0;
          for (int64_t y = 0; y < p.V; ++y) {
            dk += dS[size_t(x * p.V + y)] * v(s.b, t, h, y);
            da += dS[size_t(x * p.V + y)] * Sprev[x * p.V + y];
          }
          r.dk(s.b, t, h, x) = dk;
          // d/dg of a·S_{t−1} with a = exp(g): a · S_{t−1}.
          if (p.decay == Decay::key) r.dg(s.b, t, h, x) = da * a[size_t(x)];
          if (p.decay == Decay::token) r.dg(s.b, t, h, 0) += da * a[size_t(x)];
        }
        for (int64_t y = 0; y < p.V; ++y) {
          double dv = 0;
          for (int64_t x = 0; x < p.K; ++x) dv += dS[size_t(x * p.V + y)] * k(s.b, t, h, x);
          r.dv(s.b, t, h, y) = dv;
        }
        for (int64_t x = 0; x < p.K; ++x)
          for (int64_t y = 0; y < p.V; ++y) dS[size_t(x * p.V + y)] *= a[size_t(x)];
      }
      std::copy(dS.begin(), dS.end(), r.dinitial_state.begin() + (s.n * p.H + h) * KV);
    }
  return r;
}

}  // namespace linattn::reference
