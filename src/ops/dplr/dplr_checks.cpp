#include "ops/dplr/dplr_checks.hpp"

#include "core/validate.hpp"
#include "linattn/limits.hpp"

namespace linattn::detail {

DplrProblem check_dplr_arguments(const char* op, ConstTensorView q, ConstTensorView k, ConstTensorView v,
                                 ConstTensorView a, ConstTensorView b, ConstTensorView gk, const DplrOptions& o) {
  return check_recurrence_arguments(op, q, k, v,
                                    {.family = "the recurrence",
                                     .scale = o.scale,
                                     .cu_seqlens = o.cu_seqlens,
                                     .chunk_size = o.chunk_size,
                                     .max_chunk_size = limits::kMaxDplrChunkSize,
                                     .like_k = {{"a", a}, {"b", b}, {"gk", gk}}});
}

DplrProblem check_dplr_forward(const char* op, TensorView out, ConstTensorView q, ConstTensorView k, ConstTensorView v,
                               ConstTensorView a, ConstTensorView b, ConstTensorView gk, std::span<float> state,
                               const DplrOptions& options) {
  const DplrProblem p = check_dplr_arguments(op, q, k, v, a, b, gk, options);
  check_output_shape(op, "out", out, q, v);
  check_token_state(op, state.size(), p);
  const boundary::Region outputs[] = {boundary::region("out", out), boundary::region("state", state)};
  check_outputs(op, outputs, input_regions(q, k, v, {{"a", a}, {"b", b}, {"gk", gk}}));
  return p;
}

}  // namespace linattn::detail
