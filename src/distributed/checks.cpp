#include "distributed/checks.hpp"

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

int64_t name_hash(const std::string& name) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : name) h = (h ^ c) * 1099511628211ull;
  return static_cast<int64_t>(h >> 1);
}

}  // namespace linattn::distributed::detail
