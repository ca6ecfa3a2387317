#pragma once
// The transformer's layers, forward and backward side by side (llm.c style). Templated on the
// scalar: float trains and generates, double is what the finite-difference tests differentiate.
// Rows are tokens: N = B·T. Unless a comment says "+=", a backward overwrites its input gradient,
// and every backward adds (+=) into its parameter gradients, which the caller zeroes per step.
#include <cstdint>
#include <span>

#include "linattn/decay.hpp"
#include "linattn/delta.hpp"
#include "linattn/dplr.hpp"
#include "linattn/feature_map.hpp"
#include "linattn/model/config.hpp"
#include "linattn/model/sequence_parallel.hpp"

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

// probs: [N, V] = softmax(logits: [N, V]); returns Σ_i w_i · −log probs[i, targets[i]] / total
// (weights: [N], null means all 1). total 0 takes Σ_i w_i (a sequence-parallel shard passes the
// whole sequence's); the result is 0 when the total is.
template <class T>
T cross_entropy_forward(T* probs, const T* logits, const int32_t* targets, const T* weights, int64_t N, int64_t V,
                        double total = 0);
// dlogits: [N, V] = w_i / total · (probs − onehot(targets)), total as the forward's
template <class T>
void cross_entropy_backward(T* dlogits, const T* probs, const int32_t* targets, const T* weights, int64_t N, int64_t V,
                            double total = 0);

// g: [n] = logsigmoid(x) / kGlaGateNormalizer, GLA's log decay (≤ 0); g may alias x.
template <class T>
void log_sigmoid_gate_forward(T* g, const T* x, int64_t n);
// dx: [n] = dg · σ(−x) / kGlaGateNormalizer, with σ(−x) = −expm1(kGlaGateNormalizer · g) from the
// saved g (no need to keep x); dx may alias dg.
template <class T>
void log_sigmoid_gate_backward(T* dx, const T* dg, const T* g, int64_t n);

// The delta kinds' β (delta_layers.cpp): beta: [n] = sigmoid(x), the write strength per head and
// token in (0, 1); beta may alias x.
template <class T>
void delta_beta_forward(T* beta, const T* x, int64_t n);
// dx: [n] = dbeta · β (1 − β) from the saved β; dx may alias dbeta.
template <class T>
void delta_beta_backward(T* dx, const T* dbeta, const T* beta, int64_t n);

// The delta kinds' log decay, as Gated DeltaNet's (Mamba-2's): g = −exp(a_log[h]) · softplus(x), with
// x = ln1 · gatew + gateb already projected (gateb is the learned dt bias). g, x: [rows, H · per_head]
// (per_head = 1 for gated_deltanet, C/H for kda), a_log: [H]; g may alias x. g < 0.
template <class T>
void delta_gate_forward(T* g, const T* x, const T* a_log, int64_t rows, int64_t H, int64_t per_head);
// dx: [rows, H · per_head] = dg · −exp(a_log) · sigmoid(x), with sigmoid(x) = −expm1(−softplus(x)) and
// softplus(x) = g / −exp(a_log) from the saved g (no need to keep x); da_log: [H] += Σ dg · g. dx may
// alias dg.
template <class T>
void delta_gate_backward(T* dx, T* da_log, const T* dg, const T* g, const T* a_log, int64_t rows, int64_t H,
                         int64_t per_head);

// The decayed kinds' per-head output norm (RetNet's GroupNorm with one group per head, no affine:
// the attention projection after it scales): out: [rows, D] = (inp − mean) · rstd row by row, rows
// = N·H, D the head dim; saves rstd: [rows].
template <class T>
void head_norm_forward(T* out, T* rstd, const T* inp, int64_t rows, int64_t D);
// dinp: [rows, D] = rstd · (dout − mean(dout) − out · mean(dout ⊙ out)), overwritten; out as saved.
template <class T>
void head_norm_backward(T* dinp, const T* dout, const T* out, const T* rstd, int64_t rows, int64_t D);

// How a block attends: the kind, the head count and, for linear and favor, φ.
struct AttentionSpec {
  AttentionKind kind = AttentionKind::linear;
  int64_t heads = 1;
  FeatureMapPtr feature_map;  // null for softmax and the decayed and delta kinds
  int64_t chunk_size = 64;
  bool causal = true;  // false: the encoder classifier's attention (every token sees every token)
  int64_t linformer_length = 0, max_length = 0;  // linformer: P and N_max of its projections
  // The encoder's per-sequence real lengths [B]: tokens t ≥ key_lengths[b] are padding, which no real
  // token's output sees (the non-causal kinds mask them as keys; the recurrent kinds keep them after every
  // real token in both directions). Empty: every token is real. Set per batch, not stored with the model.
  std::span<const int64_t> key_lengths{};
};

