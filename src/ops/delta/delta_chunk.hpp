#pragma once
// One chunk of the delta rule's chunked form, forward and backward side by side. For a chunk of n
// tokens entering with state S, cumulative log decays b_t (relative to the chunk's start, inclusive of
// token t; 0 without a gate) and Q = scale·q:
//   G = strict_lower((K ⊙ e^{b−m}) (K ⊙ e^{m−b})ᵀ),  T = (I + diag(β) G)⁻¹    (the WY/UT form)
//   [U | W] = T [diag(β) V | −diag(β) (K ⊙ e^{b})],  N = U + W S              (the written values)
//   O = (Q ⊙ e^{b}) S + lower((Q ⊙ e^{b−m}) (K ⊙ e^{m−b})ᵀ) N
//   S ← diag(e^{b_n}) S + (K ⊙ e^{b_n − b})ᵀ N
// with m a midpoint of each column's b, so that every factor e^{b_t − b_s} is split into two halves
// within e^{±kMaxLogSpan/2}: a chunk ends early where a column's b would span more than kMaxLogSpan
// (the decayed family's policy, docs/delta-rule.md "Numerics").
#include <cstdint>
#include <span>
#include <vector>

#include "kernels/decay_factors.hpp"
#include "linattn/view.hpp"
#include "ops/delta/delta_checks.hpp"
#include "ops/recurrence/chunked_driver.hpp"
#include "ops/recurrence/group_rows.hpp"

namespace linattn::detail {

// The chunked forward after the call's checks: every (sequence, head)'s chunks over the threads
// (delta_rule.cpp). E: float, or bf16 / f16 read and written in place, each chunk's rows widened as they are
// packed and out rounded as it is written (delta_half.cpp): no fp32 copy of a tensor.
// The chunked backward after the call's checks (delta_rule.cpp). E: float, or bf16 / f16 read and written in
// place, every gradient rounded once (delta_half.cpp; grouped value heads excepted, as for the decayed family).
template <class E>
void delta_backward_chunks(const DeltaProblem& p, int64_t chunk_size, View4<E> dq, View4<E> dk, View4<E> dv,
                           View4<E> dbeta, View4<E> dg, std::span<float> dinitial_state, View4<const E> dout,
                           std::span<const float> dfinal_state, View4<const E> q, View4<const E> k, View4<const E> v,
                           View4<const E> beta, View4<const E> g, std::span<const float> initial_state,
                           View4<const float> g_wide = {}, View4<float> dg_wide = {});

template <class E>
void delta_forward_chunks(const DeltaProblem& p, int64_t chunk_size, View4<E> out, View4<const E> q, View4<const E> k,
                          View4<const E> v, View4<const E> beta, View4<const E> g, std::span<const float> initial_state,
                          std::span<float> final_state, View4<const float> g_wide = {});

// The scratch of one thread: chunks of up to C tokens of one head at a time.
class DeltaChunk {
 public:
  DeltaChunk(const DeltaProblem& p, int64_t chunk_size, bool backward);

  // Reads tokens [t0, t0 + n) of head `x` (n ≤ 0: as many as fit, up to `end`); returns n. Forms Q,
  // K (normalised where asked), V, β, the decay factors, the scores G and P and the inverse T.
  template <class E>
  int64_t load(const RecurrenceHeadOf<E>& x, int64_t t0, int64_t end, int64_t n = 0);

  // S: [K, Vp] (the state before the chunk, then after it); writes the chunk's rows of out (with query
  // groups, of each query head of x, all against the same S and N before S advances once).
  // next: the rows to prefetch meanwhile (null: none; recurrence/chunked_driver.hpp).
  template <class E>
  void forward(float* S, View4<E> out, const RecurrenceHeadOf<E>& x, int64_t t0, const NextChunk* next = nullptr);
  // The state after the chunk, without the outputs.
  void advance(float* S);
  // With S the state before the chunk and dS the gradient of the state after it: writes the chunk's
  // rows of dq, dk, dv, dbeta and dg, and leaves in dS the gradient of the state before the chunk.
  // E: float, or a half type written in place, each gradient rounded once (with grouped value heads dq and
  // dk are summed in fp32 first: dq_sum, dk_sum).
  template <class E = float>
  struct Grads {
    View4<E> dq, dk, dv, dbeta, dg;
    View4<float> dg_wide = {};  // dg in fp32, beside half gradients (the gate came in fp32: g_wide)
    GroupSum dq_sum = {}, dk_sum = {};
  };
  template <class E>
  void backward(const float* S, float* dS, View4<const E> dout, const Grads<E>& grads, const RecurrenceHeadOf<E>& x,
                int64_t t0);

  int64_t Vp() const { return Vp_; }

 private:
  // Q from query head r of x (normalised where asked), the split sides and P.
  template <class E>
  void load_queries(const RecurrenceHeadOf<E>& x, int64_t t0, int64_t r);
  void l2norm_rows(float* X, float* r, float factor);
  // N = U + W S (pitch ldn_): into X where keep_x is false.
  float* written_values(const float* S, bool keep_x);
  // The gradients of a row's sides (dQe, dQl, dKt, dKl, dKr, dKd) from element r on.
  kernels::SplitSides side_grads(int64_t r) const;
  template <class E>
  void gate_gradient(const float* S, const float* dS, const Grads<E>& grads, const RecurrenceHeadOf<E>& x, int64_t t0);

  const DeltaProblem& p_;
  bool gated_;
  bool backward_;                                    // the backward's scratch (and factors) too
  int64_t C_, Cp_, Kp_, Vp_, Xp_, n_ = 0, ldn_ = 0;  // Xp_ = Vp_ + Kp_: the pitch of [U | W]
  std::vector<float> Q_, K_, V_, beta_, rq_, rk_;    // [C, Kp] ×2, [C, Vp], [C], l2norm's 1/‖·‖ [C] ×2
  std::vector<float> b_, mid_, bn_, em_, enm_;       // [C, Kp]; per column: m, b_n, e^{m}, e^{b_n − m}
  std::vector<float> lo_, hi_;                       // per column, while loading: b's range over the rows
  std::vector<float> El_, Er_, Eb_, Ed_;             // e^{b−m}, e^{m−b}, e^{b}, e^{b_n−b}: [C, Kp] (backward)
  std::vector<float> Ql_, Kl_, Kr_, Qe_, Kt_, Kd_;   // the factored sides, [C, Kp] (gated only)
  std::vector<float> G_, P_, T_, KrT_;               // [C, Cp] ×3, Krᵀ [K, Cp]
  std::vector<float> R_, X_, N_, O_;                 // [C, Xp] ×2, [C, Vp] ×2
  // Backward.
  std::vector<float> dO_, dN_, St_, dSt_, NT_, XT_, dP_, dA_, dW_, dR_, diag_;
  std::vector<float> dQe_, dQl_, dKl_, dKr_, dKd_, dKt_, dQ_, dK_, dV_, dB_, db_;
  const float* Ql() const { return gated_ ? Ql_.data() : Q_.data(); }
  const float* Qe() const { return gated_ ? Qe_.data() : Q_.data(); }
  const float* Kl() const { return gated_ ? Kl_.data() : K_.data(); }
  const float* Kr() const { return gated_ ? Kr_.data() : K_.data(); }
  const float* Kt() const { return gated_ ? Kt_.data() : K_.data(); }
  const float* Kd() const { return gated_ ? Kd_.data() : K_.data(); }
};

}  // namespace linattn::detail
