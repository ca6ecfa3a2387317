// fp64 oracle of the DPLR delta rule (RWKV-7), token by token from the recurrence (no chunks, no SIMD):
//   s_t = S_{t−1}ᵀ a_t,   S_t = diag(exp(gk_t)) S_{t−1} + b_t s_tᵀ + k_t v_tᵀ,   o_t = scale · S_tᵀ q_t,
// and its reverse sweep for the gradients, every state kept (the oracle is for small problems). Shares
// only the argument checks with the fast path.
#include <algorithm>
#include <cmath>

#include "core/validate.hpp"
#include "linattn/dplr.hpp"
#include "ops/dplr/dplr_checks.hpp"
#include "ops/recurrence/recurrence_reference.hpp"

namespace linattn::reference {
namespace {

detail::DplrProblem check(const char* op, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& a,
                          const Tensor& b, const Tensor& gk, const DplrOptions& options,
                          const std::vector<double>* initial) {
  const auto view = [&](const char* name, const Tensor& x) {
    return detail::shape_only(op, name, x.extent, x.data.size());
  };
  const detail::DplrProblem p = detail::check_dplr_arguments(op, view("q", q), view("k", k), view("v", v), view("a", a),
                                                             view("b", b), view("gk", gk), options);
  if (initial) detail::check_state_span(op, "initial_state", initial->size(), p);
  return p;
}

// One token of one head: s = Sᵀ a (kept), then S ← diag(exp(gk)) S + b sᵀ + k vᵀ.
struct Token {
  const detail::DplrProblem& p;
  const Tensor &k, &v, &a, &b, &gk;
  int64_t bi, t, h;
  double w(int64_t x) const { return std::exp(gk(bi, t, h, x)); }
  void advance(std::vector<double>& S, std::vector<double>& s) const {
    std::fill(s.begin(), s.end(), 0.0);
    for (int64_t x = 0; x < p.K; ++x)
      for (int64_t y = 0; y < p.V; ++y) s[size_t(y)] += a(bi, t, h, x) * S[size_t(x * p.V + y)];
    for (int64_t x = 0; x < p.K; ++x)
      for (int64_t y = 0; y < p.V; ++y) {
        double& e = S[size_t(x * p.V + y)];
        e = w(x) * e + b(bi, t, h, x) * s[size_t(y)] + k(bi, t, h, x) * v(bi, t, h, y);
      }
  }
};

}  // namespace

DecayedOutput dplr_delta_rule_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& a,
                                      const Tensor& b, const Tensor& gk, const DplrOptions& options,
                                      const std::vector<double>* initial_state) {
  const detail::DplrProblem p = check("reference::dplr_delta_rule_forward", q, k, v, a, b, gk, options, initial_state);
  std::vector<double> s(size_t(p.V));
  return detail::reference_forward(p, q, initial_state, [&](std::vector<double>& S, int64_t bi, int64_t t, int64_t h) {
    Token{p, k, v, a, b, gk, bi, t, h}.advance(S, s);
  });
}

DplrGradients dplr_delta_rule_backward(const Tensor& dout, const std::vector<double>* dfinal_state, const Tensor& q,
                                       const Tensor& k, const Tensor& v, const Tensor& a, const Tensor& b,
                                       const Tensor& gk, const DplrOptions& options,
                                       const std::vector<double>* initial_state) {
  const char* op = "reference::dplr_delta_rule_backward";
  const detail::DplrProblem p = check(op, q, k, v, a, b, gk, options, initial_state);
  detail::check_output_shape(op, "dout", detail::shape_only(op, "dout", dout.extent, dout.data.size()),
                             detail::shape_only(q.extent), detail::shape_only(v.extent));
  if (dfinal_state) detail::check_state_span(op, "dfinal_state", dfinal_state->size(), p);
  DplrGradients d{Tensor(q.extent),
                  Tensor(k.extent),
                  Tensor(v.extent),
                  Tensor(a.extent),
                  Tensor(b.extent),
                  Tensor(gk.extent),
                  std::vector<double>(size_t(p.state_size()))};
  const int64_t K = p.K, V = p.V;
  std::vector<double> s(static_cast<size_t>(V)), ds(static_cast<size_t>(V));
  const auto step = [&](std::vector<double>& S, int64_t bi, int64_t t, int64_t h) {
    Token{p, k, v, a, b, gk, bi, t, h}.advance(S, s);
  };
  const auto step_back = [&](std::vector<double>& dS, const double*, const double* Sp, int64_t bi, int64_t t,
                             int64_t h) {
    const Token tok{p, k, v, a, b, gk, bi, t, h};
    // s = S_{t−1}ᵀ a (recomputed).
    std::fill(s.begin(), s.end(), 0.0);
    for (int64_t x = 0; x < K; ++x)
      for (int64_t y = 0; y < V; ++y) s[size_t(y)] += a(bi, t, h, x) * Sp[x * V + y];
    // S_t = diag(w) S_{t−1} + b sᵀ + k vᵀ: dk = dS v, db = dS s, dv = dSᵀ k, ds = dSᵀ b.
    std::fill(ds.begin(), ds.end(), 0.0);
    for (int64_t x = 0; x < K; ++x) {
      double dk = 0, db = 0;
      for (int64_t y = 0; y < V; ++y) {
        const double g = dS[size_t(x * V + y)];
        dk += g * v(bi, t, h, y), db += g * s[size_t(y)];
        d.dv(bi, t, h, y) += g * k(bi, t, h, x);
        ds[size_t(y)] += g * b(bi, t, h, x);
      }
      d.dk(bi, t, h, x) = dk, d.db(bi, t, h, x) = db;
    }
    // dgk = w ⊙ Σ_v dS ⊙ S_{t−1} (∂w/∂gk = w); s = S_{t−1}ᵀ a: da = S_{t−1} ds;
    // dS_{t−1} = diag(w) dS + a dsᵀ.
    for (int64_t x = 0; x < K; ++x) {
      double dgk = 0, da = 0;
      const double w = tok.w(x);
      for (int64_t y = 0; y < V; ++y) {
        double& g = dS[size_t(x * V + y)];
        dgk += g * Sp[x * V + y], da += Sp[x * V + y] * ds[size_t(y)];
        g = w * g + a(bi, t, h, x) * ds[size_t(y)];
      }
      d.dgk(bi, t, h, x) = w * dgk, d.da(bi, t, h, x) = da;
    }
  };
  detail::reference_backward(p, q, dout, initial_state, dfinal_state, d.dq, d.dinitial_state, step, step_back);
  return d;
}

}  // namespace linattn::reference