// The encoder's mean pool (pool_layers.cpp): out: [B, C] = Σ_t w[b, t] · inp[b, t, :] / Σ_t w[b, t],
// weights: [B, T] (1 on the real tokens, 0 on padding; null: all 1). A sequence without weight pools to 0.
template <class T>
void mean_pool_forward(T* out, const T* inp, const T* weights, int64_t B, int64_t T_, int64_t C);
// dinp: [B, T, C] = w[b, t] / Σ_t w[b, t] · dout[b, :], overwritten.
template <class T>
void mean_pool_backward(T* dinp, const T* dout, const T* weights, int64_t B, int64_t T_, int64_t C);

// The recurrent kinds (retnet, gla and the delta kinds) have a causal operator only; non-causal, as the
// encoder asks, they run both directions (bidirectional.cpp): out = A(x) + flip(A(flip(x))), where A is
// the causal attention of the same kind and flip reverses the T axis of q, k, v, the gate and β: each
// sequence's real tokens t < spec.key_lengths[b] only, the padding left at the end, so that neither
// direction's real outputs see it. Softmax, linear, favor and linformer have a non-causal operator of their
// own and run it, with the key lengths.
bool runs_both_directions(const AttentionSpec& spec);
template <class T>
void bidirectional_forward(T* out, const T* qkv, const AttentionSpec& spec, int64_t B, int64_t T_, int64_t C,
                           const T* gate, const T* beta);
template <class T>
void bidirectional_backward(T* dqkv, const T* dout, const T* qkv, const AttentionSpec& spec, int64_t B, int64_t T_,
                            int64_t C, const T* gate, T* dgate, const T* beta, T* dbeta);

// Multi-head attention, causal unless spec.causal is false. out: [B, T, C]; lse: [B, H, T] (softmax and linformer, else
// unused); qkv: [B, T, 3C], q | k | v along the last axis, each split into H heads of C/H; gate: [B, T, C], the
// per-key-dimension log decay g ([B, T, H, C/H]) for gla and kda, [B, T, H] (one per head) for gated_deltanet,
// linformer's projections E then F ([2, H, P, N_max], the layer's weights), else unused (null); beta: [B, T, H], the
// delta kinds' β, else unused (null). float runs linattn's operators (retnet, gla: decayed_attention_forward; the delta
// kinds: delta_rule_forward; both chunked); double runs the fp64 reference (for the gradient tests). The decayed and
// delta kinds write the output before the head norm. parallel: whose operators attend (sequence_parallel.hpp): with a
// group of ranks, T_ is this rank's shard and attention covers the whole sequence; double accepts only
// single_process().
template <class T>
void attention_forward(T* out, T* lse, const T* qkv, const AttentionSpec& spec, int64_t B, int64_t T_, int64_t C,
                       const T* gate = nullptr, const T* beta = nullptr,
                       const SequenceParallel& parallel = single_process());
// dqkv: [B, T, 3C]; out and lse as saved by the forward; dgate (shaped like gate) and dbeta ([B, T, H])
// overwritten with ∂/∂gate and ∂/∂beta (the kinds that have them, else unused).
template <class T>
void attention_backward(T* dqkv, const T* dout, const T* qkv, const T* out, const T* lse, const AttentionSpec& spec,
                        int64_t B, int64_t T_, int64_t C, const T* gate = nullptr, T* dgate = nullptr,
                        const T* beta = nullptr, T* dbeta = nullptr,
                        const SequenceParallel& parallel = single_process());

// The delta kinds' attention (delta_layers.cpp), which attention_forward/backward dispatch to: the
// delta rule on the q, k, v parts of qkv with qk_l2norm, β and (gated_deltanet, kda) the log decay.
template <class T>
void delta_attention_forward(T* out, const T* qkv, const T* gate, const T* beta, const AttentionSpec& spec, int64_t B,
                             int64_t T_, int64_t C, const SequenceParallel& parallel = single_process());
template <class T>
void delta_attention_backward(T* dqkv, T* dgate, T* dbeta, const T* dout, const T* qkv, const T* gate, const T* beta,
                              const AttentionSpec& spec, int64_t B, int64_t T_, int64_t C,
                              const SequenceParallel& parallel = single_process());

// The options of a delta kind's operator: its gate, qk_l2norm, the default scale K^−1/2, the spec's chunk.
DeltaRuleOptions delta_options(const AttentionSpec& spec);

