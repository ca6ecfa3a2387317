#include "ops/decay/decay_checks.hpp"

#include <cmath>
#include <string>

#include "core/validate.hpp"
#include "linattn/limits.hpp"

namespace linattn {

std::string decay_name(Decay decay) {
  switch (decay) {
    case Decay::none:
      return "linear";
    case Decay::retention:
      return "retention";
    case Decay::head:
      return "lightning";
    case Decay::token:
      return "simple_gla";
    case Decay::key:
      return "gla";
  }
  return "unknown";
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

namespace {

Gate gate_of(Decay decay) {
  switch (decay) {
    case Decay::none:
      return Gate::none;
    case Decay::retention:
    case Decay::head:
      return Gate::head;
    case Decay::token:
      return Gate::token;
    case Decay::key:
      return Gate::key;
  }
  return Gate::none;
}

}  // namespace

DecayProblem check_decay_arguments(const char* op, ConstTensorView q, ConstTensorView k, ConstTensorView v,
                                   ConstTensorView g, const DecayedAttentionOptions& o) {
  const std::string name = decay_name(o.decay);
  const DecayProblem p{
      check_recurrence_arguments(
          op, q, k, v,
          {.family = "the decayed family",
           .scale = o.scale,
           .cu_seqlens = o.cu_seqlens,
           .chunk_size = o.chunk_size,
           .max_chunk_size = limits::kMaxDecayChunkSize,
           .gate = gate_of(o.decay),
           .g = g,
           .gate_word = "decay ",
           .gate_name = name,
           .gated = "simple_gla and gla",
           .gate_because = o.decay == Decay::key ? "q's head dim (GLA: one log decay per key dimension)"
                                                 : "simple GLA: one log decay per head and token"}),
      o.decay};
  if (o.decay == Decay::head)
    check_size(op, "options.g_gamma", int64_t(o.g_gamma.size()), p.H, "[H], one log decay per head");
  else if (!o.g_gamma.empty())
    fail_with(op, "options.g_gamma is given for decay '", name, "', expected it only with Decay::head");
  return p;
}

}  // namespace detail
}  // namespace linattn
