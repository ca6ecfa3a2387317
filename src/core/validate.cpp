#include "core/validate.hpp"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <sstream>

namespace linattn::detail {

void fail(const char* op, const std::string& message) { throw Error(std::string("linattn::") + op + ": " + message); }

const char* axis_name(int axis) {
  static const char* const names[] = {"batch", "sequence", "heads", "dim"};
  return names[axis];
}

int64_t checked_mul(const char* op, const char* what, int64_t a, int64_t b) {
  int64_t product = 0;
  if (__builtin_mul_overflow(a, b, &product)) {
    std::ostringstream m;
    m << what << " overflows int64 (" << a << " × " << b << "), expected a size that fits";
    fail(op, m.str());
  }
  return product;
}

namespace {
// Elements from the first to the last addressed one, checked against int64 and byte overflow.
int64_t addressed_span(const char* op, const std::string& name, ConstTensorView view) {
  int64_t last = 0;
  for (int i = 0; i < 4; ++i) {
    int64_t step = checked_mul(op, (name + "'s addressed span").c_str(), view.extent[i] - 1, view.stride[i]);
    if (__builtin_add_overflow(last, step, &last)) fail(op, name + "'s addressed span overflows int64");
  }
  checked_mul(op, (name + "'s byte span").c_str(), last + 1, int64_t(sizeof(float)));
  return last + 1;
}
}  // namespace

int64_t addressed_elements(ConstTensorView view) { return addressed_span("view", "view", view); }

void check_view(const char* op, const char* name, ConstTensorView view) {
  if (view.data == nullptr) fail(op, std::string(name) + ".data is null, expected a pointer to memory");
  for (int i = 0; i < 4; ++i) {
    if (view.extent[i] <= 0) {
      std::ostringstream m;
      m << name << ".extent[" << i << "] (" << axis_name(i) << ") is " << view.extent[i] << ", expected ≥ 1";
      fail(op, m.str());
    }
    if (view.stride[i] < 0) {
      std::ostringstream m;
      m << name << ".stride[" << i << "] (" << axis_name(i) << ") is " << view.stride[i] << ", expected ≥ 0";
      fail(op, m.str());
    }
  }
  int64_t elements = 1;
  for (int i = 0; i < 4; ++i)
    elements = checked_mul(op, (std::string(name) + "'s element count").c_str(), elements, view.extent[i]);
  addressed_span(op, name, view);
}

void check_extent(const char* op, const char* name, ConstTensorView view, int axis, int64_t expected,
                  const char* because) {
  if (view.extent[axis] == expected) return;
  std::ostringstream m;
  m << name << ".extent[" << axis << "] (" << axis_name(axis) << ") is " << view.extent[axis] << ", expected "
    << expected << " (" << because << ")";
  fail(op, m.str());
}

namespace {
// Whether a and b share no element although their address ranges overlap, shown by a period P: every
// stride of either view that is ≥ P is a multiple of P, the smaller strides keep each view within an
// interval shorter than P, and the two intervals are apart modulo P. That is the case of slices of one
// fused buffer, e.g. q, k, v (or dq, dk, dv) as the three parts of a [B, N, 3, H, D] tensor.
bool interleaved_disjoint(ConstTensorView a, ConstTensorView b) {
  const auto bytes = reinterpret_cast<std::uintptr_t>(b.data) - reinterpret_cast<std::uintptr_t>(a.data);
  if (bytes % sizeof(float) != 0) return false;
  const int64_t d = int64_t(bytes) / int64_t(sizeof(float));  // b.data − a.data, as elements (mod 2^64)
  const ConstTensorView views[2] = {a, b};
  for (const ConstTensorView& owner : views)
    for (int axis = 0; axis < 4; ++axis) {
      const int64_t P = owner.stride[axis];
      if (owner.extent[axis] == 1 || P <= 0) continue;
      int64_t span[2] = {1, 1};  // elements from a view's first to past its last, below the period
      bool periodic = true;
      for (int i = 0; i < 2 && periodic; ++i)
        for (int k = 0; k < 4; ++k) {
          if (views[i].extent[k] == 1) continue;
          if (views[i].stride[k] >= P)
            periodic = periodic && views[i].stride[k] % P == 0;
          else
            span[i] += (views[i].extent[k] - 1) * views[i].stride[k];
        }
      if (!periodic || span[0] > P || span[1] > P) continue;
      const int64_t r = ((d % P) + P) % P;  // where b starts within a's period
      if (r >= span[0] && r + span[1] <= P) return true;
    }
  return false;
}
}  // namespace

void check_no_alias(const char* op, const char* out_name, ConstTensorView out, const char* in_name,
                    ConstTensorView in) {
  const float* out_begin = out.data;
  const float* out_end = out.data + addressed_elements(out);
  const float* in_begin = in.data;
  const float* in_end = in.data + addressed_elements(in);
  if (out_begin < in_end && in_begin < out_end && !interleaved_disjoint(out, in)) {
    fail(op, std::string(out_name) + " overlaps " + in_name + " in memory, expected a separate output buffer");
  }
}

void check_key_lengths(const char* op, std::span<const int64_t> key_lengths, int64_t batch, int64_t keys) {
  if (key_lengths.empty()) return;
  if (int64_t(key_lengths.size()) != batch) {
    std::ostringstream m;
    m << "key_lengths has " << key_lengths.size() << " entries, expected " << batch << " (one per batch)";
    fail(op, m.str());
  }
  for (int64_t b = 0; b < batch; ++b) {
    if (key_lengths[b] < 0 || key_lengths[b] > keys) {
      std::ostringstream m;
      m << "key_lengths[" << b << "] is " << key_lengths[b] << ", expected a value in [0, " << keys
        << "] (the number of keys)";
      fail(op, m.str());
    }
  }
}

void check_size(const char* op, const char* name, int64_t seen, int64_t expected, const char* shape) {
  if (seen == expected) return;
  std::ostringstream m;
  m << name << " has " << seen << " elements, expected " << expected << " (" << shape << ")";
  fail(op, m.str());
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

}  // namespace linattn::detail
