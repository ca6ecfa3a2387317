#pragma once
// The delta rule: DeltaNet, Gated DeltaNet and Kimi Delta Attention. One state S: [K, V] per
// (sequence, head), corrected before each write instead of only added to:
//   P_t = D_t S_{t−1},   S_t = P_t + β_t k_t (v_t − P_tᵀ k_t)ᵀ,   o_t = scale · S_tᵀ q_t,
// with D_t = I (DeltaNet), exp(g_t) I (Gated DeltaNet, one log decay per head and token) or
// diag(exp(g_t)) (KDA, one per key dimension). Two modes: chunked (forward and backward, the training
// path: the updates of a chunk folded into one triangular solve) and token by token (decoding). The
// layout is flash-linear-attention's: q, k [B, T, H, K], v and out [B, T, H, V], beta [B, T, H, 1],
// g [B, T, H, 1] or [B, T, H, K], states [N, H, K, V] (row-major; N = B, or the number of packed
// sequences with cu_seqlens).
//
// Grouped value heads (Qwen3-Next, Qwen3.5): v may have HV heads, a multiple of q's H; then v, out,
// beta, g and the states have HV heads where this file says H, and value head j reads q and k at head
// j / (HV / H) (flash-linear-attention's convention: q and k repeat_interleave'd), without a copy. The
// backward's dq and dk keep q's H heads, each the sum over its group. HV is read from v's shape; every
// call below takes it, the decode step included (RecurrentState(B, HV, K, V, ...)).
//
// Query groups (ONNX LinearAttention, opset 27): q may have R·H heads over k's and v's H; then q and out have
// R·H heads, k, v, beta, g and the states H, and query head i reads the state of head i / R (each state
// advances once, read out R times), without a copy. The forwards take them, token by token and the decode
// step included (RecurrentState(B, H, K, V, ...)); the backward refuses them, saying how to run it as R
// calls. The two groupings do not come together.
#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "linattn/recurrent_state.hpp"
#include "linattn/view.hpp"

namespace linattn {

enum class DeltaGate {
  none,   // D_t = I: DeltaNet (chunk_delta_rule)
  token,  // g: [B, T, H, 1], D_t = exp(g_t) I: Gated DeltaNet (chunk_gated_delta_rule)
  key,    // g: [B, T, H, K], D_t = diag(exp(g_t)): Kimi Delta Attention (chunk_kda)
};

// "delta_rule", "gated_delta_rule", "kda": the recurrence's name, which a decoding state records
// (RecurrentState::feature_map) so that a state of another recurrence is refused.
std::string delta_name(DeltaGate gate);

struct DeltaRuleOptions {
  DeltaGate gate = DeltaGate::none;
  // Multiplies q; default K^−1/2 (flash-linear-attention's default).
  std::optional<float> scale;
  // use_qk_l2norm_in_kernel: q and k each replaced by x / sqrt(Σ x² + 1e-6) per token and head
  // before anything else (flash-linear-attention's l2norm), its gradient included in the backward.
  bool qk_l2norm = false;
  // [N + 1], ascending from 0 to T: N sequences packed along the time axis of batch row 0 (B must be
  // 1), each with its own initial and final state. Empty: each batch row is one sequence (N = B).
  std::span<const int64_t> cu_seqlens;
  // Tokens per chunk of the chunked mode, ≥ 1; any value gives the same result up to fp32 rounding.
  // With a gate, a chunk also ends early where its cumulative log decay would span more than 60
  // (docs/delta-rule.md, "Numerics").
  int64_t chunk_size = 64;
};

// Chunked forward. out: [B, T, H, V]; q, k: [B, T, H, K]; v: [B, T, H, V]; beta: [B, T, H, 1] (any
// finite value; β ∈ (0, 2) keeps each update a contraction); g: [B, T, H, 1] (token), [B, T, H, K]
// (key) or an empty view ({}) for DeltaNet. initial_state: empty (zero) or [N, H, K, V]; final_state:
// empty (not wanted) or [N, H, K, V], overwritten with the state after each sequence's last token.
void delta_rule_forward(TensorView out, ConstTensorView q, ConstTensorView k, ConstTensorView v, ConstTensorView beta,
                        ConstTensorView g, const DeltaRuleOptions& options = {},
                        std::span<const float> initial_state = {}, std::span<float> final_state = {});

// Chunked backward of the same call. dout: [B, T, H, V]; dfinal_state: empty (zero) or the gradient
// of the loss with respect to final_state, [N, H, K, V]. Overwrites dq, dk, dv, dbeta (shaped like
// q, k, v, beta), dg (shaped like g; an empty view for DeltaNet) and dinitial_state (empty: not
// wanted, else [N, H, K, V]).
void delta_rule_backward(TensorView dq, TensorView dk, TensorView dv, TensorView dbeta, TensorView dg,
                         std::span<float> dinitial_state, ConstTensorView dout, std::span<const float> dfinal_state,
                         ConstTensorView q, ConstTensorView k, ConstTensorView v, ConstTensorView beta,
                         ConstTensorView g, const DeltaRuleOptions& options = {},
                         std::span<const float> initial_state = {});

// Token by token (flash-linear-attention's fused_recurrent_*): the same out as the forward; state
// [N, H, K, V] holds the initial state on entry (zeros for none) and the final state on return.
void delta_rule_recurrent_forward(TensorView out, ConstTensorView q, ConstTensorView k, ConstTensorView v,
                                  ConstTensorView beta, ConstTensorView g, std::span<float> state,
                                  const DeltaRuleOptions& options = {});
// The same out of place: initial_state [N, H, K, V] (empty: zeros) is read and left unchanged, final_state
// [N, H, K, V] receives the final state, written in the sweep that reads the initial one (a decode step costs
// no more than in place, where copying initial_state first would have).
void delta_rule_recurrent_forward(TensorView out, ConstTensorView q, ConstTensorView k, ConstTensorView v,
                                  ConstTensorView beta, ConstTensorView g, std::span<const float> initial_state,
                                  std::span<float> final_state, const DeltaRuleOptions& options = {});

// Decoding: the tokens of q, k, v, beta, g (any T ≥ 1) against a RecurrentState made for this
// recurrence (RecurrentState(B, H, K, V, delta_name(gate)); its z is unused and stays zero). Advances
// the state and its position; cu_seqlens is refused here (one state per batch row).
void delta_rule_step(TensorView out, ConstTensorView q, ConstTensorView k, ConstTensorView v, ConstTensorView beta,
                     ConstTensorView g, RecurrentState& state, const DeltaRuleOptions& options = {});

}  // namespace linattn
