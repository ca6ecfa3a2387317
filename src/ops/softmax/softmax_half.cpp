// Softmax attention over bf16/f16 tensors (linattn/half_attention.hpp). The decode step (few
// queries against a KV cache: bandwidth-bound) reads k and v in place, widening them as they are
// loaded; everything else goes through the shared conversion layer (kernels/half_views.hpp).
#include "ops/softmax/softmax_half.hpp"

#include "kernels/half_views.hpp"
#include "linattn/half_attention.hpp"

namespace linattn {

template <HalfType H>
void softmax_attention_forward(View4<H> out, std::span<float> lse, HalfIn<H> q, HalfIn<H> k, HalfIn<H> v,
                               const SoftmaxAttentionOptions& options) {
  kernels::HalfCall<H> c("softmax_attention_forward");
  const ConstTensorView q32 = c.in("q", q);
  // Packed sequences run one by one in the fp32 driver, on widened copies.
  const bool native = detail::softmax_half_decodes(q.seq(), k.stride) && options.cu_seqlens.empty();
  const ConstTensorView k32 = native ? c.in_place("k", k) : c.in("k", k),
                        v32 = native ? c.in_place("v", v) : c.in("v", v);
  const TensorView out32 = c.out("out", out);
  c.out_region(boundary::region("lse", lse));
  c.check();
  if (native)
    detail::softmax_decode_half(out32, lse, q32, k, v, options);
  else
    softmax_attention_forward(out32, lse, q32, k32, v32, options);
  c.store();
}

template <HalfType H>
void softmax_attention_backward(View4<H> dq, HalfOut<H> dk, HalfOut<H> dv, HalfIn<H> dout, HalfIn<H> q, HalfIn<H> k,
                                HalfIn<H> v, HalfIn<H> out, std::span<const float> lse,
                                const SoftmaxAttentionOptions& options) {
  kernels::HalfCall<H> c("softmax_attention_backward");
  const ConstTensorView do32 = c.in("dout", dout), q32 = c.in("q", q), k32 = c.in("k", k), v32 = c.in("v", v),
                        o32 = c.in("out", out);
  const TensorView dq32 = c.out("dq", dq), dk32 = c.out("dk", dk), dv32 = c.out("dv", dv);
  c.in_region(boundary::region("lse", lse));
  c.check();
  softmax_attention_backward(dq32, dk32, dv32, do32, q32, k32, v32, o32, lse, options);
  c.store();
}

#define LINATTN_SOFTMAX_HALF(H)                                                                                       \
  template void softmax_attention_forward<H>(View4<H>, std::span<float>, View4<const H>, View4<const H>,              \
                                             View4<const H>, const SoftmaxAttentionOptions&);                         \
  template void softmax_attention_backward<H>(View4<H>, View4<H>, View4<H>, View4<const H>, View4<const H>,           \
                                              View4<const H>, View4<const H>, View4<const H>, std::span<const float>, \
                                              const SoftmaxAttentionOptions&);
LINATTN_SOFTMAX_HALF(bf16)
LINATTN_SOFTMAX_HALF(f16)
#undef LINATTN_SOFTMAX_HALF

}  // namespace linattn
