#include "ops/delta/delta_checks.hpp"

#include <iterator>

#include "core/validate.hpp"
#include "linattn/limits.hpp"

namespace linattn {

std::string delta_name(DeltaGate gate) { return detail::enum_name(gate, {"delta_rule", "gated_delta_rule", "kda"}); }

namespace detail {

Signature delta_signature(const ConstTensorView& beta, ConstTensorView g, const DeltaRuleOptions& o) {
  constexpr Gate gates[] = {Gate::none, Gate::token, Gate::key};  // in DeltaGate's order
  return {.family = "the delta rule",
          .grouped = true,
          .query_groups = true,
          .scale = o.scale,
          .cu_seqlens = o.cu_seqlens,
          .chunk_size = o.chunk_size,
          .max_chunk_size = limits::kMaxDeltaChunkSize,
          .beta = &beta,
          .gate = size_t(o.gate) < std::size(gates) ? gates[size_t(o.gate)] : Gate::none,
          .g = g,
          .gate_name = delta_name(o.gate),
          .gated = "gated_delta_rule and kda",
          .gate_because = o.gate == DeltaGate::key ? "q's head dim (KDA: one log decay per key dimension)"
                                                   : "gated delta rule: one log decay per head and token"};
}

DeltaProblem check_delta_arguments(const char* op, ConstTensorView q, ConstTensorView k, ConstTensorView v,
                                   ConstTensorView beta, ConstTensorView g, const DeltaRuleOptions& o) {
  return {check_recurrence_arguments(op, q, k, v, delta_signature(beta, g, o)), o.qk_l2norm};
}

}  // namespace detail
}  // namespace linattn
