#pragma once
// The transformer's layers, forward and backward side by side (llm.c style). Templated on the
// scalar: float trains and generates, double is what the finite-difference tests differentiate.
// Rows are tokens: N = B·T. Unless a comment says "+=", a backward overwrites its input gradient,
// and every backward adds (+=) into its parameter gradients, which the caller zeroes per step.
#include <cstdint>

#include "linattn/feature_map.hpp"
#include "linattn/model/config.hpp"

namespace linattn::model {

// out: [N, OC] = inp: [N, C] · w: [C, OC] + bias: [OC] (bias may be null)
template <class T>
void matmul_forward(T* out, const T* inp, const T* w, const T* bias, int64_t N, int64_t C, int64_t OC);
// dinp: [N, C] = dout · wᵀ (skipped when null); dw += inpᵀ · dout; dbias += Σ_rows dout (when non-null)
template <class T>
void matmul_backward(T* dinp, T* dw, T* dbias, const T* dout, const T* inp, const T* w, int64_t N, int64_t C,
                     int64_t OC);

// out: [N, C] = (inp − mean) · rstd · gamma + beta, row by row; saves mean, rstd: [N]
template <class T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* inp, const T* gamma, const T* beta, int64_t N, int64_t C);
// dinp += ∂/∂inp (it feeds the residual stream); dgamma, dbeta +=
template <class T>
void layernorm_backward(T* dinp, T* dgamma, T* dbeta, const T* dout, const T* inp, const T* gamma, const T* mean,
                        const T* rstd, int64_t N, int64_t C);

// out: [n] = GELU(inp) (tanh approximation, as GPT-2)
template <class T>
void gelu_forward(T* out, const T* inp, int64_t n);
template <class T>
void gelu_backward(T* dinp, const T* dout, const T* inp, int64_t n);

// out: [n] = a + b (the residual connection; its backward passes dout to both sides)
template <class T>
void residual_forward(T* out, const T* a, const T* b, int64_t n);

// Sinusoidal absolute position: needs no parameters and extends to any length, so generation can
// run past the training length. pe: [C] for position `position`.
template <class T>
void sinusoid_position(T* pe, int64_t position, int64_t C);

// out: [B, T, C] = wte[tokens[b, t]] + sinusoid(position0 + t); tokens: [B, T], wte: [V, C]
template <class T>
void embedding_forward(T* out, const int32_t* tokens, const T* wte, int64_t B, int64_t T_, int64_t C,
                       int64_t position0 = 0);
// dwte += scatter of dout by token (serial: a fixed order, so results do not depend on threads)
template <class T>
void embedding_backward(T* dwte, const T* dout, const int32_t* tokens, int64_t B, int64_t T_, int64_t C);

// probs: [N, V] = softmax(logits: [N, V]); returns Σ_i w_i · −log probs[i, targets[i]] / Σ_i w_i
// (weights: [N], null means all 1; 0 when every weight is 0).
template <class T>
T cross_entropy_forward(T* probs, const T* logits, const int32_t* targets, const T* weights, int64_t N, int64_t V);
// dlogits: [N, V] = w_i / Σw · (probs − onehot(targets))
template <class T>
void cross_entropy_backward(T* dlogits, const T* probs, const int32_t* targets, const T* weights, int64_t N, int64_t V);

// How a block attends: the kind, the head count and, for linear and favor, φ.
struct AttentionSpec {
  AttentionKind kind = AttentionKind::linear;
  int64_t heads = 1;
  FeatureMapPtr feature_map;  // null for softmax
  int64_t chunk_size = 64;
};

// Causal multi-head attention. out: [B, T, C]; lse: [B, H, T] (softmax only, else unused);
// qkv: [B, T, 3C], q | k | v along the last axis, each split into H heads of C/H.
// float runs linattn's operators; double runs the fp64 reference (for the gradient tests).
template <class T>
void attention_forward(T* out, T* lse, const T* qkv, const AttentionSpec& spec, int64_t B, int64_t T_, int64_t C);
// dqkv: [B, T, 3C]; out and lse as saved by the forward.
template <class T>
void attention_backward(T* dqkv, const T* dout, const T* qkv, const T* out, const T* lse, const AttentionSpec& spec,
                        int64_t B, int64_t T_, int64_t C);

}  // namespace linattn::model
