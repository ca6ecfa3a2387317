// The transformer's forward and backward over a batch, llm.c style.
#include "linattn/model/transformer.hpp"

#include <algorithm>
#include <cmath>
#include <iterator>

#include "linattn/error.hpp"
#include "linattn/random.hpp"
#include "model/block.hpp"

namespace linattn::model {

std::vector<ParamTensor> param_tensors(const ModelConfig& c) {
  const int64_t V = c.vocab_size, C = c.d_model, L = c.layers, F = c.mlp_hidden;
  const bool gla = c.attention == AttentionKind::gla;
  const std::pair<const char*, std::pair<int64_t, bool>> shapes[] = {{"wte", {V * C, true}},
                                                                     {"ln1w", {L * C, false}},
                                                                     {"ln1b", {L * C, false}},
                                                                     {"qkvw", {L * C * 3 * C, true}},
                                                                     {"qkvb", {L * 3 * C, false}},
                                                                     {"gatew", {gla ? L * C * C : 0, true}},
                                                                     {"gateb", {gla ? L * C : 0, false}},
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
                                                                     {"headw", {C * V, true}},
                                                                     {"headb", {V, false}}};
  std::vector<ParamTensor> tensors;
  int64_t offset = 0;
  for (const auto& [name, shape] : shapes) {
    if (shape.first == 0) continue;  // the gate of the kinds without one
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
  P** slots[] = {&p.wte,      &p.ln1w,     &p.ln1b, &p.qkvw,  &p.qkvb, &p.gatew, &p.gateb,
                 &p.attprojw, &p.attprojb, &p.ln2w, &p.ln2b,  &p.fcw,  &p.fcb,   &p.fcprojw,
                 &p.fcprojb,  &p.lnfw,     &p.lnfb, &p.headw, &p.headb};
  const char* names[] = {"wte",  "ln1w", "ln1b", "qkvw",    "qkvb",    "gatew", "gateb", "attprojw", "attprojb", "ln2w",
                         "ln2b", "fcw",  "fcb",  "fcprojw", "fcprojb", "lnfw",  "lnfb",  "headw",    "headb"};
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
}  // namespace

template <class T>
Transformer<T>::Transformer(const ModelConfig& config) : config_(config) {
  check_config(config);
  for (int64_t l = 0; l < config.layers; ++l)
    specs_.push_back({config.attention, config.heads, feature_map_for(config, l), config.chunk_size});
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
  }
}

template <class T>
void Transformer<T>::zero_grad() {
  std::fill(grads_.begin(), grads_.end(), T(0));
}

template <class T>
void Transformer<T>::resize(int64_t B, int64_t T_len) {
  if (B == B_ && T_len == T_) return;
  B_ = B;
  T_ = T_len;
  const int64_t BT = B * T_len, C = config_.d_model, L = config_.layers, F = config_.mlp_hidden, V = config_.vocab_size,
                H = config_.heads;
  encoded_.assign(BT * C, 0);
  for (auto* v : {&ln1_, &atty_, &residual2_, &ln2_, &residual3_}) v->assign(L * BT * C, 0);
  for (auto* v : {&ln1_mean_, &ln1_rstd_, &ln2_mean_, &ln2_rstd_}) v->assign(L * BT, 0);
  qkv_.assign(L * BT * 3 * C, 0);
  lse_.assign(L * B * H * T_len, 0);
  const bool decayed = is_decayed(config_.attention);
  gate_.assign(config_.attention == AttentionKind::gla ? L * BT * C : 0, 0);
  attn_.assign(decayed ? L * BT * C : 0, 0);
  head_rstd_.assign(decayed ? L * BT * H : 0, 0);
  dattn_.assign(decayed ? BT * C : 0, 0);
  dgate_.assign(config_.attention == AttentionKind::gla ? BT * C : 0, 0);
  fch_.assign(L * BT * F, 0);
  fch_gelu_.assign(L * BT * F, 0);
  lnf_.assign(BT * C, 0);
  lnf_mean_.assign(BT, 0);
  lnf_rstd_.assign(BT, 0);
  logits_.assign(BT * V, 0);
  probs_.assign(BT * V, 0);
  scratch_.assign(BT * C, 0);
  dlogits_.assign(BT * V, 0);
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
  if (targets) check_tokens("targets", targets, B * T_len, config_.vocab_size);
  resize(B, T_len);
  const int64_t BT = B * T_len, C = config_.d_model, L = config_.layers, F = config_.mlp_hidden, V = config_.vocab_size,
                H = config_.heads;
  tokens_.assign(tokens, tokens + BT);
  has_targets_ = targets != nullptr;
  if (has_targets_) targets_.assign(targets, targets + BT);
  if (weights)
    weights_.assign(weights, weights + BT);
  else
    weights_.clear();
  const ParamPointers<const T> p = param_pointers<const T>(params_.data(), config_);

  embedding_forward(encoded_.data(), tokens, p.wte, B, T_len, C);
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
                                        at_layer(gate_, l, BT * C),
                                        at_layer(attn_, l, BT * C),
                                        at_layer(head_rstd_, l, BT * H)};
    T* lse = lse_.data() + l * B * H * T_len;
    detail::block_forward(a, residual, p, l, BT, C, F, H, [&](T* out, const T* qkv, const T* gate) {
      attention_forward(out, lse, qkv, specs_[l], B, T_len, C, gate);
    });
    residual = a.residual3;
  }
  layernorm_forward(lnf_.data(), lnf_mean_.data(), lnf_rstd_.data(), residual, p.lnfw, p.lnfb, BT, C);
  matmul_forward(logits_.data(), lnf_.data(), p.headw, p.headb, BT, C, V);
  if (!has_targets_) return T(0);
  return cross_entropy_forward(probs_.data(), logits_.data(), targets, weights, BT, V);
}

