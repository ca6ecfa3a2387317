// One chunk of the DPLR delta rule (see dplr_chunk.hpp): its loads, decay factors, the triangular inverse
// and the forward, every product through kernels::gemm (the triangles in strips).
#include "ops/dplr/dplr_chunk.hpp"

#include <algorithm>
#include <cmath>

#include "kernels/decay_factors.hpp"
#include "kernels/gemm.hpp"
#include "kernels/pack.hpp"
#include "kernels/rows.hpp"
#include "kernels/triangle.hpp"
#include "ops/recurrence/sequences.hpp"

namespace linattn::detail {

using kernels::gemm;
using kernels::lower_product;
using kernels::padded;
using kernels::plain;
using kernels::transposed;

DplrChunk::DplrChunk(const DplrProblem& p, int64_t chunk_size)
    : p_(p), C_(chunk_rows(p.sequences, chunk_size)), Cp_(padded(C_)), Kp_(padded(p.K)), Vp_(padded(p.V)) {
  const auto size = [](int64_t rows, int64_t cols) { return size_t(rows * cols); };
  for (auto* x : {&Q_, &K_, &A_, &B_, &g_, &Ql_, &Qe_, &Br_, &Kr_}) x->resize(size(C_, Kp_));
  for (auto* x : {&lo_, &hi_, &mid_, &gn_, &em_, &enm_, &zero_}) x->resize(size_t(Kp_));
  for (auto* x : {&Al_, &Ae_}) x->resize(size(C_ + 1, Kp_));  // a row past the chunk: the last k's partner
  BKd_.resize(size(2 * C_, Kp_));
  UV_.resize(size(2 * C_, Vp_));
  for (auto* x : {&R_, &O_}) x->resize(size(C_, Vp_));
  for (auto* x : {&BrT_, &KrT_}) x->resize(size(Kp_, Cp_));
  for (auto* x : {&Aab_, &Aak_, &Pqb_, &Pqk_, &T_}) x->resize(size(C_, Cp_));
}

int64_t DplrChunk::load(const DplrHead& x, int64_t t0, int64_t end) {
  const int64_t K = p_.K, V = p_.V, rows = std::min(C_, end - t0);
  // Cumulative log decays per column; the chunk stops before the token that would make a column span more
  // than kMaxLogSpan counting the chunk's start (g = 0: a's exclusive decay of the first token), so that
  // e^{g}, e^{g_{t−1}} and e^{g_n − g} stay within e^{±kMaxLogSpan} too.
  kernels::pack_rows({g_.data(), Kp_, rows, K}, kernels::head_rows(x.gk, x.batch, x.h), t0, rows);
  const int64_t n = n_ = kernels::running_log_decays(
      {g_.data(), Kp_, K, lo_.data(), hi_.data(), mid_.data(), gn_.data(), em_.data(), enm_.data()}, rows,
      float(kMaxLogSpan), true, true);
  const auto pack = [&](float* dst, int64_t ld, ConstTensorView src, int64_t cols, float f = 1.0f) {
    kernels::pack_rows({dst, ld, C_, cols}, kernels::head_rows(src, x.batch, x.h), t0, n, f);
  };
  pack(Q_.data(), Kp_, x.q, K, p_.scale), pack(K_.data(), Kp_, x.k, K), pack(A_.data(), Kp_, x.a, K);
  pack(B_.data(), Kp_, x.b, K), pack(UV_.data() + n * Vp_, Vp_, x.v, V);
  // Each call forms its factors from one exp and one division per element: row t's e^{g_t − m} splits q_t
  // and b_t (Ql, Br; Qe, Bd), and k_t with the next token's a, whose exclusive decay is g_t (Kr, Kd; Al, Ae of
  // row t + 1). The first token's Al meets no earlier token (A_ab, A_ak are strictly lower): 0, where
  // e^{0 − m} could overflow after a reset (a first log decay below −kMaxLogSpan takes a chunk alone,
  // m = g_0); its Ae is a itself (e^{0}). Bd and Kd are the rows of one matrix, which meets the state in one
  // product.
  float *Ae = Ae_.data(), *Qe = Qe_.data(), *Bd = BKd_.data(), *Kd = Bd + n * Kp_;
  std::fill_n(Al_.data(), Kp_, 0.0f);
  std::copy_n(A_.data(), Kp_, Ae);
  for (int64_t t = 0; t < n; ++t) {
    const int64_t r = t * Kp_, next = r + Kp_;
    const float* g = g_.data() + r;
    kernels::split_factor_row({.Ql = Ql_.data() + r, .Kr = Br_.data() + r, .Qe = Qe + r, .Kd = Bd + r}, Q_.data() + r,
                              B_.data() + r, g, mid_.data(), em_.data(), enm_.data(), Kp_);
    kernels::split_factor_row({.Ql = Al_.data() + next, .Kr = Kr_.data() + r, .Qe = Ae + next, .Kd = Kd + r},
                              t + 1 < n ? A_.data() + next : zero_.data(), K_.data() + r, g, mid_.data(), em_.data(),
                              enm_.data(), Kp_);
  }
  // The score triangles: A_ab, A_ak strictly lower (a_t reads the state before token t), P_qb, P_qk lower.
  kernels::transpose(BrT_.data(), Cp_, Br_.data(), Kp_, n, K);
  kernels::transpose(KrT_.data(), Cp_, Kr_.data(), Kp_, n, K);
  const auto scores = [&](std::vector<float>& c, const std::vector<float>& left, const std::vector<float>& right_t,
                          bool strict) {
    kernels::lower_scores(c.data(), Cp_, left.data(), Kp_, right_t.data(), Cp_, n, K);
    kernels::mask_lower(c.data(), Cp_, nullptr, 0, n, strict);
  };
  scores(Aab_, Al_, BrT_, true), scores(Aak_, Al_, KrT_, true);
  scores(Pqb_, Ql_, BrT_, false), scores(Pqk_, Ql_, KrT_, false);
  kernels::unit_lower_inverse(T_.data(), Cp_, Aab_.data(), Cp_, n, 1.0f);
  return n;
}

void DplrChunk::forward(float* S, TensorView out, const DplrHead& x, int64_t t0) {
  const int64_t K = p_.K, V = p_.V, n = n_;
  float *R = R_.data(), *O = O_.data(), *U = UV_.data();
  const float* Vr = U + n * Vp_;
  // U = (I − A_ab)⁻¹ (A_ak V + Ae S): the low-rank reads of the chunk's tokens. (The triangles first:
  // overwriting, they need no per-row ranges.)
  lower_product(R, Vp_, Aak_.data(), Cp_, Vr, Vp_, n, V, false);
  gemm({R, Vp_, n, V}, plain(Ae_.data(), Kp_), {S, Vp_, K, V}, {.accumulate = true});
  lower_product(U, Vp_, T_.data(), Cp_, R, Vp_, n, V, false);
  // O = P_qb U + P_qk V + Qe S.
  lower_product(O, Vp_, Pqb_.data(), Cp_, U, Vp_, n, V, false);
  lower_product(O, Vp_, Pqk_.data(), Cp_, Vr, Vp_, n, V, true);
  gemm({O, Vp_, n, V}, plain(Qe_.data(), Kp_), {S, Vp_, K, V}, {.accumulate = true});
  kernels::unpack_rows(kernels::head_rows(out, x.batch, x.h), t0, {O, Vp_, n, V}, n);
  // S ← diag(e^{g_n}) S + [Bd; Kd]ᵀ [U; V].
  for (int64_t c = 0; c < K; ++c) {
    const float f = std::exp(gn_[size_t(c)]);
    for (int64_t e = 0; e < V; ++e) S[c * Vp_ + e] *= f;
  }
  gemm({S, Vp_, K, V}, transposed(BKd_.data(), Kp_), {U, Vp_, 2 * n, V}, {.accumulate = true});
}

}  // namespace linattn::detail
