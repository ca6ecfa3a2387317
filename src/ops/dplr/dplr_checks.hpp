#pragma once
// The DPLR delta rule's words for the recurrence layer's checks (ops/recurrence/recurrence_checks.hpp):
// its signature (a, b and gk shaped like k; no chunked form, no gate tensor of the shared kinds).
#include "linattn/dplr.hpp"
#include "linattn/view.hpp"
#include "ops/recurrence/recurrence_checks.hpp"

namespace linattn::detail {

using DplrProblem = RecurrenceProblem;

// q, k, a, b, gk [B, T, H, K] and v [B, T, H, V] agreeing; scale finite; cu_seqlens empty or [N + 1]
// ascending from 0 to T with B = 1.
DplrProblem check_dplr_arguments(const char* op, ConstTensorView q, ConstTensorView k, ConstTensorView v,
                                 ConstTensorView a, ConstTensorView b, ConstTensorView gk, const DplrOptions& options);

}  // namespace linattn::detail
