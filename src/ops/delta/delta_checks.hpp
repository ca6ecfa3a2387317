#pragma once
// The delta rule's words for the recurrence layer's checks (ops/recurrence/recurrence_checks.hpp): its
// problem (the shared one and qk_l2norm) and its signature (β beside the gate).
#include "linattn/delta.hpp"
#include "linattn/view.hpp"
#include "ops/recurrence/recurrence_checks.hpp"

namespace linattn::detail {

// l2norm's ε (flash-linear-attention's): x / sqrt(Σ x² + ε).
inline constexpr double kL2NormEps = 1e-6;

struct DeltaProblem : RecurrenceProblem {
  bool qk_l2norm;
};

// The delta rule's signature: β, and g for the gates per token or key; its words in the messages. beta
// must outlive the signature (it points to it).
Signature delta_signature(const ConstTensorView& beta, ConstTensorView g, const DeltaRuleOptions& options);
// q, k [B, T, H, K], v [B, T, H, V] and beta [B, T, H, 1] agreeing; g shaped for options.gate
// ([B, T, H, 1] token, [B, T, H, K] key, else an empty view); scale finite; chunk_size in
// [1, kMaxDeltaChunkSize] (limits.hpp); cu_seqlens empty or [N + 1] ascending from 0 to T with B = 1.
DeltaProblem check_delta_arguments(const char* op, ConstTensorView q, ConstTensorView k, ConstTensorView v,
                                   ConstTensorView beta, ConstTensorView g, const DeltaRuleOptions& options);

}  // namespace linattn::detail
