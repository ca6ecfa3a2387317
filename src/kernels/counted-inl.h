// A count known only at run time, handed to a template that wants it at compile time: the kernels' last
// group of rows or vector columns, fewer than a full block. Highway's per-target include guard: this file
// is compiled once per target.
#if defined(LINATTN_KERNELS_COUNTED_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef LINATTN_KERNELS_COUNTED_INL_H_
#undef LINATTN_KERNELS_COUNTED_INL_H_
#else
#define LINATTN_KERNELS_COUNTED_INL_H_
#endif

#include <cstdint>
#include <type_traits>
#include <utility>

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace linattn::kernels {
namespace HWY_NAMESPACE {

template <class Body, int... kCounts>
HWY_INLINE void CountedOf(int64_t n, Body& body, std::integer_sequence<int, kCounts...>) {
  ((n == kCounts + 1 ? (body(std::integral_constant<int, kCounts + 1>{}), 0) : 0), ...);
}

// body(std::integral_constant<int, n>{}) for n in [1, kBelow); nothing for any other n.
template <int kBelow, class Body>
HWY_INLINE void Counted(int64_t n, Body&& body) {
  if constexpr (kBelow > 1) CountedOf(n, body, std::make_integer_sequence<int, kBelow - 1>{});
}

}  // namespace HWY_NAMESPACE
}  // namespace linattn::kernels
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
