// Linformer over bf16/f16 tensors (linattn/half_attention.hpp), through the shared conversion layer
// (kernels/half_views.hpp). E, F and their gradients stay fp32: they are parameters, not activations.
#include "kernels/half_views.hpp"
#include "linattn/half_attention.hpp"

namespace linattn {

template <HalfType H>
void linformer_attention_forward(View4<H> out, std::span<float> lse, HalfIn<H> q, HalfIn<H> k, HalfIn<H> v,
                                 std::span<const float> E, std::span<const float> F, const LinformerOptions& options) {
  kernels::HalfCall<H> c("linformer_attention_forward");
  const ConstTensorView q32 = c.in("q", q), k32 = c.in("k", k), v32 = c.in("v", v);
  const TensorView out32 = c.out("out", out);
  c.out_region(boundary::region("lse", lse));
  c.check();
  linformer_attention_forward(out32, lse, q32, k32, v32, E, F, options);
  c.store();
}

template <HalfType H>
void linformer_attention_backward(View4<H> dq, HalfOut<H> dk, HalfOut<H> dv, std::span<float> dE, std::span<float> dF,
                                  HalfIn<H> dout, HalfIn<H> q, HalfIn<H> k, HalfIn<H> v, std::span<const float> E,
                                  std::span<const float> F, HalfIn<H> out, std::span<const float> lse,
                                  const LinformerOptions& options) {
  kernels::HalfCall<H> c("linformer_attention_backward");
  const ConstTensorView do32 = c.in("dout", dout), q32 = c.in("q", q), k32 = c.in("k", k), v32 = c.in("v", v),
                        o32 = c.in("out", out);
  const TensorView dq32 = c.out("dq", dq), dk32 = c.out("dk", dk), dv32 = c.out("dv", dv);
  c.out_region(boundary::region("dE", dE));
  c.out_region(boundary::region("dF", dF));
  c.check();
  linformer_attention_backward(dq32, dk32, dv32, dE, dF, do32, q32, k32, v32, E, F, o32, lse, options);
  c.store();
}

#define LINATTN_LINFORMER_HALF(H)                                                                                 \
  template void linformer_attention_forward<H>(View4<H>, std::span<float>, View4<const H>, View4<const H>,        \
                                               View4<const H>, std::span<const float>, std::span<const float>,    \
                                               const LinformerOptions&);                                          \
  template void linformer_attention_backward<H>(View4<H>, View4<H>, View4<H>, std::span<float>, std::span<float>, \
                                                View4<const H>, View4<const H>, View4<const H>, View4<const H>,   \
                                                std::span<const float>, std::span<const float>, View4<const H>,   \
                                                std::span<const float>, const LinformerOptions&);
LINATTN_LINFORMER_HALF(bf16)
LINATTN_LINFORMER_HALF(f16)
#undef LINATTN_LINFORMER_HALF

}  // namespace linattn
