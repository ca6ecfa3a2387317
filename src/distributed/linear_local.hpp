#pragma once
// The local passes of distributed linear attention that the single-process operators do not expose:
// one shard's state sums (S, z), a read-out against a given state (the non-causal output), and
// their backward. A state travels as B·H items of [S (M×E row-major) | z (M)], (b, h) row-major.
// Every product goes through kernels::gemm over fixed tiles of tokens, so results never depend on
// the thread count.
#include <cstdint>

#include "linattn/feature_map.hpp"
#include "linattn/view.hpp"

namespace linattn::distributed::detail {

// Floats per (b, h) item: M·E + M.
inline int64_t state_item_floats(int64_t M, int64_t E) { return M * E + M; }

// items: [B, H] × [S | z] = Σ_t φ(k_t) v_tᵀ, Σ_t φ(k_t) over this shard (overwritten).
// k: [B, n, H, D], v: [B, n, H, E].
void shard_state_sums(const FeatureMap& map, ConstTensorView k, ConstTensorView v, int64_t M, float* items);

// out_t = φ(q_t)ᵀ S / (φ(q_t)ᵀ z + eps) (or φ(q_t)ᵀ S without normalize) against the state items.
// out: [B, n, H, E], q: [B, n, H, D].
void readout_forward(const FeatureMap& map, TensorView out, ConstTensorView q, const float* items, int64_t M, float eps,
                     bool normalize);

// Finishes outputs formed from a zero state once the state (S, z) that entered them is known: out
// holds each token's unnormalised φ(q_t)ᵀ L_t against the local state L_t (a causal pass from zero with
// normalize off), and becomes out_t = (out_t + φ(q_t)ᵀ S) / (φ(q_t)ᵀ (z + Σ_{τ ≤ t} φ(k_τ)) + eps), or
// out_t + φ(q_t)ᵀ S without normalize. out: [B, n, H, E]; q, k: [B, n, H, D].
void finish_from_state(const FeatureMap& map, TensorView out, ConstTensorView q, ConstTensorView k, const float* items,
                       int64_t M, float eps, bool normalize);

// The backward of readout_forward: dq overwritten, ditems overwritten with ∂L/∂(S, z) of this
// shard's queries. dout: [B, n, H, E].
void readout_backward(const FeatureMap& map, TensorView dq, float* ditems, ConstTensorView dout, ConstTensorView q,
                      const float* items, int64_t M, float eps, bool normalize);

// The backward of shard_state_sums for a state gradient G (items): dk_t (+)= (∂φ/∂k_t)ᵀ (G_S v_t + G_z),
// dv_t (+)= G_Sᵀ φ(k_t); overwrites dk and dv unless accumulate.
void state_sums_backward(const FeatureMap& map, TensorView dk, TensorView dv, ConstTensorView k, ConstTensorView v,
                         const float* gitems, int64_t M, bool accumulate);

}  // namespace linattn::distributed::detail
