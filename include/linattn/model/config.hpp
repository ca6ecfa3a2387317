#pragma once
// The shape of a decoder-only transformer (or of the encoder classifier beside it): what a model file
// stores to rebuild it.
#include <cstdint>
#include <string>
#include <string_view>

#include "linattn/decay.hpp"
#include "linattn/delta.hpp"
#include "linattn/feature_map.hpp"

namespace linattn::model {

// The attention each block uses: exact softmax, linear with φ = elu + 1, Performer (FAVOR+), or a
// decayed linear attention (decay.hpp) on q, k as projected: RetNet's multi-scale retention (a fixed
// decay per head) or GLA (a decay per key dimension from a projection of the block's input), or the
// delta rule (delta.hpp) on l2-normalised q, k: DeltaNet, Gated DeltaNet (a learned decay per head) or
// Kimi Delta Attention (a learned decay per key dimension). linformer (the encoder only): keys and values
// projected along the sequence by learned E, F ∈ R^{P × N_max} per layer and head, then exact softmax.
// mamba2 (the decoder only): Mamba-2's SSD mixer, C and B as q and k (one group per head, N = P = the head
// dim), the decay dt·A per head and token, x·dt as the value and a D skip (mamba2_layers.cpp). rwkv7 (the
// decoder only): RWKV-7's generalized delta rule (dplr.hpp), a decay per key dimension and the removal
// a = −κ̂, b = κ̂ ⊙ ā with κ̂ the unit key and ā a learned sigmoid gate per channel (rwkv7_layers.cpp).
enum class AttentionKind {
  softmax,
  linear,
  favor,
  retnet,
  gla,
  deltanet,
  gated_deltanet,
  kda,
  linformer,
  mamba2,
  rwkv7
};

const char* attention_name(AttentionKind kind);
// "softmax", "linear", "favor", "retnet", "gla", "deltanet", "gated_deltanet", "kda", "linformer", "mamba2" or
// "rwkv7"; throws
// linattn::Error naming the choices otherwise.
AttentionKind attention_by_name(std::string_view name);

// retnet and gla: the decayed family, a per-head norm on the output, a decaying state in generation.
bool is_decayed(AttentionKind kind);
// The recurrence of a decayed kind: Decay::retention (retnet) or Decay::key (gla).
Decay decay_of(AttentionKind kind);
// deltanet, gated_deltanet and kda: the delta rule, with β per head, the same head norm and a state in
// generation.
bool is_delta(AttentionKind kind);
// The recurrence of a delta kind: DeltaGate::none (deltanet), token (gated_deltanet) or key (kda).
DeltaGate delta_gate_of(AttentionKind kind);
// The kinds whose attention output goes through the per-head norm: the decayed and the delta kinds, mamba2
// and rwkv7.
bool has_head_norm(AttentionKind kind);
// Log-decay values per token of a block's gate: C (gla, kda, rwkv7: one per key dimension of each head), H
// (gated_deltanet, mamba2: one per head) or 0 (no gate).
int64_t gate_width(AttentionKind kind, int64_t d_model, int64_t heads);
// The kinds whose gate is g = −exp(alog[h]) · softplus(ln1 · gatew + gateb), with a learned alog per head:
// gated_deltanet, kda, mamba2 and rwkv7.
bool has_alog(AttentionKind kind);
// Values per token of a block's β buffer: H (the delta kinds' β; mamba2's dt = softplus(·), from the gate's
// projection), C (rwkv7's removal gate ā, one per channel) or 0 (none).
int64_t beta_width(AttentionKind kind, int64_t d_model, int64_t heads);

// GLA's log decay is logsigmoid(x W_g + b_g) / kGlaGateNormalizer (flash-linear-attention's
// gate_logit_normalizer): at initialisation about −0.043 per token, a memory of some 20 tokens.
inline constexpr double kGlaGateNormalizer = 16;

struct ModelConfig {
  int64_t vocab_size = 0;
  int64_t d_model = 64;      // C
  int64_t layers = 2;        // L
  int64_t heads = 4;         // H; head dim = C / H
  int64_t mlp_hidden = 256;  // the MLP's inner width
  AttentionKind attention = AttentionKind::linear;
  int64_t favor_features = 64;  // Performer: random features per head
  uint64_t favor_seed = 7;      // Performer: layer l draws its features from favor_seed + l
  int64_t chunk_size = 64;      // causal linear and decayed attention: tokens per chunk
  uint64_t init_seed = 1;       // weight initialisation
  // 0: the decoder (causal attention, a next-token head over the vocabulary). > 0: the encoder
  // classifier of a classification task (ListOps): non-causal attention, the final norm's output
  // mean-pooled over each sequence's real tokens, a linear head to `classes` logits per sequence.
  // The recurrent kinds (retnet, gla and the delta kinds) have no non-causal form: the encoder runs
  // each of them in both directions and adds the two outputs (before the head norm).
  int64_t classes = 0;
  // linformer: P, the projected length, and N_max, the longest sequence (the padded length the
  // projections span; train sets it to seq_len). Stored only for linformer.
  int64_t linformer_length = 64;
  int64_t max_seq_len = 0;

  int64_t head_dim() const { return d_model / heads; }
};

// Throws linattn::Error naming the first bad field (non-positive sizes, C not divisible by H, ...).
void check_config(const ModelConfig& config);

// Every one of the n tokens lies in [0, vocab_size); else linattn::Error naming `what`, the index and the
// value. The model's entry points check their token inputs with it.
void check_tokens(const char* what, const int32_t* tokens, int64_t n, int64_t vocab_size);

// φ for layer `layer` (null for softmax and the decayed and delta kinds: q and k enter as projected): elu + 1, or
// layer's FAVOR+ draw.
FeatureMapPtr feature_map_for(const ModelConfig& config, int64_t layer);

// "key=value" lines, the form model files store; parse throws linattn::Error naming a bad line.
std::string config_to_text(const ModelConfig& config);
ModelConfig config_from_text(std::string_view text);

}  // namespace linattn::model
