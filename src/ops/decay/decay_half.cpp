// The chunked decayed family over bf16/f16 tensors (linattn/half_attention.hpp): the forward and the backward
// read and write the half rows in place, chunk by chunk (with grouped value heads the backward sums a group's dq
// and dk rows in fp32 and rounds them once). The states stay fp32 spans. The token-by-token forward and the decode
// step read half rows in place too (decayed_recurrent.cpp).
#include "kernels/half_views.hpp"
#include "linattn/half_attention.hpp"
#include "ops/decay/decay_chunk.hpp"
#include "ops/recurrence/half_regions.hpp"

namespace linattn {
namespace {
using boundary::region;
}  // namespace

// The chunked forward reads the half rows in place, chunk by chunk (decay_chunk.hpp): the checks on the half
// views themselves, then the driver on them.
template <HalfType H>
void decayed_attention_forward(View4<H> out, HalfIn<H> q, HalfIn<H> k, HalfIn<H> v, HalfGate<H> g,
                               const DecayedAttentionOptions& options, std::span<const float> initial_state,
                               std::span<float> final_state) {
  const char* op = "decayed_attention_forward";
  detail::check_half_regions<H>(op, {{"out", out}}, {{"q", q}, {"k", k}, {"v", v}, {"g", g.half}},
                                {region("final_state", final_state)},
                                {region("initial_state", initial_state), region("g", g.wide)});
  using kernels::shape_view;
  const detail::DecayProblem p = detail::check_decay_arguments(op, shape_view(q), shape_view(k), shape_view(v),
                                                               detail::gate_shape_view(g), options);
  detail::check_recurrence_forward_shapes(op, p, shape_view(out), shape_view(q), shape_view(v), initial_state.size(),
                                          final_state.size());
  detail::decayed_forward_chunks(p, options, out, q, k, v, g.half, initial_state, final_state, g.wide);
}

template <HalfType H>
void decayed_attention_backward(View4<H> dq, HalfOut<H> dk, HalfOut<H> dv, HalfGateOut<H> dg,
                                std::span<float> dinitial_state, HalfIn<H> dout, std::span<const float> dfinal_state,
                                HalfIn<H> q, HalfIn<H> k, HalfIn<H> v, HalfGate<H> g,
                                const DecayedAttentionOptions& options, std::span<const float> initial_state) {
  const char* op = "decayed_attention_backward";
  using kernels::shape_view;
  detail::check_gate_grad_type(op, g, dg);
  const ConstTensorView g_shape = detail::gate_shape_view(g);
  const detail::DecayProblem p =
      detail::check_decay_arguments(op, shape_view(q), shape_view(k), shape_view(v), g_shape, options);
  detail::check_recurrence_backward_shapes(op, p, detail::decay_signature(g_shape, options), shape_view(dout),
                                           shape_view(q), shape_view(v),
                                           {{"dq", detail::output_shape_view(dq), shape_view(q), "q"},
                                            {"dk", detail::output_shape_view(dk), shape_view(k), "k"},
                                            {"dv", detail::output_shape_view(dv), shape_view(v), "v"}},
                                           detail::gate_shape_view(dg), dinitial_state, dfinal_state, initial_state);
  // In place; with grouped value heads dq and dk are summed over the group in fp32 and rounded once.
  detail::check_half_regions<H>(
      op, {{"dq", dq}, {"dk", dk}, {"dv", dv}, {"dg", dg.half}},
      {{"dout", dout}, {"q", q}, {"k", k}, {"v", v}, {"g", g.half}},
      {region("dinitial_state", dinitial_state), region("dg", dg.wide)},
      {region("initial_state", initial_state), region("dfinal_state", dfinal_state), region("g", g.wide)});
  detail::decayed_backward_chunks(p, options, dq, dk, dv, dg.half, dinitial_state, dout, dfinal_state, q, k, v, g.half,
                                  initial_state, g.wide, dg.wide);
}

#define LINATTN_DECAY_HALF(H)                                                                                          \
  template void decayed_attention_forward<H>(View4<H>, View4<const H>, View4<const H>, View4<const H>, HalfOrFloat<H>, \
                                             const DecayedAttentionOptions&, std::span<const float>,                   \
                                             std::span<float>);                                                        \
  template void decayed_attention_backward<H>(View4<H>, View4<H>, View4<H>, HalfOrFloatOut<H>, std::span<float>,       \
                                              View4<const H>, std::span<const float>, View4<const H>, View4<const H>,  \
                                              View4<const H>, HalfOrFloat<H>, const DecayedAttentionOptions&,          \
                                              std::span<const float>);
LINATTN_DECAY_HALF(bf16)
LINATTN_DECAY_HALF(f16)
#undef LINATTN_DECAY_HALF

}  // namespace linattn
