#include "ops/dplr/dplr_checks.hpp"

namespace linattn::detail {

DplrProblem check_dplr_arguments(const char* op, ConstTensorView q, ConstTensorView k, ConstTensorView v,
                                 ConstTensorView a, ConstTensorView b, ConstTensorView gk, const DplrOptions& o) {
  return check_recurrence_arguments(op, q, k, v,
                                    {.family = "the recurrence",
                                     .scale = o.scale,
                                     .cu_seqlens = o.cu_seqlens,
                                     .like_k = {{"a", a}, {"b", b}, {"gk", gk}}});
}

}  // namespace linattn::detail
