#include "core/validate.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>

namespace linattn::detail {

const char* axis_name(int axis) {
  static const char* const names[] = {"batch", "sequence", "heads", "dim"};
  return names[axis];
}

int64_t checked_mul(const char* op, const char* what, int64_t a, int64_t b) {
  int64_t product = 0;
  if (__builtin_mul_overflow(a, b, &product))
    fail_with(op, what, " overflows int64 (", a, " × ", b, "), expected a size that fits");
  return product;
}

// Elements from the first to the last addressed one, checked against int64 and byte overflow.
int64_t addressed_span(const char* op, const char* name, ConstTensorView view) {
  // The message strings are built only on failure: every operator call, and recurrent_step's every
  // token, passes through here.
  int64_t last = 0;
  for (int i = 0; i < 4; ++i) {
    int64_t step = 0;
    if (__builtin_mul_overflow(view.extent[i] - 1, view.stride[i], &step))
      checked_mul(op, (std::string(name) + "'s addressed span").c_str(), view.extent[i] - 1, view.stride[i]);
    if (__builtin_add_overflow(last, step, &last)) fail(op, std::string(name) + "'s addressed span overflows int64");
  }
  int64_t bytes = 0;
  if (__builtin_mul_overflow(last + 1, int64_t(sizeof(float)), &bytes))
    checked_mul(op, (std::string(name) + "'s byte span").c_str(), last + 1, int64_t(sizeof(float)));
  return last + 1;
}

void check_size(const char* op, const char* name, int64_t seen, int64_t expected, const char* shape) {
  if (seen == expected) return;
  fail_with(op, name, " has ", seen, " elements, expected ", expected, " (", shape, ")");
}

namespace {
// A valid view of exactly `extent`; because[axis] says where each extent comes from ("q's batch").
void check_shape(const char* op, const char* name, ConstTensorView view, std::array<int64_t, 4> extent,
                 const std::array<const char*, 4>& because) {
  check_view(op, name, view);
  for (int axis = 0; axis < 4; ++axis) check_extent(op, name, view, axis, extent[axis], because[axis]);
}
}  // namespace

void check_like(const char* op, const char* name, ConstTensorView view, ConstTensorView like, const char* like_name) {
  check_view(op, name, view);
  for (int axis = 0; axis < 4; ++axis) {
    const std::string because = std::string(like_name) + "'s " + axis_name(axis);
    check_extent(op, name, view, axis, like.extent[axis], because.c_str());
  }
}

void check_output_shape(const char* op, const char* name, ConstTensorView x, ConstTensorView q, ConstTensorView v) {
  check_shape(op, name, x, {q.batch(), q.seq(), q.heads(), v.dim()},
              {"q's batch", "q's sequence length", "q's heads", "v's value dim"});
}

void check_scale(const char* op, std::optional<float> scale) {
  if (!scale || std::isfinite(*scale)) return;
  fail_with(op, "options.scale is ", *scale, ", expected a finite value");
}

ConstTensorView shape_only(std::array<int64_t, 4> extent) {
  static const float nothing = 0.0f;
  std::array<int64_t, 4> stride{};
  int64_t step = 1;
  for (int axis = 3; axis >= 0; --axis) {
    stride[axis] = step;
    step = int64_t(uint64_t(step) * uint64_t(std::max<int64_t>(extent[axis], 1)));  // checked by check_view
  }
  return ConstTensorView(&nothing, extent, stride);
}

ConstTensorView shape_only(const char* op, const char* name, std::array<int64_t, 4> extent, size_t size) {
  const ConstTensorView view = shape_only(extent);
  check_view(op, name, view);
  check_size(op, (std::string(name) + ".data").c_str(), int64_t(size), extent[0] * extent[1] * extent[2] * extent[3],
             "the product of its extents");
  return view;
}

namespace {
std::span<const float> rows_of(const float* data, int64_t rows, int64_t cols) {
  return {data, size_t(std::max<int64_t>(rows, 0) * std::max<int64_t>(cols, 0))};
}
}  // namespace

void check_map_forward(const float* phi, const float* x, int64_t rows, int64_t dim, int64_t features) {
  check_outputs("FeatureMap::forward", {region("phi", rows_of(phi, rows, features))},
                {region("x", rows_of(x, rows, dim))});
}

void check_map_backward(const float* dx, const float* dphi, const float* x, int64_t rows, int64_t dim,
                        int64_t features) {
  check_outputs("FeatureMap::backward", {region("dx", rows_of(dx, rows, dim))},
                {region("dphi", rows_of(dphi, rows, features)), region("x", rows_of(x, rows, dim))});
}

}  // namespace linattn::detail

