#pragma once
// The DPLR delta rule's words for the recurrence layer's checks (ops/recurrence/recurrence_checks.hpp):
// its signature (a, b and gk shaped like k; a chunk size; no gate tensor of the shared kinds).
#include <span>

#include "linattn/dplr.hpp"
#include "linattn/view.hpp"
#include "ops/recurrence/recurrence_checks.hpp"

namespace linattn::detail {

using DplrProblem = RecurrenceProblem;

// q, k, a, b, gk [B, T, H, K] and v [B, T, H, V] agreeing; scale finite; chunk_size in
// [1, kMaxDplrChunkSize]; cu_seqlens empty or [N + 1] ascending from 0 to T with B = 1.
DplrProblem check_dplr_arguments(const char* op, ConstTensorView q, ConstTensorView k, ConstTensorView v,
                                 ConstTensorView a, ConstTensorView b, ConstTensorView gk, const DplrOptions& options);

// A forward's checks (token by token or chunked): the arguments, out shaped like v, `state` (the initial
// state in, the final state out) of N·H·K·V elements, and neither output sharing memory with another or an
// input.
DplrProblem check_dplr_forward(const char* op, TensorView out, ConstTensorView q, ConstTensorView k, ConstTensorView v,
                               ConstTensorView a, ConstTensorView b, ConstTensorView gk, std::span<float> state,
                               const DplrOptions& options);

}  // namespace linattn::detail
