#pragma once
// The argument checks that the delta rule's fast drivers and its fp64 oracle share (on top of the one
// boundary check of core/validate.hpp), so that both refuse the same calls with the same words.
#include <cstdint>
#include <span>
#include <vector>

#include "linattn/boundary.hpp"
#include "linattn/delta.hpp"
#include "linattn/view.hpp"
#include "ops/decay/decay_checks.hpp"

namespace linattn::detail {

// l2norm's ε (flash-linear-attention's): x / sqrt(Σ x² + ε).
inline constexpr double kL2NormEps = 1e-6;

struct DeltaProblem {
  int64_t B, T, H, K, V, N;
  float scale;
  DeltaGate gate;
  bool qk_l2norm;
  std::vector<DecaySequence> sequences;  // N of them, in state order (the decayed family's)
  int64_t state_size() const { return N * H * K * V; }
  // Columns of g: 1 (token), K (key), 0 (DeltaNet).
  int64_t gate_cols() const { return gate == DeltaGate::token ? 1 : gate == DeltaGate::key ? K : 0; }
};

// q, k [B, T, H, K], v [B, T, H, V] and beta [B, T, H, 1] agreeing; g shaped for options.gate
// ([B, T, H, 1] token, [B, T, H, K] key, else an empty view); scale finite; chunk_size in
// [1, kMaxDeltaChunkSize] (limits.hpp); cu_seqlens empty or [N + 1] ascending from 0 to T with B = 1.
DeltaProblem check_delta_arguments(const char* op, ConstTensorView q, ConstTensorView k, ConstTensorView v,
                                   ConstTensorView beta, ConstTensorView g, const DeltaRuleOptions& options);
// A state argument (`name`) of exactly N·H·K·V elements, or empty.
void check_delta_state(const char* op, const char* name, size_t size, const DeltaProblem& p);
// The inputs' regions for the aliasing check: q, k, v, beta, and g where the gate has a tensor.
std::vector<boundary::Region> delta_input_regions(ConstTensorView q, ConstTensorView k, ConstTensorView v,
                                                  ConstTensorView beta, ConstTensorView g);

}  // namespace linattn::detail
