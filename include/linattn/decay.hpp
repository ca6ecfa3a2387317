#pragma once
// Decayed linear attention: RetNet's retention, lightning attention, simple GLA (Mamba-2 style) and
// GLA. One state S: [K, V] per (sequence, head), multiplied by a decay before each update,
//   S_t = diag(exp(g_t)) S_{t−1} + k_t v_tᵀ,   o_t = scale · S_tᵀ q_t,
// with the log decay g_t (≤ 0 for a decay; any finite value is computed) set by `Decay`. Two modes:
// chunked (forward and backward, the training path) and token by token (decoding). The layout is
// flash-linear-attention's: q, k [B, T, H, K], v and out [B, T, H, V], states [N, H, K, V] (row-major,
// N = B, or the number of packed sequences with cu_seqlens).
//
// Grouped value heads (Qwen3.5-style callers of simple GLA and GLA): v may have HV heads, a multiple of q's
// H; then v, out, g, g_gamma and the states have HV heads where this file says H (retention's decay is that
// of the value head), and value head j reads q and k at head j / (HV / H) (flash-linear-attention's
// convention: q and k repeat_interleave'd), without a copy. The backward's dq and dk keep q's H heads, each
// the sum over its group. HV is read from v's shape; every call below takes it, the decode step included
// (RecurrentState(B, HV, K, V, decay_name(decay))).
//
// Query groups (ONNX LinearAttention, opset 27): q may have R·H heads over k's and v's H; then q and out have
// R·H heads, k, v, g, g_gamma and the states H, and query head i reads the state of head i / R (each state
// advances once, read out R times), without a copy. Every call below takes them, token by token and the
// decode step included (RecurrentState(B, H, K, V, decay_name(decay))); the backward's dq has q's R·H heads,
// dk, dv, dg and dinitial_state H, each the sum over the query heads. The two groupings do not come together.
#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "linattn/recurrent_state.hpp"
#include "linattn/view.hpp"

namespace linattn {

enum class Decay {
  none,       // g = 0: S_t = S_{t−1} + k vᵀ (chunk_linear_attn)
  retention,  // g = log(1 − 2^(−5−h)) for head h (RetNet; chunk_retention)
  head,       // g = options.g_gamma[h], a constant log decay per head (lightning attention)
  token,      // g: [B, T, H, 1], a log decay per head and token (simple GLA, Mamba-2's SSD)
  key,        // g: [B, T, H, K], a log decay per key dimension (GLA)
};

// "linear", "retention", "lightning", "simple_gla", "gla": the recurrence's name, which a decoding
// state records (RecurrentState::feature_map) so that a state of another recurrence is refused.
std::string decay_name(Decay decay);

struct DecayedAttentionOptions {
  Decay decay = Decay::none;
  // Multiplies q; default K^−1/2 (flash-linear-attention's default).
  std::optional<float> scale;
  // [H]: the per-head log decay of Decay::head.
  std::span<const float> g_gamma;
  // [N + 1], ascending from 0 to T: N sequences packed along the time axis of batch row 0 (B must be
  // 1); each starts from its own initial state and ends in its own final state, and none sees another.
  // Empty: each batch row is one sequence (N = B).
  std::span<const int64_t> cu_seqlens;
  // Tokens per chunk of the chunked mode, ≥ 1; any value gives the same result up to fp32 rounding.
  // For Decay::key a chunk also ends early where its cumulative log decay would span more than 60
  // (docs/decayed-attention.md, "Numerics").
  int64_t chunk_size = 64;
};

// The log decay of head h for Decay::retention: log(1 − 2^(−5−h)).
float retention_log_decay(int64_t head);

// Chunked forward. out: [B, T, H, V]; q, k: [B, T, H, K]; v: [B, T, H, V]; g: [B, T, H, 1] (token)
// or [B, T, H, K] (key), and an empty view ({}) for the decays without a gate tensor.
// initial_state: empty (zero) or [N, H, K, V]; final_state: empty (not wanted) or [N, H, K, V],
// overwritten with the state after each sequence's last token.
void decayed_attention_forward(TensorView out, ConstTensorView q, ConstTensorView k, ConstTensorView v,
                               ConstTensorView g, const DecayedAttentionOptions& options = {},
                               std::span<const float> initial_state = {}, std::span<float> final_state = {});

// Chunked backward of the same call. dout: [B, T, H, V]; dfinal_state: empty (zero) or the gradient
// of the loss with respect to final_state, [N, H, K, V]. Overwrites dq, dk, dv (shaped like q, k, v),
// dg (shaped like g; an empty view for the decays without a gate tensor) and dinitial_state (empty:
// not wanted, else [N, H, K, V]).
void decayed_attention_backward(TensorView dq, TensorView dk, TensorView dv, TensorView dg,
                                std::span<float> dinitial_state, ConstTensorView dout,
                                std::span<const float> dfinal_state, ConstTensorView q, ConstTensorView k,
                                ConstTensorView v, ConstTensorView g, const DecayedAttentionOptions& options = {},
                                std::span<const float> initial_state = {});

// Token by token (flash-linear-attention's fused_recurrent_*): the same out as the forward; state
// [N, H, K, V] holds the initial state on entry (zeros for none) and the final state on return.
void decayed_recurrent_forward(TensorView out, ConstTensorView q, ConstTensorView k, ConstTensorView v,
                               ConstTensorView g, std::span<float> state, const DecayedAttentionOptions& options = {});
// The same out of place: initial_state [N, H, K, V] (empty: zeros) is read and left unchanged, final_state
// [N, H, K, V] receives the final state. A short call (a decode step) writes it in the sweep that reads the
// initial state, so it costs no more than the call in place, where copying initial_state first would have.
void decayed_recurrent_forward(TensorView out, ConstTensorView q, ConstTensorView k, ConstTensorView v,
                               ConstTensorView g, std::span<const float> initial_state, std::span<float> final_state,
                               const DecayedAttentionOptions& options = {});

// Decoding: the tokens of q, k, v (any T ≥ 1) against a RecurrentState made for this recurrence
// (RecurrentState(B, H, K, V, decay_name(decay)); its z is unused and stays zero). Advances the
// state and its position; cu_seqlens is refused here (one state per batch row).
void decayed_step(TensorView out, ConstTensorView q, ConstTensorView k, ConstTensorView v, ConstTensorView g,
                  RecurrentState& state, const DecayedAttentionOptions& options = {});

}  // namespace linattn
