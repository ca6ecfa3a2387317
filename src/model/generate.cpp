// Generation: KV cache (softmax) or recurrent state (linear, favor; retnet, gla and mamba2: a decaying one;
// the delta kinds: the delta rule's; rwkv7: the DPLR delta rule's), one block of tokens at a time.
#include "linattn/model/generate.hpp"

#include <algorithm>
#include <cmath>
#include <iterator>

#include "linattn/decay.hpp"
#include "linattn/delta.hpp"
#include "linattn/dplr.hpp"
#include "linattn/error.hpp"
#include "linattn/linear_attention.hpp"
#include "linattn/softmax_attention.hpp"
#include "model/block.hpp"

namespace linattn::model {
namespace {
// Prompts are fed in blocks of this many tokens, so that scratch memory stays bounded.
constexpr int64_t kMaxBlock = 1024;
}  // namespace

Generator::Generator(const Transformer<float>& model) : model_(model) {
  // The encoder classifier has no next-token head to sample from.
  if (model.config().classes > 0)
    throw Error("linattn::model: the model is an encoder classifier (" + std::to_string(model.config().classes) +
                " classes, e.g. trained on --task listops), expected a decoder: score it with linattn eval");
  reset();
}

void Generator::reset() {
  const ModelConfig& c = model_.config();
  position_ = 0;
  states_.clear();
  keys_.assign(c.layers, {});
  values_.assign(c.layers, {});
  capacity_ = 0;
  if (c.attention == AttentionKind::softmax) return;
  if (is_decayed(c.attention)) {
    // S: [1, H, hd, hd] per layer, named by its recurrence so that decayed_step refuses another.
    for (int64_t l = 0; l < c.layers; ++l)
      states_.emplace_back(1, c.heads, c.head_dim(), c.head_dim(), decay_name(decay_of(c.attention)));
    return;
  }
  if (is_delta(c.attention) || c.attention == AttentionKind::mamba2 || c.attention == AttentionKind::rwkv7) {
    // S: [1, H, hd, hd] per layer, named by its recurrence so that its step refuses another.
    const std::string name = c.attention == AttentionKind::mamba2  ? decay_name(Decay::token)
                             : c.attention == AttentionKind::rwkv7 ? std::string(kDplrName)
                                                                   : delta_name(delta_gate_of(c.attention));
    for (int64_t l = 0; l < c.layers; ++l) states_.emplace_back(1, c.heads, c.head_dim(), c.head_dim(), name);
    return;
  }
  for (int64_t l = 0; l < c.layers; ++l) {
    const FeatureMapPtr& map = model_.attention(l).feature_map;
    states_.emplace_back(1, c.heads, map->feature_dim(c.head_dim()), c.head_dim(), map->name());
  }
}

int64_t Generator::state_bytes() const {
  int64_t bytes = 0;
  // (The decayed and delta kinds' z is allocated but unused; it counts, as it is held.)
  for (const RecurrentState& s : states_) bytes += int64_t((s.S().size() + s.z().size()) * sizeof(float));
  // The KV cache in use (its capacity runs up to twice that).
  if (model_.config().attention == AttentionKind::softmax)
    bytes += 2 * model_.config().layers * position_ * model_.config().d_model * int64_t(sizeof(float));
  return bytes;
}

void Generator::grow_cache(int64_t keys) {
  if (keys <= capacity_) return;
  const ModelConfig& c = model_.config();
  const int64_t hd = c.head_dim(), capacity = std::max({keys, 2 * capacity_, int64_t(256)});
  for (auto* cache : {&keys_, &values_})
    for (std::vector<float>& layer : *cache) {
      std::vector<float> grown(c.heads * capacity * hd);
      for (int64_t h = 0; h < c.heads && capacity_ > 0; ++h)
        std::copy(layer.begin() + h * capacity_ * hd, layer.begin() + (h * capacity_ + position_) * hd,
                  grown.begin() + h * capacity * hd);
      layer = std::move(grown);
    }
  capacity_ = capacity;
}

std::span<const float> Generator::feed(std::span<const int32_t> tokens) {
  const int64_t V = model_.config().vocab_size, n = int64_t(tokens.size());
  check_tokens("tokens", tokens.data(), n, V);
  logits_.resize(n * V);
  for (int64_t start = 0; start < n; start += kMaxBlock) {
    const int64_t count = std::min(kMaxBlock, n - start);
    feed_block(tokens.data() + start, count);
    std::copy(buffers_.end() - count * V, buffers_.end(), logits_.begin() + start * V);
  }
  return logits_;
}

void Generator::feed_block(const int32_t* tokens, int64_t n) {
  const ModelConfig& c = model_.config();
  const int64_t C = c.d_model, F = c.mlp_hidden, V = c.vocab_size, H = c.heads, hd = c.head_dim();
  const ParamPointers<const float> p = param_pointers<const float>(model_.params().data(), c);
  // One set of block buffers reused by every layer: [n, ·] each (17–20: the gate, the pre-norm
  // attention and head-norm statistics, β; 21, 22: mamba2's value, rwkv7's a; 23: rwkv7's b), then the logits,
  // last (feed copies them from the end).
  const bool gated = gate_width(c.attention, C, H) > 0, normed = has_head_norm(c.attention);
  const bool gla = c.attention == AttentionKind::gla, decayed = is_decayed(c.attention), delta = is_delta(c.attention);
  const bool mamba2 = c.attention == AttentionKind::mamba2, rwkv7 = c.attention == AttentionKind::rwkv7;
  const int64_t W = beta_width(c.attention, C, H);
  const int64_t sizes[] = {
      C, 1, 1, 3 * C, C, C, C, 1, 1, F, F, C, C, C, C, 1, 1, C, C, H, W, mamba2 || rwkv7 ? C : 0, rwkv7 ? C : 0, V};
  constexpr int kBuffers = int(std::size(sizes));
  int64_t total = 0;
  for (int64_t s : sizes) total += s * n;
  buffers_.assign(total, 0.0f);
  float* ptr[kBuffers];
  float* cursor = buffers_.data();
  for (int i = 0; i < kBuffers; ++i) {
    ptr[i] = cursor;
    cursor += sizes[i] * n;
  }
  detail::BlockActivations<float> a{ptr[0],
                                    ptr[1],
                                    ptr[2],
                                    ptr[3],
                                    ptr[4],
                                    ptr[5],
                                    ptr[6],
                                    ptr[7],
                                    ptr[8],
                                    ptr[9],
                                    ptr[10],
                                    ptr[11],
                                    ptr[12],
                                    gated ? ptr[17] : nullptr,
                                    normed ? ptr[18] : nullptr,
                                    normed ? ptr[19] : nullptr,
                                    W > 0 ? ptr[20] : nullptr,
                                    c.attention};
  float* residual = ptr[13];
  embedding_forward(residual, tokens, p.wte, 1, n, C, position_);
  std::vector<float> lse(H * n);
  for (int64_t l = 0; l < c.layers; ++l) {
    detail::block_forward(
        a, static_cast<const float*>(residual), p, l, n, C, F, H,
        [&](float* atty, const float* qkv, const float* gate, const float* beta) {
          // q, k, v of the n rows, strided inside qkv: [1, n, H, hd]
          const ConstTensorView q{qkv, {1, n, H, hd}, {n * 3 * C, 3 * C, hd, 1}};
          const ConstTensorView k{qkv + C, {1, n, H, hd}, {n * 3 * C, 3 * C, hd, 1}};
          const ConstTensorView v{qkv + 2 * C, {1, n, H, hd}, {n * 3 * C, 3 * C, hd, 1}};
          const TensorView out = bnhd(atty, 1, n, H, hd);
          if (c.attention == AttentionKind::softmax) {
            const int64_t keys = position_ + n;
            grow_cache(keys);
            // Cache layout [H, capacity, hd]: each head's keys are contiguous, for the decode's streaming reads.
            float* K = keys_[l].data();
            float* Vc = values_[l].data();
            const int64_t head_stride = capacity_ * hd;
            for (int64_t i = 0; i < n; ++i)
              for (int64_t h = 0; h < H; ++h) {
                const float* row = qkv + i * 3 * C + h * hd;
                std::copy(row + C, row + C + hd, K + h * head_stride + (position_ + i) * hd);
                std::copy(row + 2 * C, row + 2 * C + hd, Vc + h * head_stride + (position_ + i) * hd);
              }
            const ConstTensorView kc{K, {1, keys, H, hd}, {H * head_stride, hd, head_stride, 1}};
            const ConstTensorView vc{Vc, {1, keys, H, hd}, {H * head_stride, hd, head_stride, 1}};
            SoftmaxAttentionOptions options;
            options.causal = true;  // bottom-right: row i sees the cache and rows ≤ i
            // A few rows (one token per step) take the operator's decode path: O(keys·hd) per head.
            softmax_attention_forward(out, lse, q, kc, vc, options);
            return;
          }
          if (decayed) {
            // Every token, a prompt's too, steps the state: S ← diag(exp g) S + k vᵀ per head, constant
            // memory; g: [1, n, H, hd] (gla), none for retnet (its decay is fixed per head).
            const ConstTensorView g = gla ? ConstTensorView{gate, {1, n, H, hd}, {n * C, C, hd, 1}} : ConstTensorView{};
            decayed_step(out, q, k, v, g, states_[l], decayed_options(model_.attention(l)));
            return;
          }
          if (mamba2) {
            // S ← exp(g) S + k (dt · x)ᵀ per head, g = dt · A: the decayed step on the value dt · x; the block adds
            // D · x.
            mamba2_value(ptr[21], qkv, beta, n, C, H);
            const ConstTensorView g{gate, {1, n, H, 1}, {n * H, H, 1, 1}};
            decayed_step(out, q, k, bnhd(static_cast<const float*>(ptr[21]), 1, n, H, hd), g, states_[l],
                         mamba2_options(model_.attention(l)));
            return;
          }
          if (rwkv7) {
            // The DPLR step with a = −κ̂, b = κ̂ ⊙ ā of these tokens and gk per key dimension.
            rwkv7_removal(ptr[21], ptr[22], qkv, beta, n, C, H);
            dplr_delta_rule_step(out, q, k, v, bnhd(static_cast<const float*>(ptr[21]), 1, n, H, hd),
                                 bnhd(static_cast<const float*>(ptr[22]), 1, n, H, hd), bnhd(gate, 1, n, H, hd),
                                 states_[l], rwkv7_options());
            return;
          }
          if (delta) {
            // Every token, a prompt's too, steps the delta rule's state (constant memory): β: [1, n, H, 1];
            // g: [1, n, H, 1] (gated_deltanet), [1, n, H, hd] (kda), none for deltanet.
            const ConstTensorView b{beta, {1, n, H, 1}, {n * H, H, 1, 1}};
            ConstTensorView g;
            if (c.attention == AttentionKind::gated_deltanet) g = {gate, {1, n, H, 1}, {n * H, H, 1, 1}};
            if (c.attention == AttentionKind::kda) g = {gate, {1, n, H, hd}, {n * C, C, hd, 1}};
            delta_rule_step(out, q, k, v, b, g, states_[l], delta_options(model_.attention(l)));
            return;
          }
          LinearAttentionOptions options;
          options.feature_map = model_.attention(l).feature_map;
          options.causal = true;
          options.chunk_size = c.chunk_size;
          if (n == 1) {
            recurrent_step(out, q, k, v, states_[l], options);
          } else {
            RecurrentState next;
            causal_linear_attention_forward(out, q, k, v, options, &states_[l], &next);
            states_[l] = std::move(next);
          }
        });
    std::copy(a.residual3, a.residual3 + n * C, residual);
  }
  layernorm_forward(ptr[14], ptr[15], ptr[16], residual, p.lnfw, p.lnfb, n, C);
  matmul_forward(ptr[23], ptr[14], p.headw, p.headb, n, C, V);
  position_ += n;
}

int32_t sample_token(std::span<const float> logits, double temperature, double u) {
  if (temperature <= 0) return int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
  const float max = *std::max_element(logits.begin(), logits.end());
  std::vector<double> p(logits.size());
  double sum = 0;
  for (size_t i = 0; i < p.size(); ++i) sum += p[i] = std::exp(double(logits[i] - max) / temperature);
  double cumulative = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    cumulative += p[i] / sum;
    if (u < cumulative) return int32_t(i);
  }
  return int32_t(p.size() - 1);
}

}  // namespace linattn::model
