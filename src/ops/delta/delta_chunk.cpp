// One chunk of the delta rule (see delta_chunk.hpp): its loads, decay factors, the triangular
// inverse, forward and backward, every product through kernels::gemm (the triangles in strips).
#include "ops/delta/delta_chunk.hpp"

#include <algorithm>
#include <cmath>

#include "kernels/decay_factors.hpp"
#include "kernels/gemm.hpp"
#include "kernels/pack.hpp"
#include "kernels/rows.hpp"
#include "kernels/triangle.hpp"
#include "ops/recurrence/group_rows.hpp"
#include "ops/recurrence/sequences.hpp"

namespace linattn::detail {

using kernels::gemm;
using kernels::lower_product;
using kernels::lower_scores;
using kernels::lower_transposed_product;
using kernels::mask_lower;
using kernels::padded;
using kernels::plain;
using kernels::transposed;

DeltaChunk::DeltaChunk(const DeltaProblem& p, int64_t chunk_size, bool backward)
    : p_(p),
      gated_(p.gate != Gate::none),
      backward_(backward),
      C_(chunk_rows(p.sequences, chunk_size)),
      Cp_(padded(C_)),
      Kp_(padded(p.K)),
      Vp_(padded(p.V)),
      Xp_(padded(p.V) + padded(p.K)) {
  const auto size = [](int64_t rows, int64_t cols) { return size_t(rows * cols); };
  const size_t CK = size(C_, Kp_), CV = size(C_, Vp_), CC = size(C_, Cp_), CX = size(C_, Xp_);
  Q_.resize(CK), K_.resize(CK), V_.resize(CV), beta_.resize(size_t(C_)), rq_.resize(size_t(C_)), rk_.resize(size_t(C_));
  if (gated_) {
    b_.resize(CK), mid_.resize(size_t(Kp_)), bn_.resize(size_t(Kp_)), lo_.resize(size_t(Kp_)), hi_.resize(size_t(Kp_));
    em_.resize(size_t(Kp_)), enm_.resize(size_t(Kp_));
    for (auto* x : {&Ql_, &Kl_, &Kr_, &Qe_, &Kt_, &Kd_}) x->resize(CK);
    if (backward)
      for (auto* x : {&El_, &Er_, &Eb_, &Ed_}) x->resize(CK);
  }
  G_.resize(CC), P_.resize(CC), T_.resize(CC), KrT_.resize(size(Kp_, Cp_));
  R_.resize(CX), X_.resize(CX), N_.resize(CV), O_.resize(CV);
  if (!backward) return;
  dO_.resize(CV), dN_.resize(CV), St_.resize(size(Vp_, Kp_)), dSt_.resize(size(Vp_, Kp_)), NT_.resize(size(Vp_, Cp_));
  XT_.resize(size(Xp_, Cp_)), dP_.resize(CC), dA_.resize(CC), dW_.resize(CK), dR_.resize(CX), diag_.resize(size_t(C_));
  for (auto* x : {&dQe_, &dQl_, &dKl_, &dKr_, &dKd_, &dKt_, &dQ_, &dK_}) x->resize(CK);
  dV_.resize(CV), dB_.resize(size_t(C_));
  if (gated_) db_.resize(CK);
}

template <class E>
int64_t DeltaChunk::load(const RecurrenceHeadOf<E>& x, int64_t t0, int64_t end, int64_t n) {
  const int64_t K = p_.K, V = p_.V, rows = n > 0 ? n : std::min(C_, end - t0);
  n_ = rows;
  if (gated_) {
    // Cumulative log decays per column (one per token broadcast over the columns for the gated delta
    // rule); the chunk stops before the token that would make a column span more than kMaxLogSpan,
    // counting the chunk's start (b = 0), so e^{b} and e^{b_n − b} stay within e^{±kMaxLogSpan} too.
    with_gate_rows(x, [&](auto g) {
      if (p_.gate == Gate::key) {
        kernels::pack_rows({b_.data(), Kp_, rows, K}, g, t0, rows);
      } else {  // one log decay per token, broadcast over the columns
        for (int64_t t = 0; t < rows; ++t) std::fill_n(b_.data() + t * Kp_, K, kernels::widened(g.at(t0 + t)[0]));
      }
    });
    // The midpoint m of each column's b over the chunk's rows (the scores pair rows with rows), and the
    // column factors e^{m}, e^{b_n − m} that turn e^{b − m} into e^{b} and e^{m − b} into e^{b_n − b}.
    n_ = kernels::running_log_decays(
        {b_.data(), Kp_, K, lo_.data(), hi_.data(), mid_.data(), bn_.data(), em_.data(), enm_.data()}, rows,
        float(kMaxLogSpan), true, n <= 0);
  }
  const int64_t m = n_;
  kernels::pack_rows({K_.data(), Kp_, C_, K}, kernels::head_rows(x.k, x.b, x.qk()), t0, m);
  kernels::pack_rows({V_.data(), Vp_, C_, V}, kernels::head_rows(x.v, x.b, x.h), t0, m);
  kernels::pack_rows({beta_.data(), 1, C_, 1}, kernels::head_rows(x.beta, x.b, x.h), t0, m);
  if (p_.qk_l2norm) l2norm_rows(K_.data(), rk_.data(), 1.0f);
  load_queries(x, t0, 0);
  // G = strict_lower(Kl Krᵀ) (Krᵀ from load_queries).
  lower_scores(G_.data(), Cp_, Kl(), Kp_, KrT_.data(), Cp_, m, K);
  mask_lower(G_.data(), Cp_, nullptr, 0, m, true);
  // T = (I + diag(β) G)⁻¹ (the entries to the right of the diagonal stay 0 for the transposed products).
  kernels::unit_lower_inverse(T_.data(), Cp_, G_.data(), Cp_, m, -1.0f, beta_.data());
  // [U | W] = T [β V | −β (K ⊙ e^{b})].
  const float* Kt_rows = Kt();
  for (int64_t t = 0; t < m; ++t) {
    float* r = R_.data() + t * Xp_;
    const float beta = beta_[size_t(t)];
    for (int64_t c = 0; c < V; ++c) r[c] = beta * V_[size_t(t * Vp_ + c)];
    for (int64_t c = 0; c < K; ++c) r[Vp_ + c] = -beta * Kt_rows[t * Kp_ + c];
  }
  lower_product(X_.data(), Xp_, T_.data(), Cp_, R_.data(), Xp_, m, Xp_, false);
  return n_;
}

// x / sqrt(Σ x² + ε) for each of the chunk's rows of X ([n, Kp]), times factor, and 1/sqrt(·) kept in r
// for the backward.
void DeltaChunk::l2norm_rows(float* X, float* r, float factor) {
  for (int64_t t = 0; t < n_; ++t) {
    float* x = X + t * Kp_;
    float sum = 0;
    kernels::row_dots(&sum, x, Kp_, x, 1, p_.K);
    r[t] = float(1.0 / std::sqrt(double(sum) + kL2NormEps));
    for (int64_t c = 0; c < p_.K; ++c) x[c] *= r[t] * factor;
  }
}

template <class E>
void DeltaChunk::load_queries(const RecurrenceHeadOf<E>& x, int64_t t0, int64_t r) {
  const int64_t K = p_.K, m = n_;
  kernels::pack_rows({Q_.data(), Kp_, C_, K}, kernels::head_rows(x.q, x.b, x.q_head(r)), t0, m,
                     p_.qk_l2norm ? 1.0f : p_.scale);
  if (p_.qk_l2norm) l2norm_rows(Q_.data(), rq_.data(), p_.scale);  // q normalised, then times scale
  // The split sides, the keys' again with each query head's (the same values).
  if (gated_)
    for (int64_t t = 0; t < m; ++t) {
      const size_t i = size_t(t * Kp_);
      kernels::split_factor_row(
          {Ql_.data() + i, Kr_.data() + i, Qe_.data() + i, Kd_.data() + i, Kl_.data() + i, Kt_.data() + i,
           backward_ ? El_.data() + i : nullptr, backward_ ? Er_.data() + i : nullptr,
           backward_ ? Eb_.data() + i : nullptr, backward_ ? Ed_.data() + i : nullptr},
          Q_.data() + i, K_.data() + i, b_.data() + i, mid_.data(), em_.data(), enm_.data(), Kp_);
    }
  // P = lower(Ql Krᵀ).
  kernels::transpose(KrT_.data(), Cp_, Kr(), Kp_, m, K);
  lower_scores(P_.data(), Cp_, Ql(), Kp_, KrT_.data(), Cp_, m, K);
  mask_lower(P_.data(), Cp_, nullptr, 0, m);
}

float* DeltaChunk::written_values(const float* S, bool keep_x) {
  // In place of U unless the backward still needs [U | W] (the next load forms X again).
  float* N = keep_x ? N_.data() : X_.data();
  ldn_ = keep_x ? Vp_ : Xp_;
  if (keep_x)
    for (int64_t t = 0; t < n_; ++t) std::copy_n(X_.data() + t * Xp_, Vp_, N + t * Vp_);
  gemm({N, ldn_, n_, p_.V}, plain(X_.data() + Vp_, Xp_), {S, Vp_, p_.K, p_.V}, {.accumulate = true});
  return N;
}

void DeltaChunk::advance(float* S) {
  const float* N = written_values(S, false);
  if (gated_)
    for (int64_t c = 0; c < p_.K; ++c) {
      const float f = std::exp(bn_[size_t(c)]);
      for (int64_t e = 0; e < p_.V; ++e) S[c * Vp_ + e] *= f;
    }
  gemm({S, Vp_, p_.K, p_.V}, transposed(Kd(), Kp_), {N, ldn_, n_, p_.V}, {.accumulate = true});
}

template <class E>
void DeltaChunk::forward(float* S, View4<E> out, const RecurrenceHeadOf<E>& x, int64_t t0, const NextChunk* next) {
  const int64_t K = p_.K, V = p_.V, n = n_;
  const float* N = written_values(S, false);
  // Every query head of x reads S and N in turn (query groups; one otherwise), then S advances once.
  for (int64_t r = 0; r < x.queries; ++r) {
    if (r > 0) load_queries(x, t0, r);
    // O = P N + (Q ⊙ e^b) S (the triangle first: overwriting, it needs no per-row ranges).
    lower_product(O_.data(), Vp_, P_.data(), Cp_, N, ldn_, n, V, false);
    // The next chunk's q and k arrive during the last query head's product.
    gemm({O_.data(), Vp_, n, V}, plain(Qe(), Kp_), {S, Vp_, K, V},
         {.accumulate = true, .ahead = next && r + 1 == x.queries ? &next->qk : nullptr});
    kernels::store_rows(kernels::head_rows(out, x.b, x.out_head(r)), t0, {O_.data(), Vp_, n, V});
  }
  if (gated_)
    for (int64_t c = 0; c < K; ++c) {
      const float f = std::exp(bn_[size_t(c)]);
      for (int64_t e = 0; e < V; ++e) S[c * Vp_ + e] *= f;
    }
  gemm({S, Vp_, K, V}, transposed(Kd(), Kp_), {N, ldn_, n, V},
       {.accumulate = true, .ahead = next ? &next->vg : nullptr});
}

template <class E>
void DeltaChunk::backward(const float* S, float* dS, View4<const E> dout, const Grads<E>& d,
                          const RecurrenceHeadOf<E>& x, int64_t t0) {
  const int64_t K = p_.K, V = p_.V, n = n_;
  written_values(S, true);
  kernels::pack_rows({dO_.data(), Vp_, n, V}, kernels::head_rows(dout, x.b, x.h), t0, n);
  // dN = Pᵀ dO + Kd dS (the state after the chunk and the outputs both read N; the triangle first:
  // overwriting, it needs no per-row ranges).
  lower_transposed_product(dN_.data(), Vp_, P_.data(), Cp_, dO_.data(), Vp_, n, V, false);
  gemm({dN_.data(), Vp_, n, V}, plain(Kd(), Kp_), {dS, Vp_, K, V}, {.accumulate = true});
  // dQe = dO Sᵀ; dP = lower(dO Nᵀ), its diagonal apart (its decay factors cancel: see the gate below).
  kernels::transpose(St_.data(), Kp_, S, Vp_, K, V);
  gemm({dQe_.data(), Kp_, n, K}, plain(dO_.data(), Vp_), {St_.data(), Kp_, V, K});
  kernels::transpose(NT_.data(), Cp_, N_.data(), Vp_, n, V);
  lower_scores(dP_.data(), Cp_, dO_.data(), Vp_, NT_.data(), Cp_, n, V);
  mask_lower(dP_.data(), Cp_, nullptr, 0, n);
  for (int64_t t = 0; t < n; ++t) diag_[size_t(t)] = dP_[size_t(t * Cp_ + t)], dP_[size_t(t * Cp_ + t)] = 0.0f;
  // N = U + W S: dU = dN, dW = dN Sᵀ; [U | W] = T R: dR = Tᵀ [dU | dW] (the pad columns of dR stay 0).
  gemm({dW_.data(), Kp_, n, K}, plain(dN_.data(), Vp_), {St_.data(), Kp_, V, K});
  lower_transposed_product(dR_.data(), Xp_, T_.data(), Cp_, dN_.data(), Vp_, n, V, false);
  lower_transposed_product(dR_.data() + Vp_, Xp_, T_.data(), Cp_, dW_.data(), Kp_, n, K, false);
  // T = (I + A)⁻¹ with A = diag(β) G: dA = −strict_lower(dR Xᵀ); dβ_t = Σ_s dA[t, s] G[t, s]; dG = diag(β) dA.
  kernels::transpose(XT_.data(), Cp_, X_.data(), Xp_, n, Xp_);
  lower_scores(dA_.data(), Cp_, dR_.data(), Xp_, XT_.data(), Cp_, n, Xp_);
  mask_lower(dA_.data(), Cp_, nullptr, 0, n, true);
  const float* Ktr = Kt();
  for (int64_t t = 0; t < n; ++t) {
    float* row = dA_.data() + t * Cp_;
    const float* G = G_.data() + t * Cp_;
    const float beta = beta_[size_t(t)];
    double db = 0;
    for (int64_t s = 0; s < t; ++s) row[s] = -row[s], db += double(row[s]) * G[s], row[s] *= beta;
    // R = [β V | −β Kt]: dβ += dR_U · V − dR_W · Kt; dV = β dR_U; dKt = −β dR_W.
    const float* dr = dR_.data() + t * Xp_;
    for (int64_t c = 0; c < V; ++c)
      db += double(dr[c]) * V_[size_t(t * Vp_ + c)], dV_[size_t(t * Vp_ + c)] = beta * dr[c];
    for (int64_t c = 0; c < K; ++c)
      db -= double(dr[Vp_ + c]) * Ktr[t * Kp_ + c], dKt_[size_t(t * Kp_ + c)] = -beta * dr[Vp_ + c];
    dB_[size_t(t)] = float(db);
  }
  // G = Kl Krᵀ and P = Ql Krᵀ (strict parts): dKl = dG Kr, dQl = dP Kr, dKr = dGᵀ Kl + dPᵀ Ql.
  lower_product(dKl_.data(), Kp_, dA_.data(), Cp_, Kr(), Kp_, n, K, false);
  lower_product(dQl_.data(), Kp_, dP_.data(), Cp_, Kr(), Kp_, n, K, false);
  lower_transposed_product(dKr_.data(), Kp_, dA_.data(), Cp_, Kl(), Kp_, n, K, false);
  lower_transposed_product(dKr_.data(), Kp_, dP_.data(), Cp_, Ql(), Kp_, n, K, true);
  // S_after = diag(e^{b_n}) S + Kdᵀ N: dKd = N dSᵀ.
  kernels::transpose(dSt_.data(), Kp_, dS, Vp_, K, V);
  gemm({dKd_.data(), Kp_, n, K}, plain(N_.data(), Vp_), {dSt_.data(), Kp_, V, K});
  if (gated_) gate_gradient(S, dS, d, x, t0);
  // dQ, dK through the factors; the diagonal of P adds dP[t, t] k_t and dP[t, t] q_t (factors cancel).
  for (int64_t t = 0; t < n; ++t) {
    const int64_t r = t * Kp_;
    const auto at = [&](const std::vector<float>& f) { return gated_ ? f.data() + r : nullptr; };
    kernels::split_factor_row_backward(dQ_.data() + r, dK_.data() + r, side_grads(r), at(El_), at(Er_), at(Eb_),
                                       at(Ed_), Q_.data() + r, K_.data() + r, diag_[size_t(t)], K);
  }
  // dS ← diag(e^{b_n}) dS + Qeᵀ dO + Wᵀ dN.
  if (gated_)
    for (int64_t c = 0; c < K; ++c) {
      const float f = std::exp(bn_[size_t(c)]);
      for (int64_t e = 0; e < V; ++e) dS[c * Vp_ + e] *= f;
    }
  gemm({dS, Vp_, K, V}, transposed(Qe(), Kp_), {dO_.data(), Vp_, n, V}, {.accumulate = true});
  gemm({dS, Vp_, K, V}, transposed(X_.data() + Vp_, Xp_), {dN_.data(), Vp_, n, V}, {.accumulate = true});
  // Q = scale·q̂ (dq̂ = scale·dQ), then through the l2norm: dx = r (dx̂ − x̂ (x̂ · dx̂)).
  for (int64_t t = 0; t < n && p_.qk_l2norm; ++t) {
    float *gq = dQ_.data() + t * Kp_, *gk = dK_.data() + t * Kp_;
    const float *q = Q_.data() + t * Kp_, *k = K_.data() + t * Kp_;
    double dotq = 0, dotk = 0;
    for (int64_t c = 0; c < K; ++c) dotq += double(q[c]) * gq[c], dotk += double(k[c]) * gk[c];
    // q̂ = Q / scale and dq̂ = scale dQ: q̂ · dq̂ = Q · dQ.
    for (int64_t c = 0; c < K; ++c) {
      gq[c] = rq_[size_t(t)] * (p_.scale * gq[c] - q[c] / p_.scale * float(dotq));
      gk[c] = rk_[size_t(t)] * (gk[c] - k[c] * float(dotk));
    }
  }
  // dq, dk: the group's first value head writes the rows, the others add (the driver runs a group's value
  // heads in order on one thread: see delta_rule.cpp).
  detail::store_group_rows(d.dq, x, t0, dQ_.data(), Kp_, n, K, p_.qk_l2norm ? 1.0f : p_.scale, d.dq_sum);
  detail::store_group_rows(d.dk, x, t0, dK_.data(), Kp_, n, K, 1.0f, d.dk_sum);
  kernels::store_rows(kernels::head_rows(d.dv, x.b, x.h), t0, {dV_.data(), Vp_, n, V});
  kernels::store_rows(kernels::head_rows(d.dbeta, x.b, x.h), t0, {dB_.data(), 1, n, 1});
}

// ∂L/∂b_t per column from every factor that holds b_t, then dg_t = Σ_{u ≥ t} ∂L/∂b_u over the chunk
// (b is the chunk's own cumulative sum; the state carries the rest). Two kinds of pair are left out,
// because their two O(1) terms cancel exactly and in fp32 would leave noise far above the true value
// under strong decay: a token's score with itself (P's diagonal, weight e^0) and the last token's
// factor e^{b_n − b_n} in the state update.
kernels::SplitSides DeltaChunk::side_grads(int64_t r) const {
  return {dQe_.data() + r, dQl_.data() + r, dKt_.data() + r, dKl_.data() + r, dKr_.data() + r, dKd_.data() + r};
}

template <class E>
void DeltaChunk::gate_gradient(const float* S, const float* dS, const Grads<E>& d, const RecurrenceHeadOf<E>& x,
                               int64_t t0) {
  const int64_t K = p_.K, V = p_.V, n = n_;
  std::vector<double> last(size_t(K), 0.0);
  for (int64_t t = 0; t < n; ++t) {
    const int64_t r = t * Kp_;
    kernels::split_gate_row(
        db_.data() + r, last.data(),
        {Qe_.data() + r, Ql_.data() + r, Kt_.data() + r, Kl_.data() + r, Kr_.data() + r, Kd_.data() + r}, side_grads(r),
        t < n - 1, K);
  }
  for (int64_t c = 0; c < K; ++c) {
    double share = 0;
    for (int64_t e = 0; e < V; ++e) share += double(dS[c * Vp_ + e]) * S[c * Vp_ + e];
    last[size_t(c)] += share * std::exp(double(bn_[size_t(c)]));
    db_[size_t((n - 1) * Kp_ + c)] += float(last[size_t(c)]);
  }
  const int64_t cols = p_.gate_cols();
  std::vector<double> sum(size_t(cols), 0.0);
  auto store = [&](auto dg) {  // dg in the gradients' element type, or fp32 beside half ones
    using T = std::remove_pointer_t<decltype(dg.data)>;
    for (int64_t t = n - 1; t >= 0; --t) {
      T* row = dg.data + dg.offset(x.b, t0 + t, x.h, 0);
      for (int64_t c = 0; c < K; ++c) sum[size_t(cols == 1 ? 0 : c)] += db_[size_t(t * Kp_ + c)];
      for (int64_t c = 0; c < cols; ++c) row[c * dg.stride[3]] = kernels::narrowed<T>(float(sum[size_t(c)]));
    }
  };
  if (d.dg_wide.data)
    store(d.dg_wide);
  else
    store(d.dg);
}

// The element types the chunked drivers read and write.
#define LINATTN_DELTA_CHUNK(E)                                                                                   \
  template int64_t DeltaChunk::load<E>(const RecurrenceHeadOf<E>&, int64_t, int64_t, int64_t);                   \
  template void DeltaChunk::forward<E>(float*, View4<E>, const RecurrenceHeadOf<E>&, int64_t, const NextChunk*); \
  template void DeltaChunk::backward<E>(const float*, float*, View4<const E>, const Grads<E>&,                   \
                                        const RecurrenceHeadOf<E>&, int64_t);
LINATTN_DELTA_CHUNK(float)
LINATTN_DELTA_CHUNK(bf16)
LINATTN_DELTA_CHUNK(f16)
#undef LINATTN_DELTA_CHUNK

}  // namespace linattn::detail
