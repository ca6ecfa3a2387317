// One chunk of the decayed family (see decay_chunk.hpp): its loads, decay factors, forward and
// backward, every product through kernels::gemm on the chunk's lower triangle in strips.
#include "ops/decay/decay_chunk.hpp"

#include <algorithm>
#include <cmath>

#include "kernels/decay_factors.hpp"
#include "kernels/gemm.hpp"
#include "kernels/pack.hpp"
#include "kernels/rows.hpp"
#include "kernels/rows_ahead.hpp"
#include "kernels/triangle.hpp"
#include "ops/recurrence/group_rows.hpp"

namespace linattn::detail {

DecayChunk::DecayChunk(const DecayProblem& p, const DecayedAttentionOptions& options, bool backward)
    : p_(p),
      o_(options),
      per_key_(p.decay == Decay::key),
      backward_(backward),
      C_(chunk_rows(p.sequences, options.chunk_size)),
      Cp_(kernels::padded(C_)),
      Kp_(kernels::padded(p.K)),
      Vp_(kernels::padded(p.V)) {
  const auto size = [](int64_t rows, int64_t cols) { return size_t(rows * cols); };
  Q_.resize(size(C_, Kp_)), K_.resize(size(C_, Kp_)), V_.resize(size(C_, Vp_));
  Qe_.resize(size(C_, Kp_)), Kd_.resize(size(C_, Kp_));
  if (per_key_) {
    b_.resize(size(C_, Kp_)), mid_.resize(size_t(Kp_)), bn_.resize(size_t(Kp_));
    Qh_.resize(size(C_, Kp_)), Kh_.resize(size(C_, Kp_)), E_.resize(size(C_, Kp_)), invE_.resize(size(C_, Kp_));
    lo_.resize(size_t(Kp_)), hi_.resize(size_t(Kp_)), em_.resize(size_t(Kp_)), enm_.resize(size_t(Kp_));
  } else {
    a_.resize(size_t(C_)), row_q_.resize(size_t(C_)), row_k_.resize(size_t(C_));
    W_.resize(size(C_, Cp_));
  }
  A_.resize(size(C_, Cp_)), O_.resize(size(C_, Vp_)), T_.resize(size(std::max(p.K, p.V), Cp_));
  if (backward && p.queries > 1) {  // the other query heads' shares (query groups)
    dKq_.resize(size(C_, Kp_)), dVq_.resize(size(C_, Vp_)), diagK_.resize(size(C_, Kp_));
    Qes_.resize(size((p.queries - 1) * C_, Kp_)), dOs_.resize(size((p.queries - 1) * C_, Vp_));
  }
  if (backward) {
    dO_.resize(size(C_, Vp_)), dQ_.resize(size(C_, Kp_)), dK_.resize(size(C_, Kp_)), dV_.resize(size(C_, Vp_));
    diag_.resize(size_t(C_)), tmp_.resize(size(C_, Kp_)), dA_.resize(size(C_, Cp_)),
        St_.resize(size(std::max(p.K, p.V), Kp_));
  }
}

template <class E>
int64_t DecayChunk::load(const RecurrenceHeadOf<E>& x, int64_t t0, int64_t end, int64_t n, Sides sides) {
  const int64_t K = p_.K, V = p_.V, limit = std::min(C_, end - t0);
  if (per_key_) {
    // Cumulative log decays per column; the chunk stops before the token that would make a column span
    // more than kMaxLogSpan (a single token always fits).
    const int64_t rows = n > 0 ? n : limit;
    with_gate_rows(x, [&](auto g) { kernels::pack_rows({b_.data(), Kp_, rows, K}, g, t0, rows); });
    n_ = kernels::running_log_decays(
        {b_.data(), Kp_, Kp_, lo_.data(), hi_.data(), mid_.data(), bn_.data(), em_.data(), enm_.data()}, rows,
        float(kMaxLogSpan), false, n <= 0);
  } else {
    // Each token's decay a = e^{g} (e^{−inf} = 0: a reset); row_factors forms every factor as a product of them.
    n_ = n > 0 ? n : limit;
    const float constant = float(std::exp(constant_log_decay(o_, x.h)));
    if (p_.decay == Decay::token)
      with_gate_rows(x, [&](auto g) {
        for (int64_t t = 0; t < n_; ++t) a_[size_t(t)] = std::exp(kernels::widened(g.at(t0 + t)[0]));
      });
    else
      std::fill_n(a_.begin(), n_, constant);
  }
  const int64_t rows = n_;
  kernels::pack_rows({K_.data(), Kp_, rows, K}, kernels::head_rows(x.k, x.b, x.qk()), t0, rows);
  kernels::pack_rows({V_.data(), Vp_, rows, V}, kernels::head_rows(x.v, x.b, x.h), t0, rows);
  if (sides == Sides::state) {
    // K ⊙ e^{b_n − b} alone: one exp per element (per row: per row), no division.
    if (per_key_)
      for (int64_t t = 0; t < rows; ++t)
        kernels::mul_exp_difference(Kd_.data() + t * Kp_, K_.data() + t * Kp_, bn_.data(), b_.data() + t * Kp_, 1.0f,
                                    Kp_);
    else
      row_factors(false);
    return n_;
  }
  if (!per_key_) row_factors(true);
  load_queries(x, t0, 0);
  return n_;
}

template <class E>
void DecayChunk::load_queries(const RecurrenceHeadOf<E>& x, int64_t t0, int64_t r) {
  const int64_t K = p_.K, rows = n_;
  kernels::pack_rows({Q_.data(), Kp_, rows, K}, kernels::head_rows(x.q, x.b, x.q_head(r)), t0, rows, p_.scale);
  if (per_key_) {
    // Q̂ = Q ⊙ e^{b − m}, K̂ = K ⊙ e^{m − b}, Q ⊙ e^{b}, K ⊙ e^{b_n − b}: one exp per element.
    for (int64_t t = 0; t < rows; ++t) {
      const int64_t i = t * Kp_;
      kernels::split_factor_row({.Ql = Qh_.data() + i,
                                 .Kr = Kh_.data() + i,
                                 .Qe = Qe_.data() + i,
                                 .Kd = Kd_.data() + i,
                                 .El = backward_ ? E_.data() + i : nullptr,
                                 .Er = backward_ ? invE_.data() + i : nullptr},
                                Q_.data() + i, K_.data() + i, b_.data() + i, mid_.data(), em_.data(), enm_.data(), Kp_);
    }
  } else {
    kernels::scale_rows(Qe_.data(), Kp_, Q_.data(), Kp_, row_q_.data(), rows, Kp_);
  }
}

// Every factor a product of the tokens' decays a_t, never the exp of a running sum of log decays: in
// fp32 such a sum swallows the decays after a hard reset (g = −1e30), and −inf − (−inf) is NaN, where a
// product is exactly 0 across a reset, as the oracle's is (elsewhere within one rounding per token).
void DecayChunk::row_factors(bool queries) {
  const int64_t rows = n_;
  // e^{b_n − b_t} = Π_{t < u ≤ n} a_u, from the chunk's end; e^{b_n} = that product for t = 0, times a_0.
  row_k_[size_t(rows - 1)] = 1.0f;
  for (int64_t t = rows - 2; t >= 0; --t) row_k_[size_t(t)] = row_k_[size_t(t + 1)] * a_[size_t(t + 1)];
  gamma_ = row_k_[0] * a_[0];
  kernels::scale_rows(Kd_.data(), Kp_, K_.data(), Kp_, row_k_.data(), rows, Kp_);
  if (!queries) return;
  // e^{b_t} = Π_{u ≤ t} a_u, and W[t, s] = e^{b_t − b_s} = W[t − 1, s] · a_t for s < t, W[t, t] = 1.
  float run = 1.0f;
  for (int64_t t = 0; t < rows; ++t) {
    run *= a_[size_t(t)], row_q_[size_t(t)] = run;
    if (p_.decay == Decay::none) continue;
    float* w = W_.data() + t * Cp_;
    const float a = a_[size_t(t)];
    for (int64_t s = 0; s < t; ++s) w[s] = w[s - Cp_] * a;  // the row above
    w[t] = 1.0f;
  }
}

// A: [n, n] = mask(left rightᵀ) ⊙ W, lower triangle by strips; right_t: rightᵀ [depth, Cp].
void DecayChunk::intra_scores(float* A, const float* left, const float* right_t, int64_t depth_pitch, int64_t depth) {
  kernels::lower_scores(A, Cp_, left, depth_pitch, right_t, Cp_, n_, depth);
  kernels::mask_lower(A, Cp_, per_key_ || p_.decay == Decay::none ? nullptr : W_.data(), Cp_, n_);
}

void DecayChunk::scale_state(float* S) const {
  for (int64_t c = 0; c < p_.K; ++c) {
    const float f = per_key_ ? std::exp(bn_[size_t(c)]) : gamma_;
    for (int64_t e = 0; e < p_.V; ++e) S[c * Vp_ + e] *= f;
  }
}

void DecayChunk::advance(float* S, const kernels::RowsAhead* ahead) {
  scale_state(S);
  kernels::gemm({S, Vp_, p_.K, p_.V}, kernels::transposed(Kd_.data(), Kp_), {V_.data(), Vp_, n_, p_.V},
                {.accumulate = true, .ahead = ahead});
}

template <class E>
void DecayChunk::read_out(const float* S, View4<E> out, const RecurrenceHeadOf<E>& x, int64_t t0, int64_t r,
                          const kernels::RowsAhead* ahead) {
  const int64_t K = p_.K, V = p_.V, n = n_;
  intra_scores(A_.data(), intra_left(), T_.data(), Kp_, K);
  // O = A V, then += (Q ⊙ e^b) S (the triangle first: overwriting, it needs no per-row ranges).
  kernels::lower_product(O_.data(), Vp_, A_.data(), Cp_, V_.data(), Vp_, n, V, false);
  kernels::gemm({O_.data(), Vp_, n, V}, kernels::plain(Qe_.data(), Kp_), {S, Vp_, K, V},
                {.accumulate = true, .ahead = ahead});
  kernels::store_rows(kernels::head_rows(out, x.b, x.out_head(r)), t0, {O_.data(), Vp_, n, V});
}

template <class E>
void DecayChunk::forward(float* S, View4<E> out, const RecurrenceHeadOf<E>& x, int64_t t0, const NextChunk* next) {
  // The keys' side transposed once: every query head's scores use it (per key, K̂ is formed again, equal).
  kernels::transpose(T_.data(), Cp_, intra_right(), Kp_, n_, p_.K);
  for (int64_t r = 0; r < x.queries; ++r) {
    if (r > 0) load_queries(x, t0, r);
    // The next chunk's q and k arrive during the last query head's product.
    read_out(S, out, x, t0, r, next && r + 1 == x.queries ? &next->qk : nullptr);
  }
  advance(S, next ? &next->vg : nullptr);
}

// The Q side of a chunk's backward for query head r of x (its Q loaded): dO, A = mask(Q̂ K̂ᵀ) ⊙ W,
// dA = mask(dO Vᵀ) ⊙ W with its diagonal apart, and dQ without the diagonal's share.
template <class E>
void DecayChunk::query_grads(const float* S, View4<const E> dout, const RecurrenceHeadOf<E>& x, int64_t t0, int64_t r) {
  const int64_t K = p_.K, V = p_.V, n = n_;
  const float *left = intra_left(), *right = intra_right();
  const float* W = per_key_ || p_.decay == Decay::none ? nullptr : W_.data();
  kernels::pack_rows({dO_.data(), Vp_, n, V}, kernels::head_rows(dout, x.b, x.out_head(r)), t0, n);
  kernels::transpose(T_.data(), Cp_, right, Kp_, n, K);
  intra_scores(A_.data(), left, T_.data(), Kp_, K);
  kernels::transpose(T_.data(), Cp_, V_.data(), Vp_, n, V);
  kernels::lower_scores(dA_.data(), Cp_, dO_.data(), Vp_, T_.data(), Cp_, n, V);
  kernels::mask_lower(dA_.data(), Cp_, W, Cp_, n);
  // The diagonal (each token with itself, weight e^0) apart: it adds to dq and dk below, after the gate's
  // share is taken, so that ∂L/∂b never holds two O(1) terms that cancel (docs: "Numerics").
  for (int64_t t = 0; t < n; ++t) diag_[size_t(t)] = dA_[size_t(t * Cp_ + t)], dA_[size_t(t * Cp_ + t)] = 0.0f;
  // dQ = e^b ⊙ (dO Sᵀ) + [dA K̂] ⊙ e^{b − m} (per row: dA K).
  kernels::transpose(St_.data(), Kp_, S, Vp_, K, V);
  kernels::gemm({dQ_.data(), Kp_, n, K}, kernels::plain(dO_.data(), Vp_), {St_.data(), Kp_, V, K},
                {.row_scale = per_key_ ? nullptr : row_q_.data()});
  if (per_key_) {
    // dQ = e^{b−m} ⊙ (e^{m} ⊙ dO Sᵀ + dA K̂): the load's factors again, no exp here.
    const float* em = em_.data();
    kernels::lower_product(tmp_.data(), Kp_, dA_.data(), Cp_, right, Kp_, n, K, false);
    for (int64_t t = 0; t < n; ++t) {
      float* d = dQ_.data() + t * Kp_;
      const float *e = E_.data() + t * Kp_, *part = tmp_.data() + t * Kp_;
      for (int64_t c = 0; c < K; ++c) d[c] = e[c] * (em[c] * d[c] + part[c]);
    }
  } else {
    kernels::lower_product(dQ_.data(), Kp_, dA_.data(), Cp_, K_.data(), Kp_, n, K, true);
  }
}

namespace {
// dst[t, :cols] += src[t, :cols] for t < n (both of pitch ld).
void add_tile(float* dst, const float* src, int64_t ld, int64_t n, int64_t cols) {
  for (int64_t t = 0; t < n; ++t)
    for (int64_t c = 0; c < cols; ++c) dst[t * ld + c] += src[t * ld + c];
}
}  // namespace

// Query heads 1 .. R − 1 of x (query groups), before the first's: each one's dq, and its shares of dk (dAᵀ Q̂
// into dKq_, Q ⊙ dQ's diagonal in diagK_), dv (Aᵀ dO into dVq_) and the gate (Q ⊙ dQ), and its Q ⊙ e^b and
// dO kept for dS's update after the first's.
template <class E>
void DecayChunk::other_queries_backward(const float* S, View4<const E> dout, View4<E> dq, double* gate_grad,
                                        const RecurrenceHeadOf<E>& x, int64_t t0) {
  const int64_t K = p_.K, V = p_.V, n = n_, cols = p_.gate_cols();
  for (int64_t r = 1; r < x.queries; ++r) {
    load_queries(x, t0, r);
    query_grads(S, dout, x, t0, r);
    const bool first = r == 1;
    kernels::lower_transposed_product(dKq_.data(), Kp_, dA_.data(), Cp_, intra_left(), Kp_, n, K, !first);
    kernels::lower_transposed_product(dVq_.data(), Vp_, A_.data(), Cp_, dO_.data(), Vp_, n, V, !first);
    if (cols > 0)
      for (int64_t t = 0; t < n; ++t)
        kernels::add_gate_row(gate_grad + t * cols, Q_.data() + t * Kp_, dQ_.data() + t * Kp_, nullptr, nullptr, K,
                              cols == 1);
    for (int64_t t = 0; t < n; ++t)
      for (int64_t c = 0; c < K; ++c) {
        const size_t i = size_t(t * Kp_ + c);
        dQ_[i] += diag_[size_t(t)] * K_[i];
        diagK_[i] = (first ? 0.0f : diagK_[i]) + diag_[size_t(t)] * Q_[i];
      }
    std::copy_n(Qe_.data(), n * Kp_, Qes_.data() + (r - 1) * C_ * Kp_);
    std::copy_n(dO_.data(), n * Vp_, dOs_.data() + (r - 1) * C_ * Vp_);
    store_group_rows(query_view(dq, x.queries, r), x, t0, dQ_.data(), Kp_, n, K, p_.scale);
  }
  load_queries(x, t0, 0);
}

template <class E>
void DecayChunk::backward(const float* S, float* dS, View4<const E> dout, View4<E> dq, View4<E> dk, View4<E> dv,
                          double* gate_grad, bool final_chunk, const RecurrenceHeadOf<E>& x, int64_t t0,
                          GroupSum dq_sum, GroupSum dk_sum) {
  const int64_t K = p_.K, V = p_.V, n = n_, R = x.queries;
  if (R > 1) other_queries_backward(S, dout, dq, gate_grad, x, t0);
  query_grads(S, dout, x, t0, 0);
  // dK = e^{b_n − b} ⊙ (V dSᵀ) + [dAᵀ Q̂] ⊙ e^{m − b} (with query groups, every query head's dAᵀ Q̂).
  kernels::transpose(St_.data(), Kp_, dS, Vp_, K, V);
  kernels::gemm({dK_.data(), Kp_, n, K}, kernels::plain(V_.data(), Vp_), {St_.data(), Kp_, V, K},
                {.row_scale = per_key_ ? nullptr : row_k_.data()});
  if (per_key_) {
    // dK = e^{m−b} ⊙ (e^{b_n−m} ⊙ V dSᵀ + dAᵀ Q̂): the load's factors again, no exp here.
    const float* enm = enm_.data();
    kernels::lower_transposed_product(tmp_.data(), Kp_, dA_.data(), Cp_, intra_left(), Kp_, n, K, false);
    if (R > 1) add_tile(tmp_.data(), dKq_.data(), Kp_, n, K);
    for (int64_t t = 0; t < n; ++t) {
      float* d = dK_.data() + t * Kp_;
      const float *e = invE_.data() + t * Kp_, *part = tmp_.data() + t * Kp_;
      for (int64_t c = 0; c < K; ++c) d[c] = e[c] * (enm[c] * d[c] + part[c]);
    }
  } else {
    kernels::lower_transposed_product(dK_.data(), Kp_, dA_.data(), Cp_, Q_.data(), Kp_, n, K, true);
    if (R > 1) add_tile(dK_.data(), dKq_.data(), Kp_, n, K);
  }
  // dV = Aᵀ dO + (K ⊙ e^{b_n − b}) dS (the triangle first: overwriting, it needs no per-row ranges).
  kernels::lower_transposed_product(dV_.data(), Vp_, A_.data(), Cp_, dO_.data(), Vp_, n, V, false);
  if (R > 1) add_tile(dV_.data(), dVq_.data(), Vp_, n, V);
  kernels::gemm({dV_.data(), Vp_, n, V}, kernels::plain(Kd_.data(), Kp_), {dS, Vp_, K, V}, {.accumulate = true});
  // ∂L/∂b_t = Q ⊙ dQ − K ⊙ dK (Q = scale·q, so q·dq = Q·dQ), without the diagonal; the last token of
  // a sequence leaves out its pair with the final state (the caller adds that pair's share).
  const int64_t cols = p_.gate_cols();
  if (cols > 0)
    for (int64_t t = 0; t < n; ++t) {
      const int64_t r = t * Kp_;
      const bool with_k = !(final_chunk && t == n - 1);
      kernels::add_gate_row(gate_grad + t * cols, Q_.data() + r, dQ_.data() + r, with_k ? K_.data() + r : nullptr,
                            dK_.data() + r, K, cols == 1);
    }
  // The diagonal: ∂A[t, t]/∂Q_t = K_t and ∂A[t, t]/∂K_t = Q_t (the decay factors cancel on it).
  for (int64_t t = 0; t < n; ++t)
    for (int64_t c = 0; c < K; ++c) {
      dQ_[size_t(t * Kp_ + c)] += diag_[size_t(t)] * K_[size_t(t * Kp_ + c)];
      dK_[size_t(t * Kp_ + c)] += diag_[size_t(t)] * Q_[size_t(t * Kp_ + c)];
    }
  if (R > 1) add_tile(dK_.data(), diagK_.data(), Kp_, n, K);
  // dS ← diag(e^{b_n}) dS + (Q ⊙ e^b)ᵀ dO, of every query head.
  scale_state(dS);
  kernels::gemm({dS, Vp_, K, V}, kernels::transposed(Qe_.data(), Kp_), {dO_.data(), Vp_, n, V}, {.accumulate = true});
  for (int64_t r = 1; r < R; ++r)
    kernels::gemm({dS, Vp_, K, V}, kernels::transposed(Qes_.data() + (r - 1) * C_ * Kp_, Kp_),
                  {dOs_.data() + (r - 1) * C_ * Vp_, Vp_, n, V}, {.accumulate = true});
  // dq, dk: the group's first value head writes the rows, the others add (decayed_attention.cpp runs a
  // group's value heads in order on one thread); with query groups, the first query head's dq.
  store_group_rows(query_view(dq, R, 0), x, t0, dQ_.data(), Kp_, n, K, p_.scale, dq_sum);
  store_group_rows(dk, x, t0, dK_.data(), Kp_, n, K, 1.0f, dk_sum);
  kernels::store_rows(kernels::head_rows(dv, x.b, x.h), t0, {dV_.data(), Vp_, n, V});
}

// The element types the chunked drivers read and write.
#define LINATTN_DECAY_CHUNK(E)                                                                                       \
  template int64_t DecayChunk::load<E>(const RecurrenceHeadOf<E>&, int64_t, int64_t, int64_t, Sides);                \
  template void DecayChunk::forward<E>(float*, View4<E>, const RecurrenceHeadOf<E>&, int64_t, const NextChunk*);     \
  template void DecayChunk::backward<E>(const float*, float*, View4<const E>, View4<E>, View4<E>, View4<E>, double*, \
                                        bool, const RecurrenceHeadOf<E>&, int64_t, GroupSum, GroupSum);
LINATTN_DECAY_CHUNK(float)
LINATTN_DECAY_CHUNK(bf16)
LINATTN_DECAY_CHUNK(f16)
#undef LINATTN_DECAY_CHUNK

}  // namespace linattn::detail
