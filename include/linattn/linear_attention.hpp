#pragma once
// Linear attention, out_i = φ(q_i)ᵀ S / (φ(q_i)ᵀ z + eps) with S = Σ_j φ(k_j) v_jᵀ, z = Σ_j φ(k_j),
// in three modes: non-causal (sums over all keys), causal (sums over j ≤ i, computed chunkwise)
// and recurrent (one token at a time against a RecurrentState).
#include <cstdint>
#include <span>

#include "linattn/feature_map.hpp"
#include "linattn/recurrent_state.hpp"
#include "linattn/view.hpp"

namespace linattn {

struct LinearAttentionOptions {
  FeatureMapPtr feature_map = elu_feature_map();
  // Added to the normaliser φ(q)ᵀz, as in the seed.
  float eps = 1e-6f;
  // false: out_i = φ(q_i)ᵀ S, without the normaliser.
  bool normalize = true;
  // Sums over j ≤ i + (Nk − Nq) (bottom-right alignment, as for softmax).
  bool causal = false;
  // Per-batch key lengths [B]: only keys j < key_lengths[b] enter the sums. Empty: all keys.
  std::span<const int64_t> key_lengths;
  // Causal mode: tokens per chunk (intra-chunk masked product + inter-chunk state). 32: the fastest
  // backward and within 6% of the fastest forward on the reference machine (docs/decisions.md); any
  // value ≥ 1 gives the same result up to fp32 rounding.
  int64_t chunk_size = 32;
  // [N + 1], non-decreasing from 0 to T: N sequences packed along the time axis of batch row 0 (B must
  // be 1, Nq = Nk = T, no key_lengths). Sequence n holds tokens [cu_seqlens[n], cu_seqlens[n + 1]) of
  // q, k and v; its sums run over its own keys only (causal: within the sequence), exactly as if it ran
  // alone; an empty sequence is allowed. Taken by linear_attention_forward/backward (either mode) and
  // the fp64 oracle without a state; the entry points with a state per batch row
  // (causal_linear_attention_*, recurrent_step) refuse it. Empty: every batch row is one sequence.
  std::span<const int64_t> cu_seqlens;
};

// out: [B, Nq, H, E]; q: [B, Nq, H, D]; k: [B, Nk, H, D]; v: [B, Nk, H, E].
// Causal when options.causal (same as causal_linear_attention_forward without a state).
void linear_attention_forward(TensorView out, ConstTensorView q, ConstTensorView k, ConstTensorView v,
                              const LinearAttentionOptions& options = {});
// dq, dk, dv shaped like q, k, v (overwritten); dout: [B, Nq, H, E].
void linear_attention_backward(TensorView dq, TensorView dk, TensorView dv, ConstTensorView dout, ConstTensorView q,
                               ConstTensorView k, ConstTensorView v, const LinearAttentionOptions& options = {});

// Causal linear attention (options.causal is implied). Nq must equal Nk.
// initial: the state before the first token (none: zero). final_state: when given, receives the
// state after the last key (per batch, after key_lengths[b] keys), resized as needed.
void causal_linear_attention_forward(TensorView out, ConstTensorView q, ConstTensorView k, ConstTensorView v,
                                     const LinearAttentionOptions& options = {},
                                     const RecurrentState* initial = nullptr, RecurrentState* final_state = nullptr);
// dinitial: when given, receives the gradient of the loss with respect to initial's S and z.
void causal_linear_attention_backward(TensorView dq, TensorView dk, TensorView dv, ConstTensorView dout,
                                      ConstTensorView q, ConstTensorView k, ConstTensorView v,
                                      const LinearAttentionOptions& options = {},
                                      const RecurrentState* initial = nullptr, RecurrentState* dinitial = nullptr);

// One token for every (batch, head): out: [B, 1, H, E]; q, k: [B, 1, H, D]; v: [B, 1, H, E].
// Adds φ(k)vᵀ to S and φ(k) to z, then reads out with φ(q) (the token sees itself, as in causal).
void recurrent_step(TensorView out, ConstTensorView q, ConstTensorView k, ConstTensorView v, RecurrentState& state,
                    const LinearAttentionOptions& options = {});

}  // namespace linattn