// Mamba-2's SSD mixer (mamba2_layers.cpp), per head h of head dim P with q = C_t, k = B_t (one group per head,
// state size N = P), x_t the v part of qkv, g_t = dt_t · A_h (the gate, A_h = −exp(alog[h])) and
// dt_t = softplus(ln1 · gatew + gateb) (the β buffer): h_t = exp(g_t) h_{t−1} + B_t (dt_t x_t)ᵀ, y_t = C_tᵀ h_t
// (scale 1, as Mamba-2), then the block adds D_h · x_t (mamba2_skip_forward).
// dt: [rows, H] = g / −exp(a_log[h]), i.e. softplus(x) from the gate the block computed; dt may not alias g.
template <class T>
void mamba2_dt_forward(T* dt, const T* g, const T* a_log, int64_t rows, int64_t H);
// dx: [n] += ddt · sigmoid(x), with sigmoid(x) = −expm1(−dt) from the saved dt: dt's share of the gradient of
// the gate's pre-activation x (delta_gate_backward gives g's).
template <class T>
void mamba2_dt_backward(T* dx, const T* ddt, const T* dt, int64_t n);
// attn: [rows, C] += D[h] · x, x the v part of the qkv rows [rows, 3C]: Mamba-2's skip.
template <class T>
void mamba2_skip_forward(T* attn, const T* qkv, const T* d, int64_t rows, int64_t C, int64_t H);
// dqkv's v part += D[h] · dattn; dd: [H] += Σ dattn · x.
template <class T>
void mamba2_skip_backward(T* dqkv, T* dd, const T* dattn, const T* qkv, const T* d, int64_t rows, int64_t C, int64_t H);
// The chunked decayed operator's options for mamba2: Decay::token, scale 1, the spec's chunk.
DecayedAttentionOptions mamba2_options(const AttentionSpec& spec);
// value: [rows, C] = dt[h] · x, x the v part of the qkv rows: the value the SSD recurrence writes.
template <class T>
void mamba2_value(T* value, const T* qkv, const T* dt, int64_t rows, int64_t C, int64_t H);
// The recurrence without the skip, on the q, k, v parts of qkv, gate g [B, T, H] and beta dt [B, T, H]. float
// runs the chunked decayed operator (decay.hpp) through `parallel`; double the fp64 reference.
template <class T>
void mamba2_attention_forward(T* out, const T* qkv, const T* gate, const T* beta, const AttentionSpec& spec, int64_t B,
                              int64_t T_, int64_t C, const SequenceParallel& parallel = single_process());
// dqkv: [B, T, 3C], dgate (∂/∂g) and dbeta (∂/∂dt, through the value) overwritten.
template <class T>
void mamba2_attention_backward(T* dqkv, T* dgate, T* dbeta, const T* dout, const T* qkv, const T* gate, const T* beta,
                               const AttentionSpec& spec, int64_t B, int64_t T_, int64_t C,
                               const SequenceParallel& parallel = single_process());

// RWKV-7's generalized delta rule (rwkv7_layers.cpp) on q = r, k, v of qkv, the log decay gk (the gate, per key
// dimension, −exp(alog) · softplus(·) as kda's) and the removal a = −κ̂, b = κ̂ ⊙ ā, κ̂ = k / √(‖k‖² + 1e−6)
// per head and ā = sigmoid(ln1 · betaw + betab) per channel (the β buffer, [rows, C]): RWKV-7's
// state · (diag(w) − κ̂ᵀ(κ̂ ⊙ ā)) + vᵀk, with the written key k as projected.
// a, b: [rows, C] from the k part of the qkv rows [rows, 3C] and abar [rows, C].
template <class T>
void rwkv7_removal(T* a, T* b, const T* qkv, const T* abar, int64_t rows, int64_t C, int64_t H);
// The backward of rwkv7_removal: dqkv's k part += ∂/∂k; dabar: [rows, C] overwritten.
template <class T>
void rwkv7_removal_backward(T* dqkv, T* dabar, const T* da, const T* db, const T* qkv, const T* abar, int64_t rows,
                            int64_t C, int64_t H);
// The operator's options: scale 1, as chunk_rwkv7.
DplrOptions rwkv7_options();
// float runs the token-by-token DPLR operator (dplr.hpp, one process only); double the fp64 reference.
template <class T>
void rwkv7_attention_forward(T* out, const T* qkv, const T* gate, const T* beta, const AttentionSpec& spec, int64_t B,
                             int64_t T_, int64_t C, const SequenceParallel& parallel = single_process());
// dqkv, dgate (∂/∂gk) and dbeta (∂/∂ā) overwritten.
template <class T>
void rwkv7_attention_backward(T* dqkv, T* dgate, T* dbeta, const T* dout, const T* qkv, const T* gate, const T* beta,
                              const AttentionSpec& spec, int64_t B, int64_t T_, int64_t C,
                              const SequenceParallel& parallel = single_process());

// The options of a decayed kind's operator: its Decay, the default scale K^−1/2, the spec's chunk.
DecayedAttentionOptions decayed_options(const AttentionSpec& spec);

}  // namespace linattn::model
