#include "ops/delta/delta_checks.hpp"

#include "core/validate.hpp"
#include "linattn/limits.hpp"

namespace linattn {

std::string delta_name(DeltaGate gate) {
  switch (gate) {
    case DeltaGate::none:
      return "delta_rule";
    case DeltaGate::token:
      return "gated_delta_rule";
    case DeltaGate::key:
      return "kda";
  }
  return "unknown";
}

namespace detail {

DeltaProblem check_delta_arguments(const char* op, ConstTensorView q, ConstTensorView k, ConstTensorView v,
                                   ConstTensorView beta, ConstTensorView g, const DeltaRuleOptions& o) {
  const Gate gate = o.gate == DeltaGate::token ? Gate::token : o.gate == DeltaGate::key ? Gate::key : Gate::none;
  return {check_recurrence_arguments(
              op, q, k, v,
              {.family = "the delta rule",
               .scale = o.scale,
               .cu_seqlens = o.cu_seqlens,
               .chunk_size = o.chunk_size,
               .max_chunk_size = limits::kMaxDeltaChunkSize,
               .beta = &beta,
               .gate = gate,
               .g = g,
               .gate_name = delta_name(o.gate),
               .gated = "gated_delta_rule and kda",
               .gate_because = o.gate == DeltaGate::key ? "q's head dim (KDA: one log decay per key dimension)"
                                                        : "gated delta rule: one log decay per head and token"}),
          o.qk_l2norm};
}

}  // namespace detail
}  // namespace linattn
