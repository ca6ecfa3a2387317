// The chunked decayed family over bf16/f16 tensors (linattn/half_attention.hpp), through the shared
// conversion layer (kernels/half_views.hpp); the states stay fp32 spans. The token-by-token forward and the
// decode step read half rows in place (decayed_recurrent.cpp).
#include "kernels/half_views.hpp"
#include "linattn/half_attention.hpp"

namespace linattn {
namespace {
using boundary::region;
}  // namespace

template <HalfType H>
void decayed_attention_forward(View4<H> out, HalfIn<H> q, HalfIn<H> k, HalfIn<H> v, HalfIn<H> g,
                               const DecayedAttentionOptions& options, std::span<const float> initial_state,
                               std::span<float> final_state) {
  kernels::HalfCall<H> c("decayed_attention_forward");
  const ConstTensorView q32 = c.in("q", q), k32 = c.in("k", k), v32 = c.in("v", v), g32 = c.in("g", g);
  const TensorView out32 = c.out("out", out);
  c.in_region(region("initial_state", initial_state));
  c.out_region(region("final_state", final_state));
  c.check();
  decayed_attention_forward(out32, q32, k32, v32, g32, options, initial_state, final_state);
  c.store();
}

template <HalfType H>
void decayed_attention_backward(View4<H> dq, HalfOut<H> dk, HalfOut<H> dv, HalfOut<H> dg,
                                std::span<float> dinitial_state, HalfIn<H> dout, std::span<const float> dfinal_state,
                                HalfIn<H> q, HalfIn<H> k, HalfIn<H> v, HalfIn<H> g,
                                const DecayedAttentionOptions& options, std::span<const float> initial_state) {
  kernels::HalfCall<H> c("decayed_attention_backward");
  const ConstTensorView do32 = c.in("dout", dout), q32 = c.in("q", q), k32 = c.in("k", k), v32 = c.in("v", v),
                        g32 = c.in("g", g);
  const TensorView dq32 = c.out("dq", dq), dk32 = c.out("dk", dk), dv32 = c.out("dv", dv), dg32 = c.out("dg", dg);
  c.in_region(region("initial_state", initial_state));
  c.in_region(region("dfinal_state", dfinal_state));
  c.out_region(region("dinitial_state", dinitial_state));
  c.check();
  decayed_attention_backward(dq32, dk32, dv32, dg32, dinitial_state, do32, dfinal_state, q32, k32, v32, g32, options,
                             initial_state);
  c.store();
}

#define LINATTN_DECAY_HALF(H)                                                                                          \
  template void decayed_attention_forward<H>(View4<H>, View4<const H>, View4<const H>, View4<const H>, View4<const H>, \
                                             const DecayedAttentionOptions&, std::span<const float>,                   \
                                             std::span<float>);                                                        \
  template void decayed_attention_backward<H>(View4<H>, View4<H>, View4<H>, View4<H>, std::span<float>,                \
                                              View4<const H>, std::span<const float>, View4<const H>, View4<const H>,  \
                                              View4<const H>, View4<const H>, const DecayedAttentionOptions&,          \
                                              std::span<const float>);
LINATTN_DECAY_HALF(bf16)
LINATTN_DECAY_HALF(f16)
#undef LINATTN_DECAY_HALF

}  // namespace linattn
