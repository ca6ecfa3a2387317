#pragma once
// The argument checks that the DPLR delta rule's fp32 drivers and its fp64 oracle share (on top of the one
// boundary check of core/validate.hpp and the decayed family's packed sequences), so that both refuse the
// same calls with the same words.
#include <cstdint>
#include <vector>

#include "linattn/boundary.hpp"
#include "linattn/dplr.hpp"
#include "linattn/view.hpp"
#include "ops/decay/decay_checks.hpp"

namespace linattn::detail {

struct DplrProblem {
  int64_t B, T, H, K, V, N;
  float scale;
  std::vector<DecaySequence> sequences;  // N of them, in state order (the decayed family's)
  int64_t state_size() const { return N * H * K * V; }
  // The most tokens of one sequence (sizes the backward's checkpoints).
  int64_t longest() const;
};

// q, k, a, b, gk [B, T, H, K] and v [B, T, H, V] agreeing; scale finite; cu_seqlens empty or [N + 1]
// ascending from 0 to T with B = 1.
DplrProblem check_dplr_arguments(const char* op, ConstTensorView q, ConstTensorView k, ConstTensorView v,
                                 ConstTensorView a, ConstTensorView b, ConstTensorView gk, const DplrOptions& options);
// A state argument (`name`) of exactly N·H·K·V elements, or empty.
void check_dplr_state(const char* op, const char* name, size_t size, const DplrProblem& p);
// The inputs' regions for the aliasing check: q, k, v, a, b, gk.
std::vector<boundary::Region> dplr_input_regions(ConstTensorView q, ConstTensorView k, ConstTensorView v,
                                                 ConstTensorView a, ConstTensorView b, ConstTensorView gk);

}  // namespace linattn::detail
