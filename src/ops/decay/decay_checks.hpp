#pragma once
// The decayed family's words for the recurrence layer's checks (ops/recurrence/recurrence_checks.hpp):
// its problem (the shared one and its Decay), its signature, and its constant decays.
#include <cstdint>

#include "linattn/decay.hpp"
#include "linattn/view.hpp"
#include "ops/recurrence/recurrence_checks.hpp"

namespace linattn::detail {

struct DecayProblem : RecurrenceProblem {
  Decay decay;  // retention and lightning are both Gate::head: the decay says which
};

// The decayed family's signature: g for the gates per token or key; its words in the messages.
Signature decay_signature(ConstTensorView g, const DecayedAttentionOptions& options);
// q, k [B, T, H, K] and v [B, T, HV, V] agreeing, HV a multiple of H (grouped value heads: p.H counts HV);
// g shaped for options.decay ([B, T, HV, 1] token, [B, T, HV, K] key, else an empty view); g_gamma [HV]
// exactly for Decay::head (else empty); scale
// finite; chunk_size in [1, kMaxDecayChunkSize] (limits.hpp); cu_seqlens empty or [N + 1] ascending
// from 0 to T with B = 1.
DecayProblem check_decay_arguments(const char* op, ConstTensorView q, ConstTensorView k, ConstTensorView v,
                                   ConstTensorView g, const DecayedAttentionOptions& options);

// The constant log decay of value head h for the decays without a gate tensor (0 for none).
double constant_log_decay(const DecayedAttentionOptions& options, int64_t h);

}  // namespace linattn::detail
