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

// A half-precision backward's fp32 sum of one group's rows of dq or dk: [tokens, cols] from token `begin`,
// which the driver rounds into the gradient once, when the group's last value head is done (none: rows null).
struct GroupSum {
  float* rows = nullptr;
  int64_t begin = 0, cols = 0;
};

// Rounds a group's sum, `tokens` rows from sum.begin, into head qk of batch row b of grad, once.
template <class E>
void store_group_sum(View4<E> grad, int64_t b, int64_t qk, GroupSum sum, int64_t tokens) {
  kernels::store_rows(kernels::head_rows(grad, b, qk), sum.begin, {sum.rows, sum.cols, tokens, sum.cols});
}

// Rows [n0, n0 + n) of dst: factor · rows ([n, cols], pitch ld) from the group's first value head (first),
// plus factor · rows from each of the others (rows is scaled in place there: the same product, rounded once,
// that the call with q and k repeated per value head writes before its gradients are summed).
inline void add_group_rows(kernels::HeadRows<float> dst, bool first, int64_t n0, float* rows, int64_t ld, int64_t n,
                           int64_t cols, float factor) {
  if (first) return kernels::unpack_rows(dst, n0, {rows, ld, n, cols}, n, factor);
  if (factor != 1.0f)
    for (int64_t t = 0; t < n; ++t)
      for (int64_t c = 0; c < cols; ++c) rows[t * ld + c] *= factor;
  kernels::add_rows(dst, n0, {rows, ld, n, cols});
}

// Rows [t0, t0 + n) of grad's head x.qk() (add_group_rows). E: float, or a half type, whose gradients are
// rounded once: in place without grouped value heads (every head its group's first), else summed in `sum`.
template <class E>
void store_group_rows(View4<E> grad, const RecurrenceHeadOf<E>& x, int64_t t0, float* rows, int64_t ld, int64_t n,
                      int64_t cols, float factor = 1.0f, GroupSum sum = {}) {
  const bool first = x.h % x.group == 0;
  if constexpr (std::is_same_v<E, float>) {
    add_group_rows(kernels::head_rows(grad, x.b, x.qk()), first, t0, rows, ld, n, cols, factor);
  } else if (sum.rows) {
    add_group_rows({sum.rows, sum.cols, 1}, first, t0 - sum.begin, rows, ld, n, cols, factor);
  } else {
    if (factor != 1.0f)
      for (int64_t t = 0; t < n; ++t)
        for (int64_t c = 0; c < cols; ++c) rows[t * ld + c] *= factor;
    kernels::store_rows(kernels::head_rows(grad, x.b, x.qk()), t0, {rows, ld, n, cols});
  }
}

}  // namespace linattn::detail