namespace linattn::boundary {

void fail(const char* op, const std::string& message) { throw Error(std::string("linattn::") + op + ": " + message); }

void check_view(const char* op, const char* name, ConstTensorView view) {
  if (view.data == nullptr) fail(op, std::string(name) + ".data is null, expected a pointer to memory");
  for (int i = 0; i < 4; ++i) {
    if (view.extent[i] <= 0)
      detail::fail_with(op, name, ".extent[", i, "] (", detail::axis_name(i), ") is ", view.extent[i],
                        ", expected ≥ 1");
    if (view.stride[i] < 0)
      detail::fail_with(op, name, ".stride[", i, "] (", detail::axis_name(i), ") is ", view.stride[i],
                        ", expected ≥ 0");
  }
  int64_t elements = 1;
  for (int i = 0; i < 4; ++i) {
    int64_t product = 0;
    if (__builtin_mul_overflow(elements, view.extent[i], &product))
      detail::checked_mul(op, (std::string(name) + "'s element count").c_str(), elements, view.extent[i]);
    elements = product;
  }
  detail::addressed_span(op, name, view);
}

void check_extent(const char* op, const char* name, ConstTensorView view, int axis, int64_t expected,
                  const char* because) {
  if (view.extent[axis] == expected) return;
  detail::fail_with(op, name, ".extent[", axis, "] (", detail::axis_name(axis), ") is ", view.extent[axis],
                    ", expected ", expected, " (", because, ")");
}

namespace {

// An argument's addressed bytes, as offsets from its first byte: element i of axis a at i·step[a].
struct Bytes {
  std::uintptr_t begin = 0;
  int64_t element = 0;
  std::array<int64_t, 4> extent{}, step{};
  int64_t end() const {  // one past the last addressed byte
    int64_t last = element;
    for (int a = 0; a < 4; ++a) last += (extent[a] - 1) * step[a];
    return last;
  }
};
Bytes bytes_of(const Region& r) {
  Bytes b{reinterpret_cast<std::uintptr_t>(r.data), r.element_bytes, r.extent, {}};
  for (int a = 0; a < 4; ++a) b.step[a] = r.stride[a] * r.element_bytes;
  return b;
}

// Whether a and b share no byte although their ranges overlap, shown by a period P: every step of
// either argument that is ≥ P is a multiple of P, the smaller steps keep each within an interval
// shorter than P, and the two intervals are apart modulo P. That is the case of slices of one fused
// buffer, e.g. q, k, v (or dq, dk, dv) as the three parts of a [B, N, 3, H, D] tensor.
bool interleaved_disjoint(const Bytes& a, const Bytes& b) {
  const int64_t d = int64_t(b.begin - a.begin);  // b's start − a's start (mod 2^64)
  const Bytes* both[2] = {&a, &b};
  for (const Bytes* owner : both)
    for (int axis = 0; axis < 4; ++axis) {
      const int64_t P = owner->step[axis];
      if (owner->extent[axis] == 1 || P <= 0) continue;
      int64_t span[2] = {a.element, b.element};  // bytes from the first to past the last, below P
      bool periodic = true;
      for (int i = 0; i < 2 && periodic; ++i)
        for (int k = 0; k < 4; ++k) {
          if (both[i]->extent[k] == 1) continue;
          if (both[i]->step[k] >= P)
            periodic = periodic && both[i]->step[k] % P == 0;
          else
            span[i] += (both[i]->extent[k] - 1) * both[i]->step[k];
        }
      if (!periodic || span[0] > P || span[1] > P) continue;
      const int64_t r = ((d % P) + P) % P;  // where b starts within a's period
      if (r >= span[0] && r + span[1] <= P) return true;
    }
  return false;
}

void check_apart(const char* op, const Region& out, const Region& other) {
  const Bytes a = bytes_of(out), b = bytes_of(other);
  if (a.begin < b.begin + std::uintptr_t(b.end()) && b.begin < a.begin + std::uintptr_t(a.end()) &&
      !interleaved_disjoint(a, b))
    fail(op, std::string(out.name) + " overlaps " + other.name + " in memory, expected a separate output buffer");
}

// With its axes ordered by stride, each stride of an output clears the span of the smaller ones
// (conservative for interleaved layouts). A stride 0, or rows that overlap, on an axis of extent > 1
// would make several threads write one element: a race, and no determinism.
void check_distinct(const char* op, const Region& x) {
  if (x.contiguous) return;
  // Axes by stride, ties in axis order: an insertion sort (std::stable_sort may allocate, and recurrent_step
  // runs this once per token).
  std::array<int, 4> axes{0, 1, 2, 3};
  for (int i = 1; i < 4; ++i)
    for (int j = i; j > 0 && x.stride[axes[j]] < x.stride[axes[j - 1]]; --j) std::swap(axes[j], axes[j - 1]);
  int64_t span = 1;  // elements covered by the axes so far
  for (int axis : axes) {
    if (x.extent[axis] == 1) continue;
    if (x.stride[axis] < span)
      detail::fail_with(op, x.name, ".stride[", axis, "] (", detail::axis_name(axis), ") is ", x.stride[axis],
                        ", expected ≥ ", span, " so that no two elements of an output share memory");
    span = x.stride[axis] * (x.extent[axis] - 1) + span;
  }
}

bool empty(const Region& r) {
  for (int64_t e : r.extent)
    if (e <= 0) return true;
  return r.data == nullptr;
}

}  // namespace

void check_outputs(const char* op, std::span<const Region> outputs, std::span<const Region> inputs) {
  for (auto out = outputs.begin(); out != outputs.end(); ++out) {
    if (empty(*out)) continue;
    for (const Region& in : inputs)
      if (!empty(in)) check_apart(op, *out, in);
    for (auto other = out + 1; other != outputs.end(); ++other)
      if (!empty(*other)) check_apart(op, *out, *other);
    check_distinct(op, *out);
  }
}

void check_key_lengths(const char* op, std::span<const int64_t> key_lengths, int64_t batch, int64_t keys) {
  if (key_lengths.empty()) return;
  if (int64_t(key_lengths.size()) != batch)
    detail::fail_with(op, "key_lengths has ", key_lengths.size(), " entries, expected ", batch, " (one per batch)");
  for (int64_t b = 0; b < batch; ++b) {
    if (key_lengths[b] < 0 || key_lengths[b] > keys)
      detail::fail_with(op, "key_lengths[", b, "] is ", key_lengths[b], ", expected a value in [0, ", keys,
                        "] (the number of keys)");
  }
}

void check_attention_inputs(const char* op, ConstTensorView q, ConstTensorView k, ConstTensorView v) {
  check_view(op, "q", q);
  check_view(op, "k", k);
  check_view(op, "v", v);
  check_extent(op, "k", k, 0, q.batch(), "q's batch");
  check_extent(op, "k", k, 2, q.heads(), "q's heads");
  check_extent(op, "k", k, 3, q.dim(), "q's head dim");
  check_extent(op, "v", v, 0, q.batch(), "q's batch");
  check_extent(op, "v", v, 1, k.seq(), "k's sequence length");
  check_extent(op, "v", v, 2, q.heads(), "q's heads");
}

}  // namespace linattn::boundary
