// fp64 oracle of the decayed family, token by token from the recurrence (no chunks, no SIMD):
//   S_t = diag(a_t) S_{t−1} + k_t v_tᵀ,  a_t = exp(g_t),  o_t = scale · S_tᵀ q_t,
// and its reverse sweep for the gradients. With grouped value heads, value head h reads k_t (and q_t) of
// head h / (HV / H), and the gradients of k (and q) sum over the heads of their group; with query groups
// (q with R·H heads) each of head h's R query heads reads its state. Shares only the
// argument checks with the fast path.
#include <cmath>

#include "core/validate.hpp"
#include "linattn/reference.hpp"
#include "ops/decay/decay_checks.hpp"
#include "ops/recurrence/recurrence_reference.hpp"

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

// S ← diag(a) S + k vᵀ for token t of value head h (k's is p.qk_head(h)).
void advance(std::vector<double>& S, const std::vector<double>& a, const detail::DecayProblem& p, const Tensor& k,
             const Tensor& v, int64_t b, int64_t t, int64_t h) {
  for (int64_t x = 0; x < p.K; ++x)
    for (int64_t y = 0; y < p.V; ++y) {
      double& s = S[size_t(x * p.V + y)];
      s = a[size_t(x)] * s + k(b, t, p.qk_head(h), x) * v(b, t, h, y);
    }
}

}  // namespace

DecayedOutput decayed_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor* g,
                                        const DecayedAttentionOptions& options,
                                        const std::vector<double>* initial_state) {
  const char* op = "reference::decayed_attention_forward";
  const detail::DecayProblem p = check(op, q, k, v, g, options, initial_state);
  std::vector<double> a(size_t(p.K));
  return detail::reference_forward(p, q, initial_state, [&](std::vector<double>& S, int64_t b, int64_t t, int64_t h) {
    detail::reference_decay(a, p, g, b, t, h, detail::constant_log_decay(options, h));
    advance(S, a, p, k, v, b, t, h);
  });
}

DecayedGradients decayed_attention_backward(const Tensor& dout, const std::vector<double>* dfinal_state,
                                            const Tensor& q, const Tensor& k, const Tensor& v, const Tensor* g,
                                            const DecayedAttentionOptions& options,
                                            const std::vector<double>* initial_state) {
  const char* op = "reference::decayed_attention_backward";
  const detail::DecayProblem p = check(op, q, k, v, g, options, initial_state);
  detail::check_recurrence_output(op, "dout", detail::shape_only(op, "dout", dout.extent, dout.data.size()),
                                  detail::shape_only(q.extent), detail::shape_only(v.extent));
  if (dfinal_state) detail::check_state_span(op, "dfinal_state", dfinal_state->size(), p);
  DecayedGradients r{Tensor(q.extent), Tensor(k.extent), Tensor(v.extent), g ? Tensor(g->extent) : Tensor(),
                     std::vector<double>(size_t(p.state_size()))};
  std::vector<double> a(size_t(p.K));
  const auto step = [&](std::vector<double>& S, int64_t b, int64_t t, int64_t h) {
    detail::reference_decay(a, p, g, b, t, h, detail::constant_log_decay(options, h));
    advance(S, a, p, k, v, b, t, h);
  };
  // S_t = diag(a) S_{t−1} + k vᵀ: dk = dS v, dv = dSᵀ k, dg from a ⊙ S_{t−1}, dS_{t−1} = diag(a) dS.
  const auto step_back = [&](std::vector<double>& dS, const double*, const double* Sprev, int64_t b, int64_t t,
                             int64_t h) {
    detail::reference_decay(a, p, g, b, t, h, detail::constant_log_decay(options, h));
    const int64_t hk = p.qk_head(h);  // k's head; dk sums over the value heads of its group
    for (int64_t x = 0; x < p.K; ++x) {
      double dk = 0, da = 0;
      for (int64_t y = 0; y < p.V; ++y) {
        dk += dS[size_t(x * p.V + y)] * v(b, t, h, y);
        da += dS[size_t(x * p.V + y)] * Sprev[x * p.V + y];
      }
      r.dk(b, t, hk, x) += dk;
      // d/dg of a·S_{t−1} with a = exp(g): a · S_{t−1}.
      if (p.decay == Decay::key) r.dg(b, t, h, x) = da * a[size_t(x)];
      if (p.decay == Decay::token) r.dg(b, t, h, 0) += da * a[size_t(x)];
    }
    for (int64_t y = 0; y < p.V; ++y) {
      double dv = 0;
      for (int64_t x = 0; x < p.K; ++x) dv += dS[size_t(x * p.V + y)] * k(b, t, hk, x);
      r.dv(b, t, h, y) = dv;
    }
    for (int64_t x = 0; x < p.K; ++x)
      for (int64_t y = 0; y < p.V; ++y) dS[size_t(x * p.V + y)] *= a[size_t(x)];
  };
  detail::reference_backward(p, q, dout, initial_state, dfinal_state, r.dq, r.dinitial_state, step, step_back);
  return r;
}

}  // namespace linattn::reference
