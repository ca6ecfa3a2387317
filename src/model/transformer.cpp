// The transformer's forward and backward over a batch, llm.c style.
#include "linattn/model/transformer.hpp"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <string>
#include <type_traits>

#include "linattn/error.hpp"
#include "linattn/random.hpp"
#include "model/block.hpp"

namespace linattn::model {

int64_t head_width(const ModelConfig& c) { return c.classes > 0 ? c.classes : c.vocab_size; }

int64_t linformer_layer_size(const ModelConfig& c) { return 2 * c.heads * c.linformer_length * c.max_seq_len; }

std::vector<ParamTensor> param_tensors(const ModelConfig& c) {
  const int64_t V = c.vocab_size, C = c.d_model, L = c.layers, F = c.mlp_hidden, H = c.heads;
  const int64_t G = gate_width(c.attention, C, H), O = head_width(c);
  const int64_t W =
      c.attention == AttentionKind::mamba2 ? 0 : beta_width(c.attention, C, H);  // mamba2: dt from the gate
  const bool decay_a = has_alog(c.attention), mamba2 = c.attention == AttentionKind::mamba2;
  const int64_t linproj = c.attention == AttentionKind::linformer ? L * linformer_layer_size(c) : 0;
  const std::pair<const char*, std::pair<int64_t, bool>> shapes[] = {{"wte", {V * C, true}},
                                                                     {"ln1w", {L * C, false}},
                                                                     {"ln1b", {L * C, false}},
                                                                     {"qkvw", {L * C * 3 * C, true}},
                                                                     {"qkvb", {L * 3 * C, false}},
                                                                     {"gatew", {L * C * G, true}},
                                                                     {"gateb", {L * G, false}},
                                                                     {"alog", {decay_a ? L * H : 0, false}},
                                                                     {"betaw", {L * C * W, true}},
                                                                     {"betab", {L * W, false}},
                                                                     {"dskip", {mamba2 ? L * H : 0, false}},
                                                                     {"linproj", {linproj, true}},
                                                                     {"attprojw", {L * C * C, true}},
                                                                     {"attprojb", {L * C, false}},
                                                                     {"ln2w", {L * C, false}},
                                                                     {"ln2b", {L * C, false}},
                                                                     {"fcw", {L * C * F, true}},
                                                                     {"fcb", {L * F, false}},
                                                                     {"fcprojw", {L * F * C, true}},
                                                                     {"fcprojb", {L * C, false}},
                                                                     {"lnfw", {C, false}},
                                                                     {"lnfb", {C, false}},
                                                                     {"headw", {C * O, true}},
                                                                     {"headb", {O, false}}};
  std::vector<ParamTensor> tensors;
  int64_t offset = 0;
  for (const auto& [name, shape] : shapes) {
    if (shape.first == 0) continue;  // the gate, alog and β of the kinds without them
    tensors.push_back({name, offset, shape.first, shape.second});
    offset += shape.first;
  }
  return tensors;
}

int64_t param_count(const ModelConfig& config) {
  const auto tensors = param_tensors(config);
  return tensors.back().offset + tensors.back().size;
}

template <class P>
ParamPointers<P> param_pointers(P* base, const ModelConfig& config) {
  ParamPointers<P> p{};
  P** slots[] = {&p.wte,   &p.ln1w,  &p.ln1b,    &p.qkvw,    &p.qkvb,     &p.gatew,    &p.gateb, &p.alog,
                 &p.betaw, &p.betab, &p.dskip,   &p.linproj, &p.attprojw, &p.attprojb, &p.ln2w,  &p.ln2b,
                 &p.fcw,   &p.fcb,   &p.fcprojw, &p.fcprojb, &p.lnfw,     &p.lnfb,     &p.headw, &p.headb};
  const char* names[] = {"wte",   "ln1w",  "ln1b",    "qkvw",    "qkvb",     "gatew",    "gateb", "alog",
                         "betaw", "betab", "dskip",   "linproj", "attprojw", "attprojb", "ln2w",  "ln2b",
                         "fcw",   "fcb",   "fcprojw", "fcprojb", "lnfw",     "lnfb",     "headw", "headb"};
  static_assert(std::size(slots) == std::size(names));
  for (const ParamTensor& t : param_tensors(config))
    for (size_t i = 0; i < std::size(names); ++i)
      if (t.name == names[i]) *slots[i] = base + t.offset;
  return p;
}
template ParamPointers<float> param_pointers(float*, const ModelConfig&);
template ParamPointers<const float> param_pointers(const float*, const ModelConfig&);
template ParamPointers<double> param_pointers(double*, const ModelConfig&);
template ParamPointers<const double> param_pointers(const double*, const ModelConfig&);

namespace {
// Layer l's slice of a per-layer buffer of `per_layer` elements each; null when the kind has none.
template <class T>
T* at_layer(std::vector<T>& buffer, int64_t l, int64_t per_layer) {
  return buffer.empty() ? nullptr : buffer.data() + l * per_layer;
}
template <class T>
const T* at_layer(const std::vector<T>& buffer, int64_t l, int64_t per_layer) {
  return buffer.empty() ? nullptr : buffer.data() + l * per_layer;
}
// Gated DeltaNet's (Mamba-2's) decay at initialisation, g = −A · softplus(dt_bias) = −A · dt: A from
// 1 to 16 over the heads (alog = log A) and dt from 0.001 to 0.1, log-spaced, over the G / H gate
// columns of each head's rows (over the heads for gated_deltanet, over the key dimensions for kda):
// memories from about a token to a thousand at the start. Deterministic, the same in every layer.
template <class T>
void init_delta_gate(T* p, const std::string& name, const ModelConfig& c) {
  const int64_t H = c.heads, G = gate_width(c.attention, c.d_model, H);
  auto spread = [](int64_t i, int64_t n, double lo, double hi) {  // log-spaced from lo to hi
    return n == 1 ? std::sqrt(lo * hi) : lo * std::pow(hi / lo, double(i) / double(n - 1));
  };
  if (name == "alog") {
    for (int64_t l = 0; l < c.layers; ++l)
      for (int64_t h = 0; h < H; ++h) p[l * H + h] = T(std::log(H == 1 ? 4.0 : 1.0 + 15.0 * double(h) / double(H - 1)));
  } else if (name == "gateb") {
    for (int64_t l = 0; l < c.layers; ++l)
      for (int64_t j = 0; j < G; ++j) {
        const double dt = G == H ? spread(j, H, 1e-3, 0.1) : spread(j % (G / H), G / H, 1e-3, 0.1);
        p[l * G + j] = T(dt + std::log(-std::expm1(-dt)));  // softplus⁻¹(dt)
      }
  }
}
}  // namespace

template <class T>
Transformer<T>::Transformer(const ModelConfig& config) : config_(config) {
  check_config(config);
  for (int64_t l = 0; l < config.layers; ++l)
    specs_.push_back({config.attention, config.heads, feature_map_for(config, l), config.chunk_size,
                      config.classes == 0, config.linformer_length, config.max_seq_len});
  params_.assign(param_count(config), T(0));
  grads_.assign(params_.size(), T(0));
  Random rng(splitmix64(config.init_seed));
  const double residual_scale = 1.0 / std::sqrt(2.0 * double(config.layers));
  for (const ParamTensor& t : param_tensors(config)) {
    T* p = params_.data() + t.offset;
    const bool norm_gain = t.name == "ln1w" || t.name == "ln2w" || t.name == "lnfw";
    // Embeddings start at unit scale, like the sinusoids they are added to.
    const double std =
        t.name == "wte" ? 1.0 : 0.02 * (t.name.find("projw") != std::string::npos ? residual_scale : 1.0);
    for (int64_t i = 0; i < t.size; ++i) p[i] = norm_gain ? T(1) : t.decay ? T(std * rng.normal_cosine()) : T(0);
    if (has_alog(config.attention)) init_delta_gate(p, t.name, config);
    if (t.name == "dskip") std::fill(p, p + t.size, T(1));  // Mamba-2's D starts at 1: the input passes
  }
}

template <class T>
AttentionSpec Transformer<T>::layer_spec(int64_t l) const {
  AttentionSpec spec = specs_[size_t(l)];
  spec.key_lengths = lengths_;
  return spec;
}

template <class T>
void Transformer<T>::zero_grad() {
  std::fill(grads_.begin(), grads_.end(), T(0));
}

// Per token, the buffers resize allocates below (keep the two in step).
int64_t activation_floats_per_token(const ModelConfig& config) {
  const int64_t C = config.d_model, L = config.layers, F = config.mlp_hidden, V = config.vocab_size, H = config.heads;
  const bool normed = has_head_norm(config.attention);
  const int64_t G = gate_width(config.attention, C, H), W = beta_width(config.attention, C, H);
  // Per layer: ln1, atty, residual2, ln2, residual3, qkv; the norms' statistics; lse; gate; attn,
  // head_rstd; beta; fch, fch_gelu.
  const int64_t per_layer = 8 * C + 4 + H + G + (normed ? C + H : 0) + W + 2 * F;
  // The step's single buffers: dattn, dgate, dbeta; lnf and its statistics; logits, probs, dlogits;
  // scratch, dres, dln, datty; dbig; dfch.
  const int64_t once = (normed ? C : 0) + G + W + C + 2 + 3 * V + 4 * C + std::max(F, 3 * C) + F;
  return C /* encoded */ + L * per_layer + once;
}

template <class T>
void Transformer<T>::resize(int64_t B, int64_t T_len) {
  if (B == B_ && T_len == T_) return;
  B_ = B;
  T_ = T_len;
  const int64_t BT = B * T_len, C = config_.d_model, L = config_.layers, F = config_.mlp_hidden, H = config_.heads;
  encoded_.assign(BT * C, 0);
  for (auto* v : {&ln1_, &atty_, &residual2_, &ln2_, &residual3_}) v->assign(L * BT * C, 0);
  for (auto* v : {&ln1_mean_, &ln1_rstd_, &ln2_mean_, &ln2_rstd_}) v->assign(L * BT, 0);
  qkv_.assign(L * BT * 3 * C, 0);
  lse_.assign(L * B * H * T_len, 0);
  const bool normed = has_head_norm(config_.attention);
  const int64_t G = gate_width(config_.attention, C, H), W = beta_width(config_.attention, C, H);
  gate_.assign(L * BT * G, 0);
  attn_.assign(normed ? L * BT * C : 0, 0);
  head_rstd_.assign(normed ? L * BT * H : 0, 0);
  beta_.assign(L * BT * W, 0);
  dattn_.assign(normed ? BT * C : 0, 0);
  dgate_.assign(BT * G, 0);
  dbeta_.assign(BT * W, 0);
  fch_.assign(L * BT * F, 0);
  fch_gelu_.assign(L * BT * F, 0);
  lnf_.assign(BT * C, 0);
  lnf_mean_.assign(BT, 0);
  lnf_rstd_.assign(BT, 0);
  // The classifier's head sees one pooled row per sequence: logits [B, classes].
  const int64_t rows = config_.classes > 0 ? B : BT, O = head_width(config_);
  logits_.assign(rows * O, 0);
  probs_.assign(rows * O, 0);
  dlogits_.assign(rows * O, 0);
  pooled_.assign(config_.classes > 0 ? B * C : 0, 0);
  dpooled_.assign(pooled_.size(), 0);
  scratch_.assign(BT * C, 0);
  for (auto* v : {&dres_, &dln_, &datty_}) v->assign(BT * C, 0);
  dbig_.assign(BT * std::max(F, 3 * C), 0);
  dfch_.assign(BT * F, 0);
}

template <class T>
T Transformer<T>::forward(const int32_t* tokens, const int32_t* targets, const T* weights, int64_t B, int64_t T_len) {
  if (B < 1 || T_len < 1)
    throw Error("linattn::model: batch is " + std::to_string(B) + " x " + std::to_string(T_len) +
                " tokens, expected at least 1 x 1");
  check_tokens("tokens", tokens, B * T_len, config_.vocab_size);
  const bool classifier = config_.classes > 0;
  if (classifier) require_single_process(*parallel_, "the encoder classifier");
  if (targets && classifier) check_tokens("labels", targets, B, config_.classes);
  if (targets && !classifier) check_tokens("targets", targets, B * T_len, config_.vocab_size);
  resize(B, T_len);
  const int64_t BT = B * T_len, C = config_.d_model, L = config_.layers, F = config_.mlp_hidden, V = config_.vocab_size,
                H = config_.heads;
  tokens_.assign(tokens, tokens + BT);
  has_targets_ = targets != nullptr;
  if (has_targets_) targets_.assign(targets, targets + (classifier ? B : BT));
  if (weights)
    weights_.assign(weights, weights + BT);
  else
    weights_.clear();
  lengths_.clear();
  if (classifier && weights)
    for (int64_t b = 0; b < B; ++b) {  // the real tokens end at the last one with weight; the rest is padding
      int64_t n = T_len;
      while (n > 0 && weights[b * T_len + n - 1] == 0) --n;
      lengths_.push_back(n);
    }
  const ParamPointers<const T> p = param_pointers<const T>(params_.data(), config_);
  const int64_t G = gate_width(config_.attention, C, H), W = beta_width(config_.attention, C, H);

  embedding_forward(encoded_.data(), tokens, p.wte, B, T_len, C, position0_);
  const T* residual = encoded_.data();
  for (int64_t l = 0; l < L; ++l) {
    const detail::BlockActivations<T> a{ln1_.data() + l * BT * C,
                                        ln1_mean_.data() + l * BT,
                                        ln1_rstd_.data() + l * BT,
                                        qkv_.data() + l * BT * 3 * C,
                                        atty_.data() + l * BT * C,
                                        residual2_.data() + l * BT * C,
                                        ln2_.data() + l * BT * C,
                                        ln2_mean_.data() + l * BT,
                                        ln2_rstd_.data() + l * BT,
                                        fch_.data() + l * BT * F,
                                        fch_gelu_.data() + l * BT * F,
                                        residual3_.data() + l * BT * C,
                                        scratch_.data(),
                                        at_layer(gate_, l, BT * G),
                                        at_layer(attn_, l, BT * C),
                                        at_layer(head_rstd_, l, BT * H),
                                        at_layer(beta_, l, BT * W),
                                        config_.attention};
    T* lse = lse_.data() + l * B * H * T_len;
    const T* projections = p.linproj ? p.linproj + l * linformer_layer_size(config_) : nullptr;
    detail::block_forward(a, residual, p, l, BT, C, F, H, [&](T* out, const T* qkv, const T* gate, const T* beta) {
      attention_forward(out, lse, qkv, layer_spec(l), B, T_len, C, projections ? projections : gate, beta, *parallel_);
    });
    residual = a.residual3;
  }
  layernorm_forward(lnf_.data(), lnf_mean_.data(), lnf_rstd_.data(), residual, p.lnfw, p.lnfb, BT, C);
  if (classifier) {
    // One row per sequence: the mean of its real tokens (weights), then the head to the classes.
    const int64_t O = config_.classes;
    mean_pool_forward(pooled_.data(), lnf_.data(), weights, B, T_len, C);
    matmul_forward(logits_.data(), pooled_.data(), p.headw, p.headb, B, C, O);
    return has_targets_
               ? cross_entropy_forward(probs_.data(), logits_.data(), targets, static_cast<const T*>(nullptr), B, O)
               : T(0);
  }
  matmul_forward(logits_.data(), lnf_.data(), p.headw, p.headb, BT, C, V);
  if (!has_targets_) return T(0);
  loss_total_ = 0;
  if (parallel_ == &single_process())
    return cross_entropy_forward(probs_.data(), logits_.data(), targets, weights, BT, V);
  // The whole sequence's loss: Σ w · (−log p) and Σ w, each summed over the ranks' shards.
  double sums[2] = {double(cross_entropy_forward(probs_.data(), logits_.data(), targets, weights, BT, V, 1.0)), 0};
  for (int64_t i = 0; i < BT; ++i) sums[1] += weights ? double(weights[i]) : 1.0;
  parallel_->sum(sums);
  loss_total_ = sums[1];
  return sums[1] > 0 ? T(sums[0] / sums[1]) : T(0);
}

template <class T>
void Transformer<T>::set_sequence_parallel(const SequenceParallel& parallel, int64_t position0) {
  if constexpr (!std::is_same_v<T, float>) require_single_process(parallel, "Transformer<double>");
  if (position0 < 0) throw Error("linattn::model: position0 is " + std::to_string(position0) + ", expected ≥ 0");
  parallel_ = &parallel;
  position0_ = position0;
}

template <class T>
void Transformer<T>::backward() {
  if (!has_targets_) throw std::logic_error("linattn::model::Transformer::backward: the last forward had no targets");
  const int64_t B = B_, T_len = T_, BT = B * T_len, C = config_.d_model, L = config_.layers, F = config_.mlp_hidden,
                V = config_.vocab_size, H = config_.heads, G = gate_width(config_.attention, C, H),
                W = beta_width(config_.attention, C, H);
  const bool mamba2 = config_.attention == AttentionKind::mamba2;
  const ParamPointers<const T> p = param_pointers<const T>(params_.data(), config_);
  const ParamPointers<T> g = param_pointers<T>(grads_.data(), config_);
  // Gradient buffers kept between steps (no allocation per step); dres accumulates, so it starts at 0.
  std::vector<T>&dlogits = dlogits_, &dres = dres_, &dln = dln_, &dbig = dbig_, &dfch = dfch_, &datty = datty_;
  std::fill(dres.begin(), dres.end(), T(0));

  const T* weights = weights_.empty() ? nullptr : weights_.data();
  if (config_.classes > 0) {
    const int64_t O = config_.classes;
    cross_entropy_backward(dlogits.data(), probs_.data(), targets_.data(), static_cast<const T*>(nullptr), B, O);
    matmul_backward(dpooled_.data(), g.headw, g.headb, dlogits.data(), pooled_.data(), p.headw, B, C, O);
    mean_pool_backward(dln.data(), dpooled_.data(), weights, B, T_len, C);
  } else {
    cross_entropy_backward(dlogits.data(), probs_.data(), targets_.data(), weights, BT, V, loss_total_);
    matmul_backward(dln.data(), g.headw, g.headb, dlogits.data(), lnf_.data(), p.headw, BT, C, V);
  }
  const T* last = L > 0 ? residual3_.data() + (L - 1) * BT * C : encoded_.data();
  layernorm_backward(dres.data(), g.lnfw, g.lnfb, dln.data(), last, p.lnfw, lnf_mean_.data(), lnf_rstd_.data(), BT, C);
  for (int64_t l = L - 1; l >= 0; --l) {
    const T* residual = l == 0 ? encoded_.data() : residual3_.data() + (l - 1) * BT * C;
    const T* ln1 = ln1_.data() + l * BT * C;
    const T* qkv = qkv_.data() + l * BT * 3 * C;
    const T* atty = atty_.data() + l * BT * C;
    const T* residual2 = residual2_.data() + l * BT * C;
    const T* ln2 = ln2_.data() + l * BT * C;
    const T* fch = fch_.data() + l * BT * F;
    const T* fch_gelu = fch_gelu_.data() + l * BT * F;
    // residual3 = residual2 + fcproj(gelu(fc(ln2(residual2)))): dres flows to both
    matmul_backward(dbig.data(), g.fcprojw + l * F * C, g.fcprojb + l * C, dres.data(), fch_gelu, p.fcprojw + l * F * C,
                    BT, F, C);
    gelu_backward(dfch.data(), dbig.data(), fch, BT * F);
    matmul_backward(dln.data(), g.fcw + l * C * F, g.fcb + l * F, dfch.data(), ln2, p.fcw + l * C * F, BT, C, F);
    layernorm_backward(dres.data(), g.ln2w + l * C, g.ln2b + l * C, dln.data(), residual2, p.ln2w + l * C,
                       ln2_mean_.data() + l * BT, ln2_rstd_.data() + l * BT, BT, C);
    // residual2 = residual + attproj(attention(qkv(ln1(residual)))); the decayed and delta kinds:
    // attention = head_norm(decayed(q, k, v, g)) or head_norm(delta(q, k, v, β, g)), with g =
    // gate(ln1(residual)) and β = sigmoid(ln1(residual) · betaw + betab) for the kinds that have them
    matmul_backward(datty.data(), g.attprojw + l * C * C, g.attprojb + l * C, dres.data(), atty, p.attprojw + l * C * C,
                    BT, C, C);
    const T* lse = lse_.data() + l * B * H * T_len;
    const T* gate = at_layer(gate_, l, BT * G);
    const T* beta = at_layer(beta_, l, BT * W);
    if (has_head_norm(config_.attention)) {
      head_norm_backward(dattn_.data(), datty.data(), atty, at_layer(head_rstd_, l, BT * H), BT * H, C / H);
      attention_backward(dbig.data(), dattn_.data(), qkv, at_layer(attn_, l, BT * C), lse, layer_spec(l), B, T_len, C,
                         gate, gate ? dgate_.data() : nullptr, beta, beta ? dbeta_.data() : nullptr, *parallel_);
      // mamba2: attention + D · x, x the v part of qkv
      if (mamba2) mamba2_skip_backward(dbig.data(), g.dskip + l * H, dattn_.data(), qkv, p.dskip + l * H, BT, C, H);
    } else {
      // linformer's E and F take the gate's place; their gradient goes straight to the weights' (each
      // layer's projections are used once per forward, so it is written, not added).
      const int64_t P = p.linproj ? linformer_layer_size(config_) : 0;
      attention_backward<T>(dbig.data(), datty.data(), qkv, atty, lse, layer_spec(l), B, T_len, C,
                            P ? p.linproj + l * P : nullptr, P ? g.linproj + l * P : nullptr, nullptr, nullptr,
                            *parallel_);
    }
    matmul_backward(dln.data(), g.qkvw + l * C * 3 * C, g.qkvb + l * 3 * C, dbig.data(), ln1, p.qkvw + l * C * 3 * C,
                    BT, C, 3 * C);
    if (gate) {
      // gla: g = logsigmoid(ln1 · gatew + gateb) / 16; gated_deltanet, kda, mamba2, rwkv7: g = −exp(alog) ·
      // softplus(ln1 · gatew + gateb). Its input gradient joins dln (datty is free by now).
      if (config_.attention == AttentionKind::gla)
        log_sigmoid_gate_backward(dgate_.data(), dgate_.data(), gate, BT * C);
      else
        delta_gate_backward(dgate_.data(), g.alog + l * H, dgate_.data(), gate, p.alog + l * H, BT, H, G / H);
      // mamba2's dt = softplus of the same pre-activation: its share joins g's
      if (mamba2) mamba2_dt_backward(dgate_.data(), static_cast<const T*>(dbeta_.data()), beta, BT * H);
      matmul_backward(datty.data(), g.gatew + l * C * G, g.gateb + l * G, dgate_.data(), ln1, p.gatew + l * C * G, BT,
                      C, G);
      for (int64_t i = 0; i < BT * C; ++i) dln[i] += datty[i];
    }
    if (beta && !mamba2) {
      // β = sigmoid(ln1 · betaw + betab) (rwkv7: ā, one per channel)
      delta_beta_backward(dbeta_.data(), dbeta_.data(), beta, BT * W);
      matmul_backward(datty.data(), g.betaw + l * C * W, g.betab + l * W, dbeta_.data(), ln1, p.betaw + l * C * W, BT,
                      C, W);
      for (int64_t i = 0; i < BT * C; ++i) dln[i] += datty[i];
    }
    layernorm_backward(dres.data(), g.ln1w + l * C, g.ln1b + l * C, dln.data(), residual, p.ln1w + l * C,
                       ln1_mean_.data() + l * BT, ln1_rstd_.data() + l * BT, BT, C);
  }
  embedding_backward(g.wte, dres.data(), tokens_.data(), B, T_len, C);
}

template class Transformer<float>;
template class Transformer<double>;

}  // namespace linattn::model
