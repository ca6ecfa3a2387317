#pragma once
// Exact softmax attention, out = softmax(q kᵀ · scale) v, tiled with an online softmax
// (FlashAttention-2 style): no N×N buffer in either direction.
#include <cstdint>
#include <optional>
#include <span>

#include "linattn/view.hpp"

namespace linattn {

struct SoftmaxAttentionOptions {
  // Multiplies q·k; default 1/√D.
  std::optional<float> scale;
  // Causal mask, aligned bottom-right: query i sees key j iff j ≤ i + (Nk − Nq),
  // as in PyTorch's and FlashAttention's causal cross-attention.
  bool causal = false;
  // Per-batch key lengths [B]: batch b sees keys j < key_lengths[b]. Empty: all Nk keys.
  std::span<const int64_t> key_lengths;
  // [N + 1], non-decreasing from 0 to T: N sequences packed along the time axis of batch row 0 (B must
  // be 1, Nq = Nk = T, no key_lengths). Sequence n holds tokens [cu_seqlens[n], cu_seqlens[n + 1]) of
  // q, k and v; its queries see its own keys only (causal: within the sequence), exactly as if it ran
  // alone; an empty sequence is allowed. lse stays [1, H, T]. Empty: every batch row is one sequence.
  std::span<const int64_t> cu_seqlens;
};

// out: [B, Nq, H, E]; lse: [B, H, Nq] contiguous, the log-sum-exp of each row's scaled scores
// (−∞ for a row that sees no key; its output row is 0).
// q: [B, Nq, H, D]; k: [B, Nk, H, D]; v: [B, Nk, H, E].
void softmax_attention_forward(TensorView out, std::span<float> lse, ConstTensorView q, ConstTensorView k,
                               ConstTensorView v, const SoftmaxAttentionOptions& options = {});

// dq, dk, dv: gradients, shaped like q, k, v (overwritten).
// dout: [B, Nq, H, E]; out and lse: as saved by the forward.
void softmax_attention_backward(TensorView dq, TensorView dk, TensorView dv, ConstTensorView dout, ConstTensorView q,
                                ConstTensorView k, ConstTensorView v, ConstTensorView out, std::span<const float> lse,
                                const SoftmaxAttentionOptions& options = {});

// Merges two partial results over disjoint key sets, as the online softmax does: on return (out, lse)
// is the attention of the same queries over the union of both key sets. Exact up to rounding:
// out = (e^(lse−m) out + e^(lse_other−m) out_other) / Σ, lse = m + log Σ, m the larger lse. A side
// with lse = −∞ (a row that saw no key there) contributes nothing; both −∞ leaves out = 0, lse = −∞.
// Split-key decoding and ring attention (src/distributed/) combine their blocks with it.
// out, out_other: [B, N, H, E]; lse, lse_other: [B, H, N] contiguous.
void softmax_attention_merge(TensorView out, std::span<float> lse, ConstTensorView out_other,
                             std::span<const float> lse_other);

}  // namespace linattn
