#pragma once
// Every operator, forward and backward, over bf16 or f16 tensors (linattn/half.hpp): the same
// contracts as the fp32 functions of the same names, with q, k, v, out, dout, the gates (g, β) and
// the gradients in half precision (all of one type H, deduced from the first output). lse, the
// Linformer projections E and F with their gradients, and the states stay fp32 spans; a
// RecurrentState may hold S in bf16 (RecurrentState::dtype). Products accumulate in fp32 and each
// output is rounded once, to nearest even. What runs natively on half data and what runs through
// the shared conversion (a widened fp32 copy): docs/half-precision.md.
#include <span>
#include <type_traits>

#include "linattn/decay.hpp"
#include "linattn/delta.hpp"
#include "linattn/half.hpp"
#include "linattn/linear_attention.hpp"
#include "linattn/linformer.hpp"
#include "linattn/recurrent_state.hpp"
#include "linattn/softmax_attention.hpp"

namespace linattn {

// An input of the same half type as the output that fixed H (a View4<H> converts).
template <class H>
using HalfIn = std::type_identity_t<View4<const H>>;
template <class H>
using HalfOut = std::type_identity_t<View4<H>>;

// The log decays g of the half-precision chunked recurrences: of q's half type H, or fp32 beside half q,
// k, v, as flash-linear-attention's and transformers' bf16 models hand them over (a log decay rounded to
// half would move every decay factor it enters). Either view converts; {} is no gate. The gradient dg
// comes back in g's type.
template <class H>
struct HalfOrFloat {
  View4<const H> half;
  ConstTensorView wide;
  HalfOrFloat() = default;
  HalfOrFloat(View4<const H> g) : half(g) {}
  HalfOrFloat(View4<H> g) : half(g) {}
  HalfOrFloat(ConstTensorView g) : wide(g) {}
  HalfOrFloat(TensorView g) : wide(g) {}
};
template <class H>
struct HalfOrFloatOut {
  View4<H> half;
  TensorView wide;
  HalfOrFloatOut() = default;
  HalfOrFloatOut(View4<H> dg) : half(dg) {}
  HalfOrFloatOut(TensorView dg) : wide(dg) {}
};
template <class H>
using HalfGate = std::type_identity_t<HalfOrFloat<H>>;
template <class H>
using HalfGateOut = std::type_identity_t<HalfOrFloatOut<H>>;

template <HalfType H>
void softmax_attention_forward(View4<H> out, std::span<float> lse, HalfIn<H> q, HalfIn<H> k, HalfIn<H> v,
                               const SoftmaxAttentionOptions& options = {});
template <HalfType H>
void softmax_attention_backward(View4<H> dq, HalfOut<H> dk, HalfOut<H> dv, HalfIn<H> dout, HalfIn<H> q, HalfIn<H> k,
                                HalfIn<H> v, HalfIn<H> out, std::span<const float> lse,
                                const SoftmaxAttentionOptions& options = {});

template <HalfType H>
void linear_attention_forward(View4<H> out, HalfIn<H> q, HalfIn<H> k, HalfIn<H> v,
                              const LinearAttentionOptions& options = {});
template <HalfType H>
void linear_attention_backward(View4<H> dq, HalfOut<H> dk, HalfOut<H> dv, HalfIn<H> dout, HalfIn<H> q, HalfIn<H> k,
                               HalfIn<H> v, const LinearAttentionOptions& options = {});
template <HalfType H>
void causal_linear_attention_forward(View4<H> out, HalfIn<H> q, HalfIn<H> k, HalfIn<H> v,
                                     const LinearAttentionOptions& options = {},
                                     const RecurrentState* initial = nullptr, RecurrentState* final_state = nullptr);
template <HalfType H>
void causal_linear_attention_backward(View4<H> dq, HalfOut<H> dk, HalfOut<H> dv, HalfIn<H> dout, HalfIn<H> q,
                                      HalfIn<H> k, HalfIn<H> v, const LinearAttentionOptions& options = {},
                                      const RecurrentState* initial = nullptr, RecurrentState* dinitial = nullptr);
template <HalfType H>
void recurrent_step(View4<H> out, HalfIn<H> q, HalfIn<H> k, HalfIn<H> v, RecurrentState& state,
                    const LinearAttentionOptions& options = {});

template <HalfType H>
void linformer_attention_forward(View4<H> out, std::span<float> lse, HalfIn<H> q, HalfIn<H> k, HalfIn<H> v,
                                 std::span<const float> E, std::span<const float> F, const LinformerOptions& options);
template <HalfType H>
void linformer_attention_backward(View4<H> dq, HalfOut<H> dk, HalfOut<H> dv, std::span<float> dE, std::span<float> dF,
                                  HalfIn<H> dout, HalfIn<H> q, HalfIn<H> k, HalfIn<H> v, std::span<const float> E,
                                  std::span<const float> F, HalfIn<H> out, std::span<const float> lse,
                                  const LinformerOptions& options);

template <HalfType H>
void decayed_attention_forward(View4<H> out, HalfIn<H> q, HalfIn<H> k, HalfIn<H> v, HalfGate<H> g,
                               const DecayedAttentionOptions& options = {}, std::span<const float> initial_state = {},
                               std::span<float> final_state = {});
template <HalfType H>
void decayed_attention_backward(View4<H> dq, HalfOut<H> dk, HalfOut<H> dv, HalfGateOut<H> dg,
                                std::span<float> dinitial_state, HalfIn<H> dout, std::span<const float> dfinal_state,
                                HalfIn<H> q, HalfIn<H> k, HalfIn<H> v, HalfGate<H> g,
                                const DecayedAttentionOptions& options = {}, std::span<const float> initial_state = {});
template <HalfType H>
void decayed_recurrent_forward(View4<H> out, HalfIn<H> q, HalfIn<H> k, HalfIn<H> v, HalfIn<H> g, std::span<float> state,
                               const DecayedAttentionOptions& options = {});
template <HalfType H>
void decayed_step(View4<H> out, HalfIn<H> q, HalfIn<H> k, HalfIn<H> v, HalfIn<H> g, RecurrentState& state,
                  const DecayedAttentionOptions& options = {});

template <HalfType H>
void delta_rule_forward(View4<H> out, HalfIn<H> q, HalfIn<H> k, HalfIn<H> v, HalfIn<H> beta, HalfGate<H> g,
                        const DeltaRuleOptions& options = {}, std::span<const float> initial_state = {},
                        std::span<float> final_state = {});
template <HalfType H>
void delta_rule_backward(View4<H> dq, HalfOut<H> dk, HalfOut<H> dv, HalfOut<H> dbeta, HalfGateOut<H> dg,
                         std::span<float> dinitial_state, HalfIn<H> dout, std::span<const float> dfinal_state,
                         HalfIn<H> q, HalfIn<H> k, HalfIn<H> v, HalfIn<H> beta, HalfGate<H> g,
                         const DeltaRuleOptions& options = {}, std::span<const float> initial_state = {});
template <HalfType H>
void delta_rule_recurrent_forward(View4<H> out, HalfIn<H> q, HalfIn<H> k, HalfIn<H> v, HalfIn<H> beta, HalfIn<H> g,
                                  std::span<float> state, const DeltaRuleOptions& options = {});
template <HalfType H>
void delta_rule_step(View4<H> out, HalfIn<H> q, HalfIn<H> k, HalfIn<H> v, HalfIn<H> beta, HalfIn<H> g,
                     RecurrentState& state, const DeltaRuleOptions& options = {});

}  // namespace linattn
