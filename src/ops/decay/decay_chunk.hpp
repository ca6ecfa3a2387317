#pragma once
// One chunk of the decayed family's chunked form, forward and backward side by side. For a chunk of
// n tokens with cumulative log decays b_t (relative to the chunk's start, inclusive of token t),
//   O = (Q ⊙ e^{b}) S + [(Q̂ K̂ᵀ) ⊙ W] V,      S ← diag(e^{b_n}) S + (K ⊙ e^{b_n − b})ᵀ V,
// with Q = scale·q. The intra-chunk decay e^{b_t − b_s} enters one of two ways:
//  - one log decay per token (none, retention, lightning, simple GLA): W[t, s] = e^{b_t − b_s} for
//    s ≤ t, each factor a product of the tokens' decays a = e^{g} (exactly 0 across a reset, g = −inf
//    or −1e30, where a running sum in fp32 would swallow the decays after it); Q̂ = Q, K̂ = K;
//  - one per key dimension (GLA): W is the causal mask and the decay is split around a midpoint m
//    of each column, Q̂ = Q ⊙ e^{b − m}, K̂ = K ⊙ e^{m − b}. A chunk ends early where a column's b
//    would span more than kMaxLogSpan, so no factor exceeds e^{kMaxLogSpan/2} (docs/decayed-attention.md).
#include <cstdint>
#include <span>
#include <vector>

#include "kernels/gemm.hpp"
#include "linattn/view.hpp"
#include "ops/decay/decay_checks.hpp"
#include "ops/recurrence/chunked_driver.hpp"
#include "ops/recurrence/group_rows.hpp"

namespace linattn::detail {

// The chunked forward after the call's checks: every (sequence, head)'s chunks, heads in lockstep groups, over
// the threads (decayed_attention.cpp). E: float, or bf16 / f16 read and written in place, each chunk's rows
// widened as they are packed and out rounded as it is written (decay_half.cpp): no fp32 copy of a tensor.
template <class E>
void decayed_forward_chunks(const DecayProblem& p, const DecayedAttentionOptions& options, View4<E> out,
                            View4<const E> q, View4<const E> k, View4<const E> v, View4<const E> g,
                            std::span<const float> initial_state, std::span<float> final_state,
                            View4<const float> g_wide = {});

// The chunked backward after the call's checks (decayed_attention.cpp). E: float, or bf16 / f16 read and
// written in place, every gradient rounded once (decay_half.cpp; grouped value heads, whose dq and dk are
// sums over value heads, excepted: they go through fp32 copies).
template <class E>
void decayed_backward_chunks(const DecayProblem& p, const DecayedAttentionOptions& options, View4<E> dq, View4<E> dk,
                             View4<E> dv, View4<E> dg, std::span<float> dinitial_state, View4<const E> dout,
                             std::span<const float> dfinal_state, View4<const E> q, View4<const E> k, View4<const E> v,
                             View4<const E> g, std::span<const float> initial_state, View4<const float> g_wide = {},
                             View4<float> dg_wide = {});

// The scratch of one thread: chunks of up to C tokens of one head at a time.
class DecayChunk {
 public:
  DecayChunk(const DecayProblem& p, const DecayedAttentionOptions& options, bool backward);

  // What a load forms: everything the chunk's forward and backward read, or only what advance reads
  // (K ⊙ e^{b_n − b}, V and e^{b_n}: the backward's first sweep, which only carries the state).
  enum class Sides { all, state };
  // Reads tokens [t0, t0 + n) of head `x` (n ≤ 0: as many as fit, up to `end`); returns n.
  // Forms Q, K, V, the cumulative log decays and every decay factor of the chunk (Sides::state: K, V
  // and the factors of the state's update only). E: float, or bf16 / f16 rows widened as they are packed.
  template <class E>
  int64_t load(const RecurrenceHeadOf<E>& x, int64_t t0, int64_t end, int64_t n = 0, Sides sides = Sides::all);

