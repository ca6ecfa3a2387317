#pragma once
// The generalized delta rule, diagonal plus low rank (DPLR): RWKV-7's recurrence. One state S: [K, V] per
// (sequence, head), carried through a transition that is a diagonal decay plus a rank-one term:
//   S_t = (diag(exp(gk_t)) + b_t a_tᵀ) S_{t−1} + k_t v_tᵀ,   o_t = scale · S_tᵀ q_t.
// flash-linear-attention writes the same recurrence on the transposed state [V, K] as
// S_t = S_{t−1} (diag(exp(gk_t)) + a_t b_tᵀ) + v_t k_tᵀ; its states are stored [N, H, K, V], as here.
// gk is a log decay (exp(gk) ∈ (0, 1] for gk ≤ 0); RWKV-7's w is that log (chunk_rwkv7 passes w as gk).
// With a = −k̂ and b = β k̂ it is the delta rule's update (delta.hpp); in general the transition has
// eigenvalues outside [0, 1] and the state can grow (docs/rwkv7.md, "Numerics").
// Layout (flash-linear-attention's): q, k, a, b, gk [B, T, H, K], v and out [B, T, H, V], states
// [N, H, K, V] row-major (N = B, or the number of packed sequences with cu_seqlens). Token by token
// (forward, backward, decode step) and chunked (forward: the WY form, docs/rwkv7.md "The chunked form").
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "linattn/recurrent_state.hpp"
#include "linattn/reference.hpp"
#include "linattn/view.hpp"

namespace linattn {

struct DplrOptions {
  // Multiplies q; default K^−1/2 (flash-linear-attention's chunk_dplr_delta_rule default; chunk_rwkv7
  // passes 1.0).
  std::optional<float> scale;
  // [N + 1], ascending from 0 to T: N sequences packed along the time axis of batch row 0 (B must be
  // 1), each with its own initial and final state. Empty: each batch row is one sequence (N = B).
  std::span<const int64_t> cu_seqlens;
  // Tokens per chunk of the chunked forward, in [1, limits::kMaxDplrChunkSize]; any value gives the same
  // result up to fp32 rounding. A chunk also ends early where a key column's cumulative log decay would span
  // more than 60 (docs/rwkv7.md, "The chunked form"). The token-by-token calls check it and do not use it.
  int64_t chunk_size = 64;
};

// Chunked (flash-linear-attention's chunk_dplr_delta_rule forward): the arguments of
// dplr_delta_rule_recurrent_forward with the same meaning (state in: the initial state, zeros for none;
// out: the final state), the same result up to fp32 rounding, computed a chunk of options.chunk_size
// tokens at a time with matrix products (docs/rwkv7.md, "The chunked form": on the CPU at K = V = 64 it
// does 1.8× the token path's arithmetic and measured 2.4–2.7× its time).
void dplr_delta_rule_forward(TensorView out, ConstTensorView q, ConstTensorView k, ConstTensorView v, ConstTensorView a,
                             ConstTensorView b, ConstTensorView gk, std::span<float> state,
                             const DplrOptions& options = {});

// Token by token (flash-linear-attention's fused_recurrent_dplr_delta_rule): out [B, T, H, V]; q, k, a,
// b, gk [B, T, H, K]; v [B, T, H, V]; state [N, H, K, V] holds the initial state on entry (zeros for
// none) and the final state on return.
void dplr_delta_rule_recurrent_forward(TensorView out, ConstTensorView q, ConstTensorView k, ConstTensorView v,
                                       ConstTensorView a, ConstTensorView b, ConstTensorView gk, std::span<float> state,
                                       const DplrOptions& options = {});

// The backward of the same recurrence, token by token in reverse. dout: [B, T, H, V]; dfinal_state:
// empty (zero) or the gradient of the loss with respect to the final state, [N, H, K, V];
// initial_state: empty (zero) or [N, H, K, V]. Overwrites dq, dk, dv, da, db, dgk (shaped like q, k, v,
// a, b, gk) and dinitial_state (empty: not wanted, else [N, H, K, V]).
void dplr_delta_rule_recurrent_backward(TensorView dq, TensorView dk, TensorView dv, TensorView da, TensorView db,
                                        TensorView dgk, std::span<float> dinitial_state, ConstTensorView dout,
                                        std::span<const float> dfinal_state, ConstTensorView q, ConstTensorView k,
                                        ConstTensorView v, ConstTensorView a, ConstTensorView b, ConstTensorView gk,
                                        const DplrOptions& options = {}, std::span<const float> initial_state = {});

// "dplr_delta_rule": the recurrence's name, which a decoding state records (RecurrentState::feature_map) so
// that a state of another recurrence is refused.
inline constexpr const char* kDplrName = "dplr_delta_rule";

// Decoding: the tokens of q, k, v, a, b, gk (any T ≥ 1) against a RecurrentState made for this recurrence
// (RecurrentState(B, H, K, V, kDplrName), fp32; its z is unused and stays zero). Advances the state and its
// position, so that it can be saved and restored as any state (docs/state-format.md); cu_seqlens is refused
// here (one state per batch row).
void dplr_delta_rule_step(TensorView out, ConstTensorView q, ConstTensorView k, ConstTensorView v, ConstTensorView a,
                          ConstTensorView b, ConstTensorView gk, RecurrentState& state,
                          const DplrOptions& options = {});

namespace reference {

// The fp64 oracle of the same recurrence, token by token from the formula (src/ops/dplr/dplr_reference.cpp).
// States [N, H, K, V] row-major; initial_state null: zero.
DecayedOutput dplr_delta_rule_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& a,
                                      const Tensor& b, const Tensor& gk, const DplrOptions& options = {},
                                      const std::vector<double>* initial_state = nullptr);
struct DplrGradients {
  Tensor dq, dk, dv, da, db, dgk;
  std::vector<double> dinitial_state;  // [N, H, K, V]
};
// Its reverse sweep, with dfinal_state (null: zero) the gradient of the final state.
DplrGradients dplr_delta_rule_backward(const Tensor& dout, const std::vector<double>* dfinal_state, const Tensor& q,
                                       const Tensor& k, const Tensor& v, const Tensor& a, const Tensor& b,
                                       const Tensor& gk, const DplrOptions& options = {},
                                       const std::vector<double>* initial_state = nullptr);

}  // namespace reference
}  // namespace linattn
