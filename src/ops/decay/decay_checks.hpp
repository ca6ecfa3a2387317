#pragma once
// The argument checks that the decayed family's fast drivers and its fp64 oracle share (on top of the
// one boundary check of core/validate.hpp), so that both refuse the same calls with the same words,
// and the sequences (cu_seqlens or one per batch row) both walk.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "linattn/boundary.hpp"
#include "linattn/decay.hpp"
#include "linattn/view.hpp"

namespace linattn::detail {

// One sequence: batch row b, tokens [begin, end), state index n (of [N, H, K, V]).
struct DecaySequence {
  int64_t b, begin, end, n;
};

struct DecayProblem {
  int64_t B, T, H, K, V, N;
  float scale;
  Decay decay;
  std::vector<DecaySequence> sequences;  // N of them, in state order
  int64_t state_size() const { return N * H * K * V; }
  // Columns of g: 1 (token), K (key), 0 (no gate tensor).
  int64_t gate_cols() const { return decay == Decay::token ? 1 : decay == Decay::key ? K : 0; }
};

// q, k [B, T, H, K] and v [B, T, H, V] agreeing; g shaped for options.decay ([B, T, H, 1] token,
// [B, T, H, K] key, else an empty view); g_gamma [H] exactly for Decay::head (else empty); scale
// finite; chunk_size in [1, kMaxDecayChunkSize] (limits.hpp); cu_seqlens empty or [N + 1] ascending
// from 0 to T with B = 1.
DecayProblem check_decay_arguments(const char* op, ConstTensorView q, ConstTensorView k, ConstTensorView v,
                                   ConstTensorView g, const DecayedAttentionOptions& options);
// The rows of a chunk's scratch: chunk_size, or the longest sequence where that is shorter (at least 1),
// as no chunk holds more tokens than its sequence.
int64_t chunk_rows(const std::vector<DecaySequence>& sequences, int64_t chunk_size);
// The sequences of a [B, T, ...] input: one per batch row, or those that cu_seqlens packs into batch
// row 0 ([N + 1] ascending from 0 to T; B must be 1), in state order. Shared by the delta rule.
std::vector<DecaySequence> packed_sequences(const char* op, int64_t B, int64_t T, std::span<const int64_t> cu_seqlens);
// A decoding state made for the recurrence `name` (by RecurrentState(B, H, K, V, name_call)) whose
// extents match q [B, T, H, K] and v [B, T, H, V], at a position that q's tokens can advance.
void check_decode_state(const char* op, const RecurrentState& state, const std::string& name, const char* name_call,
                        ConstTensorView q, ConstTensorView v);
// A state argument (`name`) of exactly N·H·K·V elements, or empty when `optional`.
void check_decay_state(const char* op, const char* name, size_t size, const DecayProblem& p);

// The inputs' regions for the aliasing check: q, k, v, and g where the decay has a gate tensor.
std::vector<boundary::Region> decay_input_regions(ConstTensorView q, ConstTensorView k, ConstTensorView v,
                                                  ConstTensorView g);

// The constant log decay of head h for the decays without a gate tensor (0 for none).
double constant_log_decay(const DecayedAttentionOptions& options, int64_t h);

}  // namespace linattn::detail
