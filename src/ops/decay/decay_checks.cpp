#include "ops/decay/decay_checks.hpp"

#include <cmath>
#include <iterator>
#include <string>

#include "core/validate.hpp"
#include "linattn/limits.hpp"

namespace linattn {

std::string decay_name(Decay decay) {
  return detail::enum_name(decay, {"linear", "retention", "lightning", "simple_gla", "gla"});
}

float retention_log_decay(int64_t head) { return float(std::log1p(-std::exp2(-5.0 - double(head)))); }

namespace detail {

double constant_log_decay(const DecayedAttentionOptions& options, int64_t h) {
  switch (options.decay) {
    case Decay::retention:
      return std::log1p(-std::exp2(-5.0 - double(h)));
    case Decay::head:
      return double(options.g_gamma[size_t(h)]);
    default:
      return 0.0;
  }
}

Signature decay_signature(ConstTensorView g, const DecayedAttentionOptions& o) {
  constexpr Gate gates[] = {Gate::none, Gate::head, Gate::head, Gate::token, Gate::key};  // in Decay's order
  return {.family = "the decayed family",
          .grouped = true,
          .query_groups = true,
          .query_groups_backward = true,
          .scale = o.scale,
          .cu_seqlens = o.cu_seqlens,
          .chunk_size = o.chunk_size,
          .max_chunk_size = limits::kMaxDecayChunkSize,
          .gate = size_t(o.decay) < std::size(gates) ? gates[size_t(o.decay)] : Gate::none,
          .g = g,
          .gate_word = "decay ",
          .gate_name = decay_name(o.decay),
          .gated = "simple_gla and gla",
          .gate_because = o.decay == Decay::key ? "q's head dim (GLA: one log decay per key dimension)"
                                                : "simple GLA: one log decay per head and token"};
}

DecayProblem check_decay_arguments(const char* op, ConstTensorView q, ConstTensorView k, ConstTensorView v,
                                   ConstTensorView g, const DecayedAttentionOptions& o) {
  const DecayProblem p{check_recurrence_arguments(op, q, k, v, decay_signature(g, o)), o.decay};
  if (o.decay == Decay::head)
    check_size(op, "options.g_gamma", int64_t(o.g_gamma.size()), p.H, "[H], one log decay per head");
  else if (!o.g_gamma.empty())
    fail_with(op, "options.g_gamma is given for decay '", decay_name(o.decay), "', expected it only with Decay::head");
  return p;
}

}  // namespace detail
}  // namespace linattn
