#pragma once
// Non-causal linear attention over bf16 / f16 tensors read in place, tile by tile: each tile of q, k
// and v is widened as it is loaded (no fp32 copy of the tensors, as the shared conversion layer would
// make), φ formed, S and z summed and the products run in fp32, out rounded once per element.
#include "linattn/half.hpp"
#include "ops/linear/linear_common.hpp"

namespace linattn::detail {

// out: [B, Nq, H, E] = φ(Q) S / (φ(Q)·z + eps), S = Σ_{j < lengths[b]} φ(k_j) v_jᵀ; p from
// check_linear_forward_shapes (the caller checks the aliasing rule on the half views).
template <HalfType T>
void linear_forward_half_tiles(View4<T> out, View4<const T> q, View4<const T> k, View4<const T> v,
                               const LinearProblem& p);

}  // namespace linattn::detail
