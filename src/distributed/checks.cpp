#include "distributed/checks.hpp"

#include <cmath>
#include <utility>

#include "linattn/error.hpp"

namespace linattn::distributed::detail {

namespace {
const char* axis_name(int axis) {
  static const char* names[] = {"batch", "sequence", "heads", "head dim"};
  return names[axis];
}
}  // namespace

void fail(const char* op, const std::string& what) {
  throw Error("linattn: distributed " + std::string(op) + ": " + what);
}

void check_extent(const char* op, const char* name, ConstTensorView x, int axis, int64_t want, const char* want_name) {
  if (x.extent[axis] == want) return;
  fail(op, std::string(name) + ".extent[" + std::to_string(axis) + "] (" + axis_name(axis) + ") is " +
               std::to_string(x.extent[axis]) + ", expected " + std::to_string(want) + " (" + want_name + ")");
}

void check_view(const char* op, const char* name, ConstTensorView x) {
  for (int a = 0; a < 4; ++a) {
    if (x.extent[a] < 0)
      fail(op, std::string(name) + ".extent[" + std::to_string(a) + "] is " + std::to_string(x.extent[a]) +
                   ", expected ≥ 0");
    if (x.stride[a] < 0)
      fail(op, std::string(name) + ".stride[" + std::to_string(a) + "] is " + std::to_string(x.stride[a]) +
                   ", expected ≥ 0");
  }
  const int64_t count = x.extent[0] * x.extent[1] * x.extent[2] * x.extent[3];
  if (count > 0 && x.data == nullptr)
    fail(op, std::string(name) + ".data is null, expected " + std::to_string(count) + " elements");
}

namespace {
const char* const kLikeQ[] = {"q's batch", "q's sequence", "q's heads", "q's head dim"};
}  // namespace

void check_qkv(const char* op, ConstTensorView q, ConstTensorView k, ConstTensorView v) {
  for (auto [name, x] : {std::pair{"q", q}, {"k", k}, {"v", v}}) check_view(op, name, x);
  for (int a = 0; a < 4; ++a) check_extent(op, "k", k, a, q.extent[a], kLikeQ[a]);
  for (int a = 0; a < 2; ++a) check_extent(op, "v", v, a, q.extent[a], kLikeQ[a]);
  const int64_t H = q.extent[2], HV = v.extent[2];
  if (HV != H && (H == 0 || HV % H != 0))
    fail(op, "v.extent[2] (heads) is " + std::to_string(HV) + ", expected a multiple of " + std::to_string(H) +
                 " (q's heads: grouped value heads)");
}

const char* value_heads_name(ConstTensorView q, ConstTensorView v) {
  return v.extent[2] == q.extent[2] ? "q's heads" : "v's heads";
}

void check_gate(const char* op, ConstTensorView g, ConstTensorView q, ConstTensorView v, int64_t cols, bool per_token,
                const std::string& no_gate) {
  if (cols == 0) {
    if (g.data != nullptr) fail(op, "g is given, expected an empty view (" + no_gate + ")");
    return;
  }
  check_view(op, "g", g);
  for (int a = 0; a < 2; ++a) check_extent(op, "g", g, a, q.extent[a], kLikeQ[a]);
  check_extent(op, "g", g, 2, v.extent[2], value_heads_name(q, v));
  check_extent(op, "g", g, 3, cols, per_token ? "a gate per token" : "q's head dim");
}

void check_scan_options(const char* op, size_t cu_seqlens_entries, int64_t chunk_size, std::optional<float> scale) {
  if (cu_seqlens_entries != 0)
    fail(op, "options.cu_seqlens has " + std::to_string(cu_seqlens_entries) +
                 " entries, expected none (a shard is one piece of each batch row)");
  if (chunk_size < 1) fail(op, "options.chunk_size is " + std::to_string(chunk_size) + ", expected ≥ 1");
  if (scale && !std::isfinite(*scale)) fail(op, "options.scale is " + std::to_string(*scale) + ", expected finite");
}

int64_t name_hash(const std::string& name) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : name) h = (h ^ c) * 1099511628211ull;
  return static_cast<int64_t>(h >> 1);
}

}  // namespace linattn::distributed::detail
