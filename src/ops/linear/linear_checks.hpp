#pragma once
// The argument checks that linear attention's fast drivers and its fp64 oracle share (on top of the
// one boundary check of core/validate.hpp), so that both refuse the same calls with the same words.
#include <array>
#include <cstdint>

#include "linattn/linear_attention.hpp"
#include "linattn/view.hpp"

namespace linattn::detail {

// q, k, v agreeing with each other (check_attention_inputs), options.feature_map set, options.eps
// finite and ≥ 0, key_lengths in range, cu_seqlens when given (core/sequences.hpp), and a feature dim M ≥ 1 whose state
// [B, H, M, E] fits in int64. Returns M.
int64_t check_linear_arguments(const char* op, ConstTensorView q, ConstTensorView k, ConstTensorView v,
                               const LinearAttentionOptions& options);
// A state of [batch, heads, feature_dim, value_dim] `seen` where [B, H, M, E] `want` is expected;
// the message names `name`'s accessor ("initial.batch() is 1, expected 2 (q's batch)").
void check_state_extents(const char* op, const char* name, const std::array<int64_t, 4>& seen,
                         const std::array<int64_t, 4>& want);

}  // namespace linattn::detail
