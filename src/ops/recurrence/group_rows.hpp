#pragma once
// A chunk's rows of a q/k gradient (dq, dk) with grouped value heads: every value head of a group reads
// the same q/k head, so its chunk adds to the same rows. The first value head of the group writes them and
// the others add theirs; the chunked drivers run a group's value heads in order on one thread, so no two
// threads touch the same rows, nothing is locked or reduced afterwards, and the sum's order (that of the
// value heads) is the same at any thread count. Without grouping every head is first: a plain write.
#include <cstdint>
#include <type_traits>

#include "kernels/pack.hpp"
#include "linattn/view.hpp"
#include "ops/recurrence/recurrence_checks.hpp"

namespace linattn::detail {

// Rows [t0, t0 + n) of grad's head x.qk(): factor · rows ([n, cols], pitch ld) from the group's first value
// head, plus factor · rows from each of the others (rows is scaled in place there: the same product, rounded
// once, that the call with q and k repeated per value head writes before its gradients are summed). E: float,
// or a half type, whose gradients are rounded once: without grouped value heads only (every head its group's
// first; the half backwards run grouped heads through fp32 copies).
template <class E>
void store_group_rows(View4<E> grad, const RecurrenceHeadOf<E>& x, int64_t t0, float* rows, int64_t ld, int64_t n,
                      int64_t cols, float factor = 1.0f) {
  const kernels::HeadRows<E> dst = kernels::head_rows(grad, x.b, x.qk());
  if constexpr (std::is_same_v<E, float>)
    if (x.h % x.group == 0) return kernels::unpack_rows(dst, t0, {rows, ld, n, cols}, n, factor);
  if (factor != 1.0f)
    for (int64_t t = 0; t < n; ++t)
      for (int64_t c = 0; c < cols; ++c) rows[t * ld + c] *= factor;
  if constexpr (std::is_same_v<E, float>)
    kernels::add_rows(dst, t0, {rows, ld, n, cols});
  else
    kernels::store_rows(dst, t0, {rows, ld, n, cols});
}

}  // namespace linattn::detail
