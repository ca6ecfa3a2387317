#pragma once
// One pre-norm block's forward, shared by training (which keeps every layer's activations) and
// generation (which reuses one set of buffers and attends against its cache or state).
#include <cstdint>

#include "linattn/model/layers.hpp"
#include "linattn/model/transformer.hpp"

namespace linattn::model::detail {

// Where one block's activations go; N rows. gate, attn, head_rstd and beta are null for the kinds
// without them.
template <class T>
struct BlockActivations {
  T *ln1, *ln1_mean, *ln1_rstd;  // [N, C], [N], [N]
  T *qkv, *atty;                 // [N, 3C], [N, C]
  T* residual2;                  // [N, C]
  T *ln2, *ln2_mean, *ln2_rstd;  // [N, C], [N], [N]
  T *fch, *fch_gelu;             // [N, F]
  T* residual3;                  // [N, C]
  T* scratch;                    // [N, C]
  T* gate = nullptr;       // [N, G]: the log decay, G = gate_width: gla's g = logsigmoid(ln1 · gatew + gateb) / 16;
                           // gated_deltanet, mamba2 (G = H), kda, rwkv7 (G = C): g = −exp(alog) · softplus(ln1 ·
                           // gatew + gateb)
  T* attn = nullptr;       // [N, C]: the decayed and delta kinds: the attention before the head norm
  T* head_rstd = nullptr;  // [N, H]: the decayed and delta kinds: the head norm's saved 1/σ
  T* beta = nullptr;       // [N, beta_width]: the delta kinds' β = sigmoid(ln1 · betaw + betab) ([N, H]);
                           // mamba2's dt = softplus(ln1 · gatew + gateb) = g / −exp(alog) ([N, H]); rwkv7's
                           // ā = sigmoid(ln1 · betaw + betab) ([N, C])
  AttentionKind kind = AttentionKind::linear;  // which gate the block computes
};

// residual3 = residual2 + mlp(ln2(residual2)), residual2 = residual + attproj(attend(qkv(ln1(residual))))
// (the decayed and delta kinds, rwkv7: attproj(head_norm(attend(...))); mamba2: attproj(head_norm(attend(...) + D ·
// x))). attend(out, qkv, gate, beta) writes
// the heads' attention outputs of the N rows; gate is a.gate and beta a.beta (null for the kinds
// without them).
template <class T, class Attend>
void block_forward(const BlockActivations<T>& a, const T* residual, const ParamPointers<const T>& p, int64_t l,
                   int64_t N, int64_t C, int64_t F, int64_t H, Attend&& attend) {
  layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, residual, p.ln1w + l * C, p.ln1b + l * C, N, C);
  matmul_forward(a.qkv, a.ln1, p.qkvw + l * C * 3 * C, p.qkvb + l * 3 * C, N, C, 3 * C);
  if (a.gate) {
    const int64_t G = gate_width(a.kind, C, H);
    matmul_forward(a.gate, a.ln1, p.gatew + l * C * G, p.gateb + l * G, N, C, G);
    if (a.kind == AttentionKind::gla)
      log_sigmoid_gate_forward(a.gate, static_cast<const T*>(a.gate), N * C);
    else
      delta_gate_forward(a.gate, static_cast<const T*>(a.gate), p.alog + l * H, N, H, G / H);
  }
  if (a.beta && a.kind == AttentionKind::mamba2) {
    mamba2_dt_forward(a.beta, static_cast<const T*>(a.gate), p.alog + l * H, N, H);
  } else if (a.beta) {
    const int64_t W = beta_width(a.kind, C, H);
    matmul_forward(a.beta, a.ln1, p.betaw + l * C * W, p.betab + l * W, N, C, W);
    delta_beta_forward(a.beta, static_cast<const T*>(a.beta), N * W);
  }
  const T* gate = a.gate;
  const T* beta = a.beta;
  if (a.attn) {
    attend(a.attn, static_cast<const T*>(a.qkv), gate, beta);
    if (a.kind == AttentionKind::mamba2)
      mamba2_skip_forward(a.attn, static_cast<const T*>(a.qkv), p.dskip + l * H, N, C, H);
    head_norm_forward(a.atty, a.head_rstd, static_cast<const T*>(a.attn), N * H, C / H);
  } else {
    attend(a.atty, static_cast<const T*>(a.qkv), gate, beta);
  }
  matmul_forward(a.scratch, a.atty, p.attprojw + l * C * C, p.attprojb + l * C, N, C, C);
  residual_forward(a.residual2, residual, a.scratch, N * C);
  layernorm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.residual2, p.ln2w + l * C, p.ln2b + l * C, N, C);
  matmul_forward(a.fch, a.ln2, p.fcw + l * C * F, p.fcb + l * F, N, C, F);
  gelu_forward(a.fch_gelu, a.fch, N * F);
  matmul_forward(a.scratch, a.fch_gelu, p.fcprojw + l * F * C, p.fcprojb + l * C, N, F, C);
  residual_forward(a.residual3, a.residual2, a.scratch, N * C);
}

}  // namespace linattn::model::detail
