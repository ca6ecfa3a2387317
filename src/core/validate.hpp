#pragma once
// Checks at the public boundary, shared by every driver. Each failure throws linattn::Error with
// a message that names the operator, the argument, the value seen and the value expected.
#include <cstdint>
#include <span>
#include <string>

#include "linattn/error.hpp"
#include "linattn/view.hpp"

namespace linattn::detail {

[[noreturn]] void fail(const char* op, const std::string& message);

// The name of axis i of a [B, N, H, D] view: "batch", "sequence", "heads", "dim".
const char* axis_name(int axis);

// Non-null data, positive extents, non-negative strides, and an addressed span that fits in int64.
void check_view(const char* op, const char* name, ConstTensorView view);
// view.extent[axis] == expected; `because` says where the expectation comes from ("q's batch").
void check_extent(const char* op, const char* name, ConstTensorView view, int axis, int64_t expected,
                  const char* because);
// No element of out is an element of in: their address ranges are apart, or they are interleaved
// slices of one buffer (e.g. the q, k, v parts of a fused [B, N, 3, H, D] tensor).
void check_no_alias(const char* op, const char* out_name, ConstTensorView out, const char* in_name, ConstTensorView in);
// Empty, or [B] values each in [0, Nk].
void check_key_lengths(const char* op, std::span<const int64_t> key_lengths, int64_t batch, int64_t keys);
// A contiguous buffer argument has exactly `expected` elements.
void check_size(const char* op, const char* name, int64_t seen, int64_t expected, const char* shape);
// q [B, Nq, H, D], k [B, Nk, H, D], v [B, Nk, H, E]: each a valid view, and agreeing with each other.
void check_attention_inputs(const char* op, ConstTensorView q, ConstTensorView k, ConstTensorView v);

// Number of elements from the first to the last addressed element, inclusive.
int64_t addressed_elements(ConstTensorView view);

// a * b, or a linattn::Error naming `what` when it overflows int64.
int64_t checked_mul(const char* op, const char* what, int64_t a, int64_t b);

// key_lengths[b], or all keys when none are given.
inline int64_t key_length(std::span<const int64_t> key_lengths, int64_t b, int64_t keys) {
  return key_lengths.empty() ? keys : key_lengths[b];
}

}  // namespace linattn::detail
