#pragma once
// A decoder-only transformer: token embedding + sinusoidal positions, L pre-norm blocks
// (LayerNorm, causal multi-head attention, LayerNorm, GELU MLP, each with a residual), a final
// LayerNorm and an untied output head. Parameters live in one flat array (as llm.c), so the
// optimizer, checkpoints and gradient checks treat them as one vector.
#include <cstdint>
#include <string>
#include <vector>

#include "linattn/model/config.hpp"
#include "linattn/model/layers.hpp"
#include "linattn/model/sequence_parallel.hpp"

namespace linattn::model {

// One named parameter tensor inside the flat array.
struct ParamTensor {
  std::string name;
  int64_t offset = 0, size = 0;
  bool decay = false;  // AdamW decays matrices, not biases, norms or positions
};

// Pointers to every parameter tensor of a flat array laid out for a config; [L, ...] per block kind.
template <class P>
struct ParamPointers {
  P* wte;                  // [V, C]
  P *ln1w, *ln1b;          // [L, C]
  P *qkvw, *qkvb;          // [L, C, 3C], [L, 3C]
  P *gatew, *gateb;        // [L, C, G], [L, G]: the log-decay projection, G = gate_width (gla, gated_deltanet, kda)
  P* alog;                 // [L, H]: log A of g = −A · softplus(·) (gated_deltanet, kda, mamba2, rwkv7)
  P *betaw, *betab;        // [L, C, W], [L, W]: β's projection, W = beta_width (deltanet, gated_deltanet, kda:
                           // H; rwkv7: C, its ā)
  P* dskip;                // [L, H]: Mamba-2's D (mamba2)
  P* linproj;              // [L, 2, H, P, N_max]: linformer's E then F of each layer
  P *attprojw, *attprojb;  // [L, C, C], [L, C]
  P *ln2w, *ln2b;          // [L, C]
  P *fcw, *fcb;            // [L, C, F], [L, F]
  P *fcprojw, *fcprojb;    // [L, F, C], [L, C]
  P *lnfw, *lnfb;          // [C]
  P *headw, *headb;        // [C, V], [V] (the classifier: [C, classes], [classes])
};

// The parameter tensors of a config, in array order (after qkvb: gla adds gatew and gateb;
// gated_deltanet, kda and rwkv7 gatew, gateb, alog, betaw and betab; deltanet betaw and betab; mamba2 gatew,
// gateb, alog and dskip; the other kinds' layout is the one model files have always had).
std::vector<ParamTensor> param_tensors(const ModelConfig& config);
// The head's outputs: config.classes for the encoder classifier, else the vocabulary.
int64_t head_width(const ModelConfig& config);
// linformer: one layer's E and F, 2 · H · P · N_max weights.
int64_t linformer_layer_size(const ModelConfig& config);
int64_t param_count(const ModelConfig& config);
// The floats a Transformer holds per token of a batch for one step (its activations and their
// gradients, what Transformer::resize allocates for B × T tokens), for memory estimates.
int64_t activation_floats_per_token(const ModelConfig& config);
template <class P>
ParamPointers<P> param_pointers(P* base, const ModelConfig& config);

template <class T>
class Transformer {
 public:
  // Weights drawn from config.init_seed (N(0, 0.02), residual projections scaled by 1/√(2L)).
  explicit Transformer(const ModelConfig& config);

  const ModelConfig& config() const { return config_; }
  std::vector<T>& params() { return params_; }
  const std::vector<T>& params() const { return params_; }
  std::vector<T>& grads() { return grads_; }
  const std::vector<T>& grads() const { return grads_; }
  // φ of each layer (null for softmax), shared with generation.
  const AttentionSpec& attention(int64_t layer) const { return specs_[layer]; }

  // logits: [B, T, V] of tokens: [B, T] (positions 0..T−1). Returns the loss when targets: [B, T]
  // is given (weights: [B, T] or null), else 0. Keeps what backward needs.
  // The encoder classifier (config.classes > 0): logits: [B, classes] of the mean over each sequence's
  // tokens with weight (weights: [B, T], the real-token mask; null: every token); targets: [B], the
  // classes; the loss is the mean cross-entropy over the B sequences. Single process only. The tokens
  // after a sequence's last one with weight are its padding: attention keeps them from every real token,
  // so the logits and gradients do not depend on the padded length or the padding's tokens.
  T forward(const int32_t* tokens, const int32_t* targets, const T* weights, int64_t B, int64_t T_);
  // grads += ∂loss/∂params of the last forward, which must have had targets.
  void backward();
  // Sequence parallelism (sequence_parallel.hpp): the tokens forward is given are then positions
  // [position0, position0 + T) of every sequence, split over parallel's ranks. Attention covers the
  // whole sequence, the loss forward returns is the whole batch's (the same on every rank), and
  // backward adds this shard's part of the gradient (sum it over the ranks). Every rank calls forward
  // and backward together. single_process() with position 0, the default, holds the sequence here.
  void set_sequence_parallel(const SequenceParallel& parallel, int64_t position0);
  void zero_grad();
  const T* logits() const { return logits_.data(); }

 private:
  ModelConfig config_;
  std::vector<AttentionSpec> specs_;
  std::vector<T> params_, grads_;
  int64_t B_ = 0, T_ = 0;
  const SequenceParallel* parallel_ = &single_process();
  int64_t position0_ = 0;
  double loss_total_ = 0;  // the loss's Σw over every rank (0: this process's own, as cross_entropy takes it)
  bool has_targets_ = false;
  std::vector<int32_t> tokens_, targets_;
  std::vector<T> weights_;
  std::vector<int64_t> lengths_;  // the classifier's real lengths [B] (attention's key_lengths); empty: all real
  // Activations, llm.c style: per layer where marked [L, ...].
  std::vector<T> encoded_;                    // [B, T, C]
  std::vector<T> ln1_, ln1_mean_, ln1_rstd_;  // [L, B, T, C], [L, B, T]
  std::vector<T> qkv_, atty_, lse_;           // [L, B, T, 3C], [L, B, T, C], [L, B, H, T]
  std::vector<T> gate_, attn_,
      head_rstd_;             // g [L, B, T, G] (gla, gated_deltanet, kda); pre-norm [L, B, T, C], [L, B, T, H]
  std::vector<T> beta_;       // [L, B, T, H] (delta kinds)
  std::vector<T> residual2_;  // [L, B, T, C]
  std::vector<T> ln2_, ln2_mean_, ln2_rstd_;
  std::vector<T> fch_, fch_gelu_;  // [L, B, T, F]
  std::vector<T> residual3_;       // [L, B, T, C]
  std::vector<T> lnf_, lnf_mean_, lnf_rstd_;
  std::vector<T> logits_, probs_;                              // [B, T, V] ([B, classes] for the classifier)
  std::vector<T> pooled_, dpooled_;                            // [B, C]: the classifier's mean pool
  std::vector<T> scratch_;                                     // [B, T, C]
  std::vector<T> dlogits_, dres_, dln_, dbig_, dfch_, datty_;  // backward's buffers
  std::vector<T> dattn_, dgate_, dbeta_;                       // [B, T, C], [B, T, G], [B, T, H]

  void resize(int64_t B, int64_t T_);
  // Layer l's attention for the current batch: its spec with the batch's key lengths.
  AttentionSpec layer_spec(int64_t l) const;
};

}  // namespace linattn::model
