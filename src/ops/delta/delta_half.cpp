// The chunked delta rule over bf16/f16 tensors (linattn/half_attention.hpp): the forward and the backward read
// and write the half rows in place, chunk by chunk (with grouped value heads the backward sums a group's dq and
// dk rows in fp32 and rounds them once). The states stay fp32 spans. The token-by-token forward and the decode
// step read half rows in place too (delta_recurrent.cpp).
#include "kernels/half_views.hpp"
#include "linattn/half_attention.hpp"
#include "ops/delta/delta_chunk.hpp"
#include "ops/recurrence/half_regions.hpp"

namespace linattn {
namespace {
using boundary::region;
}  // namespace

template <HalfType H>
void delta_rule_forward(View4<H> out, HalfIn<H> q, HalfIn<H> k, HalfIn<H> v, HalfIn<H> beta, HalfGate<H> g,
                        const DeltaRuleOptions& options, std::span<const float> initial_state,
                        std::span<float> final_state) {
  const char* op = "delta_rule_forward";
  detail::check_half_regions<H>(op, {{"out", out}}, {{"q", q}, {"k", k}, {"v", v}, {"beta", beta}, {"g", g.half}},
                                {region("final_state", final_state)},
                                {region("initial_state", initial_state), region("g", g.wide)});
  using kernels::shape_view;
  const detail::DeltaProblem p = detail::check_delta_arguments(op, shape_view(q), shape_view(k), shape_view(v),
                                                               shape_view(beta), detail::gate_shape_view(g), options);
  detail::check_recurrence_forward_shapes(op, p, shape_view(out), shape_view(q), shape_view(v), initial_state.size(),
                                          final_state.size());
  detail::delta_forward_chunks(p, options.chunk_size, out, q, k, v, beta, g.half, initial_state, final_state, g.wide);
}

template <HalfType H>
void delta_rule_backward(View4<H> dq, HalfOut<H> dk, HalfOut<H> dv, HalfOut<H> dbeta, HalfGateOut<H> dg,
                         std::span<float> dinitial_state, HalfIn<H> dout, std::span<const float> dfinal_state,
                         HalfIn<H> q, HalfIn<H> k, HalfIn<H> v, HalfIn<H> beta, HalfGate<H> g,
                         const DeltaRuleOptions& options, std::span<const float> initial_state) {
  const char* op = "delta_rule_backward";
  using kernels::shape_view;
  detail::check_gate_grad_type(op, g, dg);
  const ConstTensorView beta_shape = shape_view(beta), g_shape = detail::gate_shape_view(g);
  const detail::DeltaProblem p =
      detail::check_delta_arguments(op, shape_view(q), shape_view(k), shape_view(v), beta_shape, g_shape, options);
  detail::check_recurrence_backward_shapes(op, p, detail::delta_signature(beta_shape, g_shape, options),
                                           shape_view(dout), shape_view(q), shape_view(v),
                                           {{"dq", detail::output_shape_view(dq), shape_view(q), "q"},
                                            {"dk", detail::output_shape_view(dk), shape_view(k), "k"},
                                            {"dv", detail::output_shape_view(dv), shape_view(v), "v"},
                                            {"dbeta", detail::output_shape_view(dbeta), beta_shape, "beta"}},
                                           detail::gate_shape_view(dg), dinitial_state, dfinal_state, initial_state);
  // In place; with grouped value heads dq and dk are summed over the group in fp32 and rounded once.
  detail::check_half_regions<H>(
      op, {{"dq", dq}, {"dk", dk}, {"dv", dv}, {"dbeta", dbeta}, {"dg", dg.half}},
      {{"dout", dout}, {"q", q}, {"k", k}, {"v", v}, {"beta", beta}, {"g", g.half}},
      {region("dinitial_state", dinitial_state), region("dg", dg.wide)},
      {region("initial_state", initial_state), region("dfinal_state", dfinal_state), region("g", g.wide)});
  detail::delta_backward_chunks(p, options.chunk_size, dq, dk, dv, dbeta, dg.half, dinitial_state, dout, dfinal_state,
                                q, k, v, beta, g.half, initial_state, g.wide, dg.wide);
}

#define LINATTN_DELTA_HALF(H)                                                                                       \
  template void delta_rule_forward<H>(View4<H>, View4<const H>, View4<const H>, View4<const H>, View4<const H>,     \
                                      HalfOrFloat<H>, const DeltaRuleOptions&, std::span<const float>,              \
                                      std::span<float>);                                                            \
  template void delta_rule_backward<H>(View4<H>, View4<H>, View4<H>, View4<H>, HalfOrFloatOut<H>, std::span<float>, \
                                       View4<const H>, std::span<const float>, View4<const H>, View4<const H>,      \
                                       View4<const H>, View4<const H>, HalfOrFloat<H>, const DeltaRuleOptions&,     \
                                       std::span<const float>);
LINATTN_DELTA_HALF(bf16)
LINATTN_DELTA_HALF(f16)
#undef LINATTN_DELTA_HALF

}  // namespace linattn
