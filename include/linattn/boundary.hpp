#pragma once
// The one boundary check that every operator, every fp64 oracle entry point and the bindings run
// (src/core/validate.cpp). Public so that a caller outside src/ (python/, tools/) checks its
// arguments the same way before it sizes outputs from them. Each failure throws linattn::Error,
// "linattn::<op>: <argument> … is <seen>, expected <wanted>".
#include <array>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>

#include "linattn/view.hpp"

namespace linattn::boundary {

// The memory one argument addresses: a strided [B, N, H, D] view of any element type, or a
// contiguous span (seen as [1, 1, 1, n]). An empty span addresses nothing.
struct Region {
  const char* name = "";
  const void* data = nullptr;
  int64_t element_bytes = 0;
  std::array<int64_t, 4> extent{}, stride{};  // stride in elements, ≥ 0
  bool contiguous = false;                    // a span: distinct elements by construction
};
template <class T>
Region region(const char* name, View4<T> view) {
  return {name, view.data, int64_t(sizeof(T)), view.extent, view.stride, false};
}
template <class T>
Region region(const char* name, std::span<T> values) {
  return {name, values.data(), int64_t(sizeof(T)), {1, 1, 1, int64_t(values.size())}, {0, 0, 0, 1}, true};
}
// An object as a whole (a container an fp64 oracle fills, a state): two such regions overlap when
// they are the same object. None for a null pointer.
template <class T>
Region object_region(const char* name, const T* object) {
  return {name, object, int64_t(sizeof(T)), {1, 1, 1, object ? 1 : 0}, {0, 0, 0, 1}, true};
}

// The aliasing rule. Every output addresses distinct elements (no stride 0 and no overlapping rows
// on an axis of extent > 1: the message names the output, the axis and the stride), and shares no
// element with another output or with an input (the message names both). Disjoint interleaved
// slices of one buffer (q, k, v or dq, dk, dv as the parts of a fused [B, N, 3, H, D] tensor) are
// accepted; inputs may share memory with each other and may have stride 0. Run it after the views
// have passed check_view.
void check_outputs(const char* op, std::span<const Region> outputs, std::span<const Region> inputs);
inline void check_outputs(const char* op, std::initializer_list<Region> outputs, std::initializer_list<Region> inputs) {
  check_outputs(op, std::span<const Region>(outputs.begin(), outputs.size()),
                std::span<const Region>(inputs.begin(), inputs.size()));
}

[[noreturn]] void fail(const char* op, const std::string& message);
// Non-null data, positive extents, non-negative strides, and an addressed span that fits in int64.
void check_view(const char* op, const char* name, ConstTensorView view);
// view.extent[axis] == expected; `because` says where the expectation comes from ("q's batch").
void check_extent(const char* op, const char* name, ConstTensorView view, int axis, int64_t expected,
                  const char* because);
// q [B, Nq, H, D], k [B, Nk, H, D], v [B, Nk, H, E]: each a valid view, and agreeing with each other.
void check_attention_inputs(const char* op, ConstTensorView q, ConstTensorView k, ConstTensorView v);
// Empty, or [B] values each in [0, Nk].
void check_key_lengths(const char* op, std::span<const int64_t> key_lengths, int64_t batch, int64_t keys);

}  // namespace linattn::boundary