template <class T>
void Transformer<T>::backward() {
  if (!has_targets_) throw std::logic_error("linattn::model::Transformer::backward: the last forward had no targets");
  const int64_t B = B_, T_len = T_, BT = B * T_len, C = config_.d_model, L = config_.layers, F = config_.mlp_hidden,
                V = config_.vocab_size, H = config_.heads;
  const ParamPointers<const T> p = param_pointers<const T>(params_.data(), config_);
  const ParamPointers<T> g = param_pointers<T>(grads_.data(), config_);
  // Gradient buffers kept between steps (no allocation per step); dres accumulates, so it starts at 0.
  std::vector<T>&dlogits = dlogits_, &dres = dres_, &dln = dln_, &dbig = dbig_, &dfch = dfch_, &datty = datty_;
  std::fill(dres.begin(), dres.end(), T(0));

  cross_entropy_backward(dlogits.data(), probs_.data(), targets_.data(), weights_.empty() ? nullptr : weights_.data(),
                         BT, V);
  matmul_backward(dln.data(), g.headw, g.headb, dlogits.data(), lnf_.data(), p.headw, BT, C, V);
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
    // residual2 = residual + attproj(attention(qkv(ln1(residual)))); retnet, gla: attention =
    // head_norm(decayed(q, k, v, g)), g = gate(ln1(residual)) for gla
    matmul_backward(datty.data(), g.attprojw + l * C * C, g.attprojb + l * C, dres.data(), atty, p.attprojw + l * C * C,
                    BT, C, C);
    const T* lse = lse_.data() + l * B * H * T_len;
    if (is_decayed(config_.attention)) {
      const T* gate = at_layer(gate_, l, BT * C);
      head_norm_backward(dattn_.data(), datty.data(), atty, at_layer(head_rstd_, l, BT * H), BT * H, C / H);
      attention_backward(dbig.data(), dattn_.data(), qkv, at_layer(attn_, l, BT * C), lse, specs_[l], B, T_len, C, gate,
                         gate ? dgate_.data() : nullptr);
    } else {
      attention_backward(dbig.data(), datty.data(), qkv, atty, lse, specs_[l], B, T_len, C);
    }
    matmul_backward(dln.data(), g.qkvw + l * C * 3 * C, g.qkvb + l * 3 * C, dbig.data(), ln1, p.qkvw + l * C * 3 * C,
                    BT, C, 3 * C);
    if (config_.attention == AttentionKind::gla) {
      // g = logsigmoid(ln1 · gatew + gateb) / 16: its input gradient joins dln (datty is free by now)
      log_sigmoid_gate_backward(dgate_.data(), dgate_.data(), at_layer(gate_, l, BT * C), BT * C);
      matmul_backward(datty.data(), g.gatew + l * C * C, g.gateb + l * C, dgate_.data(), ln1, p.gatew + l * C * C, BT,
                      C, C);
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
