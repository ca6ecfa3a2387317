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
void decayed_attention_forward(View4<H> out, HalfIn<H> q, HalfIn<H> k, HalfIn<H> v, HalfIn<H> g,
                               const DecayedAttentionOptions& options = {}, std::span<const float> initial_state = {},
                               std::span<float> final_state = {});
template <HalfType H>
void decayed_attention_backward(View4<H> dq, HalfOut<H> dk, HalfOut<H> dv, HalfOut<H> dg,
                                std::span<float> dinitial_state, HalfIn<H> dout, std::span<const float> dfinal_state,
                                HalfIn<H> q, HalfIn<H> k, HalfIn<H> v, HalfIn<H> g,
                                const DecayedAttentionOptions& options = {}, std::span<const float> initial_state = {});
template <HalfType H>
void decayed_recurrent_forward(View4<H> out, HalfIn<H> q, HalfIn<H> k, HalfIn<H> v, HalfIn<H> g, std::span<float> state,
                               const DecayedAttentionOptions& options = {});
template <HalfType H>
void decayed_step(View4<H> out, HalfIn<H> q, HalfIn<H> k, HalfIn<H> v, HalfIn<H> g, RecurrentState& state,
                  const DecayedAttentionOptions& options = {});

template <HalfType H>
void delta_rule_forward(View4<H> out, HalfIn<H> q, HalfIn<H> k, HalfIn<H> v, HalfIn<H> beta, HalfIn<H> g,
                        const DeltaRuleOptions& options = {}, std::span<const float> initial_state = {},
                        std::span<float> final_state = {});
template <HalfType H>
void delta_rule_backward(View4<H> dq, HalfOut<H> dk, HalfOut<H> dv, HalfOut<H> dbeta, HalfOut<H> dg,
                         std::span<float> dinitial_state, HalfIn<H> dout, std::span<const float> dfinal_state,
                         HalfIn<H> q, HalfIn<H> k, HalfIn<H> v, HalfIn<H> beta, HalfIn<H> g,
                         const DeltaRuleOptions& options = {}, std::span<const float> initial_state = {});
template <HalfType H>
void delta_rule_recurrent_forward(View4<H> out, HalfIn<H> q, HalfIn<H> k, HalfIn<H> v, HalfIn<H> beta, HalfIn<H> g,
                                  std::span<float> state, const DeltaRuleOptions& options = {});
template <HalfType H>
void delta_rule_step(View4<H> out, HalfIn<H> q, HalfIn<H> k, HalfIn<H> v, HalfIn<H> beta, HalfIn<H> g,
                     RecurrentState& state, const DeltaRuleOptions& options = {});

}  // namespace linattn