  // S: [K, Vp] (the state before the chunk, then after it); writes the chunk's rows of out. With query
  // groups every query head of x reads S (and the chunk's K, V and decays) in turn, each forming its own Q
  // and scores, before S advances once. next: the rows to prefetch meanwhile (null: none).
  // E: out's and x's element type (half: out rounded to nearest even as it is written).
  template <class E>
  void forward(float* S, View4<E> out, const RecurrenceHeadOf<E>& x, int64_t t0, const NextChunk* next = nullptr);
  // S ← diag(e^{b_n}) S + (K ⊙ e^{b_n − b})ᵀ V: the state after the chunk, without the outputs.
  void advance(float* S, const kernels::RowsAhead* ahead = nullptr);
  // With S the state before the chunk and dS the gradient of the state after it: writes the chunk's
  // rows of dv, and of dq and dk (grouped value heads: adds to them, but for the group's first; see
  // recurrence/group_rows.hpp), adds each token's ∂L/∂b (cumulative, before the reverse sum) to gate_grad
  // ([n, gate_cols]), and leaves in dS the gradient of the state before the chunk. final_chunk: the
  // sequence's last chunk, whose last token's pair with the final state the caller accounts for. With query
  // groups every query head's read-out adds its share (its dq its own; dk, dv, the gate and dS their sums).
  // Leaves the first query head loaded.
  // E: float, or a half type read and written in place (dq, dk rounded once; with grouped value heads summed
  // in fp32 first: dq_sum, dk_sum, group_rows.hpp).
  template <class E>
  void backward(const float* S, float* dS, View4<const E> dout, View4<E> dq, View4<E> dk, View4<E> dv,
                double* gate_grad, bool final_chunk, const RecurrenceHeadOf<E>& x, int64_t t0, GroupSum dq_sum = {},
                GroupSum dk_sum = {});

  int64_t Vp() const { return Vp_; }
  const DecayProblem& problem() const { return p_; }

 private:
  void intra_scores(float* A, const float* left, const float* right_t, int64_t depth_pitch, int64_t depth);
  // Q from query head r of x and the factors formed from it (Q ⊙ e^b; per key Q̂ as well, and K̂ and
  // K ⊙ e^{b_n − b} again, the same values).
  template <class E>
  void load_queries(const RecurrenceHeadOf<E>& x, int64_t t0, int64_t r);
  // The backward's Q side for query head r of x, and the other query heads' shares (decay_chunk.cpp).
  template <class E>
  void query_grads(const float* S, View4<const E> dout, const RecurrenceHeadOf<E>& x, int64_t t0, int64_t r);
  template <class E>
  void other_queries_backward(const float* S, View4<const E> dout, View4<E> dq, double* gate_grad,
                              const RecurrenceHeadOf<E>& x, int64_t t0);
  // The chunk's rows of out's head x.out_head(r) from S and the transposed right side in T_.
  template <class E>
  void read_out(const float* S, View4<E> out, const RecurrenceHeadOf<E>& x, int64_t t0, int64_t r,
                const kernels::RowsAhead* ahead);
  void scale_state(float* S) const;  // S ← diag(e^{b_n}) S
  // Per row: e^{b_n}, e^{b_n − b_t} and K ⊙ e^{b_n − b}; with the queries also e^{b_t}, W and Q ⊙ e^{b}.
  void row_factors(bool queries);
  // The two sides of the intra-chunk scores: Q̂, K̂ (per key) or Q, K.
  const float* intra_left() const { return per_key_ ? Qh_.data() : Q_.data(); }
  const float* intra_right() const { return per_key_ ? Kh_.data() : K_.data(); }

  const DecayProblem& p_;
  const DecayedAttentionOptions& o_;
  bool per_key_;   // GLA: factors per element; else per row
  bool backward_;  // the backward's scratch (and factors) too
  int64_t C_, Cp_, Kp_, Vp_, n_ = 0;
  std::vector<float> Q_, K_, V_;          // [C, Kp], [C, Kp], [C, Vp]
  std::vector<float> a_;                  // per row: each token's decay e^{g} [C]
  std::vector<float> b_, mid_, bn_;       // per key: b [C, Kp], m [Kp], b_n [Kp]
  std::vector<float> E_, invE_;           // per key: e^{b − m}, e^{m − b}: [C, Kp]
  std::vector<float> Qe_, Kd_, Qh_, Kh_;  // Q ⊙ e^b, K ⊙ e^{b_n − b}, Q̂, K̂: [C, Kp] (Q̂, K̂ per key only)
  std::vector<float> W_, A_, O_, T_;      // [C, Cp], [C, Cp], [C, Vp], transposes [max(K, V), Cp]
  std::vector<float> dO_, dQ_, dK_, dV_, tmp_, dA_, St_;  // backward: [C, Vp], [C, Kp] ×3 + [C, Vp], [C, Cp], [V, Kp]
  std::vector<float> diag_;                               // backward: dA's diagonal [C]
  // backward with query groups: the other query heads' Σ dAᵀ Q̂, Σ Aᵀ dO, Σ diag Q [C, Kp], [C, Vp], [C, Kp],
  // and their Q ⊙ e^b, dO [R − 1, C, Kp], [R − 1, C, Vp]
  std::vector<float> dKq_, dVq_, diagK_, Qes_, dOs_;
  std::vector<float> row_q_, row_k_;       // per row: e^{b_t}, e^{b_n − b_t}
  std::vector<float> lo_, hi_, em_, enm_;  // per key: b's range while loading; the column factors e^{m}, e^{b_n − m}
  float gamma_ = 1.0f;                     // per row: e^{b_n}
};

}  // namespace linattn::detail
