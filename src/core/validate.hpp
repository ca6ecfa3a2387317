#pragma once
// The one boundary check, shared by every driver, every fp64 oracle entry point and (through
// include/linattn/boundary.hpp, which declares its public part) the bindings. Each failure throws
// linattn::Error with a message that names the operator, the argument, the value seen and the
// value expected.
#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <sstream>
#include <string>

#include "linattn/boundary.hpp"
#include "linattn/error.hpp"
#include "linattn/view.hpp"

namespace linattn::detail {

using boundary::check_attention_inputs;
using boundary::check_extent;
using boundary::check_key_lengths;
using boundary::check_outputs;
using boundary::check_view;
using boundary::fail;
using boundary::object_region;
using boundary::region;

// fail(op, message) with the message streamed from its parts: formed only when a check fails, so that
// the passing path allocates nothing.
template <class... Parts>
[[noreturn]] void fail_with(const char* op, const Parts&... parts) {
  std::ostringstream m;
  (m << ... << parts);
  fail(op, m.str());
}

// The name of axis i of a [B, N, H, D] view: "batch", "sequence", "heads", "dim".
const char* axis_name(int axis);

// A valid view shaped like `like` (a gradient like its input); "<like_name>'s <axis>" is expected.
void check_like(const char* op, const char* name, ConstTensorView view, ConstTensorView like, const char* like_name);
// x: [B, Nq, H, E] of q and v, the shape of out and dout of every attention operator.
void check_output_shape(const char* op, const char* name, ConstTensorView x, ConstTensorView q, ConstTensorView v);
// A contiguous buffer argument has exactly `expected` elements.
void check_size(const char* op, const char* name, int64_t seen, int64_t expected, const char* shape);
// options.scale, when given, is finite.
void check_scale(const char* op, std::optional<float> scale);
// A view with `extent` and no memory behind it, so that the shape checks serve the fp64 oracle's
// dense tensors too (only extents are read: the pointer is never dereferenced).
ConstTensorView shape_only(std::array<int64_t, 4> extent);
// The same for an oracle tensor: its extents, and data.size() their product.
ConstTensorView shape_only(const char* op, const char* name, std::array<int64_t, 4> extent, size_t size);

// FeatureMap::forward's and backward's rows: phi [rows, M] shares no element with x [rows, D];
// dx [rows, D] none with dphi [rows, M] or x.
void check_map_forward(const float* phi, const float* x, int64_t rows, int64_t dim, int64_t features);
void check_map_backward(const float* dx, const float* dphi, const float* x, int64_t rows, int64_t dim,
                        int64_t features);

// Number of elements from the first to the last addressed element, inclusive; a linattn::Error
// naming `name` when it, or its size in bytes, overflows int64.
int64_t addressed_span(const char* op, const char* name, ConstTensorView view);

// a * b, or a linattn::Error naming `what` when it overflows int64.
int64_t checked_mul(const char* op, const char* what, int64_t a, int64_t b);

// key_lengths[b], or all keys when none are given.
inline int64_t key_length(std::span<const int64_t> key_lengths, int64_t b, int64_t keys) {
  return key_lengths.empty() ? keys : key_lengths[b];
}

}  // namespace linattn::detail
