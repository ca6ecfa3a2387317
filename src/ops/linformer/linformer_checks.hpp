#pragma once
// The argument checks that Linformer's fast driver and its fp64 oracle share (on top of the one
// boundary check of core/validate.hpp), so that both refuse the same calls with the same words.
#include <cstdint>

#include "linattn/linformer.hpp"
#include "linattn/view.hpp"

namespace linattn::detail {

struct LinformerSizes {
  int64_t B = 0, Nq = 0, Nk = 0, H = 0, D = 0, Ev = 0, P = 0, N_max = 0;
  int64_t projection_size() const { return P * N_max; }  // elements of one head's projection
};

// causal false; q, k, v agreeing (check_attention_inputs); P, N_max ≥ 1 and Nk ≤ N_max; E (and F,
// or none with share_key_value) of [heads, P, N_max] elements; key_lengths and scale. Returns the sizes.
LinformerSizes check_linformer_arguments(const char* op, ConstTensorView q, ConstTensorView k, ConstTensorView v,
                                         size_t E_size, size_t F_size, const LinformerOptions& options);

}  // namespace linattn::detail
