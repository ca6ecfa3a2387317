// fp64 oracle of the delta rule, token by token from the recurrence (no chunks, no SIMD):
//   P_t = diag(a_t) S_{t−1},  r_t = v_t − P_tᵀ k_t,  S_t = P_t + β_t k_t r_tᵀ,  o_t = scale · S_tᵀ q_t,
// with a_t = exp(g_t) (1 for DeltaNet), q and k l2-normalised first where asked; and its reverse
// sweep for the gradients. With grouped value heads, value head h reads q_t and k_t of head
// h / (HV / H), and the gradients of q and k sum over the heads of their group. Shares only the
// argument checks with the fast path.
#include <cmath>

#include "core/validate.hpp"
#include "linattn/reference.hpp"
#include "ops/delta/delta_checks.hpp"
#include "ops/recurrence/recurrence_reference.hpp"

namespace linattn::reference {
namespace {

detail::DeltaProblem check(const char* op, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& beta,
                           const Tensor* g, const DeltaRuleOptions& options, const std::vector<double>* initial) {
  const auto view = [&](const char* name, const Tensor& x) {
    return detail::shape_only(op, name, x.extent, x.data.size());
  };
  const ConstTensorView gs = g ? view("g", *g) : ConstTensorView{};
  const detail::DeltaProblem p =
      detail::check_delta_arguments(op, view("q", q), view("k", k), view("v", v), view("beta", beta), gs, options);
  if (initial) detail::check_state_span(op, "initial_state", initial->size(), p);
  return p;
}

// x / sqrt(Σ x² + ε) for every (b, t, h) row of x (unchanged unless `apply`); rstd keeps 1/sqrt(·).
Tensor l2norm(const Tensor& x, bool apply, std::vector<double>& rstd) {
  if (!apply) return x;
  Tensor y = x;
  const int64_t D = x.extent[3], rows = int64_t(x.data.size()) / std::max<int64_t>(D, 1);
  rstd.assign(size_t(rows), 1.0);
  for (int64_t r = 0; r < rows; ++r) {
    double sum = 0;
    for (int64_t d = 0; d < D; ++d) sum += x.data[size_t(r * D + d)] * x.data[size_t(r * D + d)];
    rstd[size_t(r)] = 1.0 / std::sqrt(sum + detail::kL2NormEps);
    for (int64_t d = 0; d < D; ++d) y.data[size_t(r * D + d)] *= rstd[size_t(r)];
  }
  return y;
}

// dx = rstd · (dy − y (y · dy)) per row: the gradient of y = x · rstd(x) (exact, ε included).
void l2norm_backward(Tensor& dx, const Tensor& y, const std::vector<double>& rstd) {
  const int64_t D = y.extent[3], rows = int64_t(y.data.size()) / std::max<int64_t>(D, 1);
  for (int64_t r = 0; r < rows; ++r) {
    double dot = 0;
    for (int64_t d = 0; d < D; ++d) dot += y.data[size_t(r * D + d)] * dx.data[size_t(r * D + d)];
    for (int64_t d = 0; d < D; ++d) {
      double& g = dx.data[size_t(r * D + d)];
      g = rstd[size_t(r)] * (g - y.data[size_t(r * D + d)] * dot);
    }
  }
}

// S ← P + β k rᵀ with P = diag(a) S and r = v − Pᵀ k; keeps r. h: the value head (k's is p.qk_head(h)).
void advance(std::vector<double>& S, std::vector<double>& r, const std::vector<double>& a,
             const detail::DeltaProblem& p, const Tensor& k, const Tensor& v, double beta, int64_t b, int64_t t,
             int64_t h) {
  const int64_t hk = p.qk_head(h);
  for (int64_t x = 0; x < p.K; ++x)
    for (int64_t y = 0; y < p.V; ++y) S[size_t(x * p.V + y)] *= a[size_t(x)];
  for (int64_t y = 0; y < p.V; ++y) {
    double pk = 0;
    for (int64_t x = 0; x < p.K; ++x) pk += S[size_t(x * p.V + y)] * k(b, t, hk, x);
    r[size_t(y)] = v(b, t, h, y) - pk;
  }
  for (int64_t x = 0; x < p.K; ++x)
    for (int64_t y = 0; y < p.V; ++y) S[size_t(x * p.V + y)] += beta * k(b, t, hk, x) * r[size_t(y)];
}

}  // namespace

DecayedOutput delta_rule_forward(const Tensor& q_in, const Tensor& k_in, const Tensor& v, const Tensor& beta,
                                 const Tensor* g, const DeltaRuleOptions& options,
                                 const std::vector<double>* initial_state) {
  const char* op = "reference::delta_rule_forward";
  const detail::DeltaProblem p = check(op, q_in, k_in, v, beta, g, options, initial_state);
  std::vector<double> q_rstd, k_rstd;
  const Tensor q = l2norm(q_in, p.qk_l2norm, q_rstd), k = l2norm(k_in, p.qk_l2norm, k_rstd);
  std::vector<double> a(size_t(p.K)), r(size_t(p.V));
  return detail::reference_forward(p, q, initial_state, [&](std::vector<double>& S, int64_t b, int64_t t, int64_t h) {
    detail::reference_decay(a, p, g, b, t, h);
    advance(S, r, a, p, k, v, beta(b, t, h, 0), b, t, h);
  });
}

DeltaGradients delta_rule_backward(const Tensor& dout, const std::vector<double>* dfinal_state, const Tensor& q_in,
                                   const Tensor& k_in, const Tensor& v, const Tensor& beta, const Tensor* g,
                                   const DeltaRuleOptions& options, const std::vector<double>* initial_state) {
  const char* op = "reference::delta_rule_backward";
  const detail::DeltaProblem p = check(op, q_in, k_in, v, beta, g, options, initial_state);
  detail::check_recurrence_output(op, "dout", detail::shape_only(op, "dout", dout.extent, dout.data.size()),
                                  detail::shape_only(q_in.extent), detail::shape_only(v.extent));
  if (dfinal_state) detail::check_state_span(op, "dfinal_state", dfinal_state->size(), p);
  std::vector<double> q_rstd, k_rstd;
  const Tensor q = l2norm(q_in, p.qk_l2norm, q_rstd), k = l2norm(k_in, p.qk_l2norm, k_rstd);
  DeltaGradients d{Tensor(q.extent),
                   Tensor(k.extent),
                   Tensor(v.extent),
                   Tensor(beta.extent),
                   g ? Tensor(g->extent) : Tensor(),
                   std::vector<double>(size_t(p.state_size()))};
  std::vector<double> a(size_t(p.K)), r(size_t(p.V)), dr(size_t(p.V)), P(size_t(p.K * p.V));
  const auto step = [&](std::vector<double>& S, int64_t b, int64_t t, int64_t h) {
    detail::reference_decay(a, p, g, b, t, h);
    advance(S, r, a, p, k, v, beta(b, t, h, 0), b, t, h);
  };
  const auto step_back = [&](std::vector<double>& dS, const double*, const double* Sprev, int64_t b, int64_t t,
                             int64_t h) {
    const double bt = beta(b, t, h, 0);
    const int64_t hk = p.qk_head(h);  // k's head; dk sums over the value heads of its group
    detail::reference_decay(a, p, g, b, t, h);
    // P = diag(a) S_{t−1}, r = v − Pᵀ k (recomputed).
    for (int64_t x = 0; x < p.K; ++x)
      for (int64_t y = 0; y < p.V; ++y) P[size_t(x * p.V + y)] = a[size_t(x)] * Sprev[x * p.V + y];
    for (int64_t y = 0; y < p.V; ++y) {
      double pk = 0;
      for (int64_t x = 0; x < p.K; ++x) pk += P[size_t(x * p.V + y)] * k(b, t, hk, x);
      r[size_t(y)] = v(b, t, h, y) - pk;
    }
    // S_t = P + β k rᵀ: dβ = kᵀ dS r, dk = β dS r, dr = β dSᵀ k; dP = dS.
    double dbeta = 0;
    for (int64_t x = 0; x < p.K; ++x) {
      double dSr = 0;
      for (int64_t y = 0; y < p.V; ++y) dSr += dS[size_t(x * p.V + y)] * r[size_t(y)];
      dbeta += k(b, t, hk, x) * dSr;
      d.dk(b, t, hk, x) += bt * dSr;
    }
    d.dbeta(b, t, h, 0) = dbeta;
    for (int64_t y = 0; y < p.V; ++y) {
      double sum = 0;
      for (int64_t x = 0; x < p.K; ++x) sum += dS[size_t(x * p.V + y)] * k(b, t, hk, x);
      dr[size_t(y)] = bt * sum;
      d.dv(b, t, h, y) = dr[size_t(y)];
    }
    // r = v − Pᵀ k: dP −= k drᵀ, dk −= P dr.
    for (int64_t x = 0; x < p.K; ++x) {
      double Pdr = 0;
      for (int64_t y = 0; y < p.V; ++y) {
        Pdr += P[size_t(x * p.V + y)] * dr[size_t(y)];
        dS[size_t(x * p.V + y)] -= k(b, t, hk, x) * dr[size_t(y)];
      }
      d.dk(b, t, hk, x) -= Pdr;
    }
    // P = diag(a) S_{t−1}: dg = Σ_v dP ⊙ P (∂a/∂g = a), dS_{t−1} = diag(a) dP.
    for (int64_t x = 0; x < p.K; ++x) {
      double dg = 0;
      for (int64_t y = 0; y < p.V; ++y) {
        dg += dS[size_t(x * p.V + y)] * P[size_t(x * p.V + y)];
        dS[size_t(x * p.V + y)] *= a[size_t(x)];
      }
      if (p.gate == detail::Gate::key) d.dg(b, t, h, x) = dg;
      if (p.gate == detail::Gate::token) d.dg(b, t, h, 0) += dg;
    }
  };
  detail::reference_backward(p, q, dout, initial_state, dfinal_state, d.dq, d.dinitial_state, step, step_back);
  if (p.qk_l2norm) l2norm_backward(d.dq, q, q_rstd), l2norm_backward(d.dk, k, k_rstd);
  return d;
}

}  // namespace linattn::reference
