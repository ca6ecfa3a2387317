#pragma once
// The recurrent token of the diagonal-plus-low-rank (DPLR) delta rule, RWKV-7's, for one head in two sweeps
// over its state. Single-threaded, SIMD (Highway, dispatched at runtime); every sum in a fixed order.
#include <cstdint>

namespace linattn::kernels {

// S: [M, E], a, b, k, q, w: [M], v, out: [E]. s = Sᵀa, then S ← diag(w) S + b sᵀ + k vᵀ and out = Sᵀq:
// the first sweep forms s, the second makes the rank-2 update and the readout (each updated element is
// fma(k, v, fma(b, s, w·S)), as two rank-1 updates in turn would round it). out null: the update alone,
// q unread (the backward's replays of the forward's states).
void rank2_update_readout(float* out, float* S, const float* a, const float* b, const float* k, const float* v,
                          const float* q, const float* w, int64_t M, int64_t E);

}  // namespace linattn::kernels
