// The linear family over bf16/f16 tensors (linattn/half_attention.hpp), through the shared
// conversion layer (kernels/half_views.hpp), except the non-causal forward, which reads its tiles in
// place (linear_half_tiles.cpp); recurrent_step reads its tensors and a bf16 state in place (recurrent_step.cpp).
#include "kernels/half_views.hpp"
#include "linattn/half_attention.hpp"
#include "ops/linear/linear_half_tiles.hpp"

namespace linattn {
namespace {
using boundary::object_region;
}  // namespace

template <HalfType H>
void linear_attention_forward(View4<H> out, HalfIn<H> q, HalfIn<H> k, HalfIn<H> v,
                              const LinearAttentionOptions& options) {
  const char* op = "linear_attention_forward";
  if (!options.causal && options.cu_seqlens.empty()) {  // read in place, tile by tile (packed: widened below)
    kernels::HalfCall<H> c(op);
    c.in_place("q", q), c.in_place("k", k), c.in_place("v", v), c.out_in_place("out", out);
    c.check();
    using kernels::shape_view;
    const detail::LinearProblem p =
        detail::check_linear_forward_shapes(op, shape_view(out), shape_view(q), shape_view(k), shape_view(v), options);
    detail::linear_forward_half_tiles(out, q, k, v, p);
    return;
  }
  kernels::HalfCall<H> c(op);
  const ConstTensorView q32 = c.in("q", q), k32 = c.in("k", k), v32 = c.in("v", v);
  const TensorView out32 = c.out("out", out);
  c.check();
  linear_attention_forward(out32, q32, k32, v32, options);
  c.store();
}

template <HalfType H>
void linear_attention_backward(View4<H> dq, HalfOut<H> dk, HalfOut<H> dv, HalfIn<H> dout, HalfIn<H> q, HalfIn<H> k,
                               HalfIn<H> v, const LinearAttentionOptions& options) {
  kernels::HalfCall<H> c("linear_attention_backward");
  const ConstTensorView do32 = c.in("dout", dout), q32 = c.in("q", q), k32 = c.in("k", k), v32 = c.in("v", v);
  const TensorView dq32 = c.out("dq", dq), dk32 = c.out("dk", dk), dv32 = c.out("dv", dv);
  c.check();
  linear_attention_backward(dq32, dk32, dv32, do32, q32, k32, v32, options);
  c.store();
}

template <HalfType H>
void causal_linear_attention_forward(View4<H> out, HalfIn<H> q, HalfIn<H> k, HalfIn<H> v,
                                     const LinearAttentionOptions& options, const RecurrentState* initial,
                                     RecurrentState* final_state) {
  kernels::HalfCall<H> c("causal_linear_attention_forward");
  const ConstTensorView q32 = c.in("q", q), k32 = c.in("k", k), v32 = c.in("v", v);
  const TensorView out32 = c.out("out", out);
  c.in_region(object_region("initial", initial));
  c.out_region(object_region("final_state", final_state));
  c.check();
  causal_linear_attention_forward(out32, q32, k32, v32, options, initial, final_state);
  c.store();
}

template <HalfType H>
void causal_linear_attention_backward(View4<H> dq, HalfOut<H> dk, HalfOut<H> dv, HalfIn<H> dout, HalfIn<H> q,
                                      HalfIn<H> k, HalfIn<H> v, const LinearAttentionOptions& options,
                                      const RecurrentState* initial, RecurrentState* dinitial) {
  kernels::HalfCall<H> c("causal_linear_attention_backward");
  const ConstTensorView do32 = c.in("dout", dout), q32 = c.in("q", q), k32 = c.in("k", k), v32 = c.in("v", v);
  const TensorView dq32 = c.out("dq", dq), dk32 = c.out("dk", dk), dv32 = c.out("dv", dv);
  c.in_region(object_region("initial", initial));
  c.out_region(object_region("dinitial", dinitial));
  c.check();
  causal_linear_attention_backward(dq32, dk32, dv32, do32, q32, k32, v32, options, initial, dinitial);
  c.store();
}

#define LINATTN_LINEAR_HALF(H)                                                                                     \
  template void linear_attention_forward<H>(View4<H>, View4<const H>, View4<const H>, View4<const H>,              \
                                            const LinearAttentionOptions&);                                        \
  template void linear_attention_backward<H>(View4<H>, View4<H>, View4<H>, View4<const H>, View4<const H>,         \
                                             View4<const H>, View4<const H>, const LinearAttentionOptions&);       \
  template void causal_linear_attention_forward<H>(View4<H>, View4<const H>, View4<const H>, View4<const H>,       \
                                                   const LinearAttentionOptions&, const RecurrentState*,           \
                                                   RecurrentState*);                                               \
  template void causal_linear_attention_backward<H>(View4<H>, View4<H>, View4<H>, View4<const H>, View4<const H>,  \
                                                    View4<const H>, View4<const H>, const LinearAttentionOptions&, \
                                                    const RecurrentState*, RecurrentState*);
LINATTN_LINEAR_HALF(bf16)
LINATTN_LINEAR_HALF(f16)
#undef LINATTN_LINEAR_HALF

}  // namespace linattn
