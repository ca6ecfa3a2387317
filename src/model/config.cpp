// ModelConfig: names, checks, the feature map of each layer, and its text form.
#include "linattn/model/config.hpp"

#include <string>

#include "linattn/error.hpp"
#include "linattn/limits.hpp"
#include "model/key_values.hpp"
#include "model/printable.hpp"
#if __has_include("linattn/performer.hpp")
#include "linattn/performer.hpp"
#define LINATTN_MODEL_HAS_FAVOR 1
#endif

namespace linattn::model {

const char* attention_name(AttentionKind kind) {
  switch (kind) {
    case AttentionKind::softmax:
      return "softmax";
    case AttentionKind::linear:
      return "linear";
    case AttentionKind::favor:
      return "favor";
    case AttentionKind::retnet:
      return "retnet";
    case AttentionKind::gla:
      return "gla";
    case AttentionKind::deltanet:
      return "deltanet";
    case AttentionKind::gated_deltanet:
      return "gated_deltanet";
    case AttentionKind::kda:
      return "kda";
    case AttentionKind::linformer:
      return "linformer";
    case AttentionKind::mamba2:
      return "mamba2";
    case AttentionKind::rwkv7:
      return "rwkv7";
  }
  return "?";
}

AttentionKind attention_by_name(std::string_view name) {
  for (AttentionKind kind : {AttentionKind::softmax, AttentionKind::linear, AttentionKind::favor, AttentionKind::retnet,
                             AttentionKind::gla, AttentionKind::deltanet, AttentionKind::gated_deltanet,
                             AttentionKind::kda, AttentionKind::linformer, AttentionKind::mamba2, AttentionKind::rwkv7})
    if (name == attention_name(kind)) return kind;
  throw Error("linattn::model: attention is \"" + detail::printable(name) +
              "\", expected one of \"softmax\", \"linear\", \"favor\", \"retnet\", \"gla\", \"deltanet\", "
              "\"gated_deltanet\", \"kda\", \"linformer\", \"mamba2\", \"rwkv7\"");
}

bool is_decayed(AttentionKind kind) { return kind == AttentionKind::retnet || kind == AttentionKind::gla; }

Decay decay_of(AttentionKind kind) {
  if (kind == AttentionKind::retnet) return Decay::retention;
  if (kind == AttentionKind::gla) return Decay::key;
  throw Error(std::string("linattn::model: attention is \"") + attention_name(kind) +
              "\", expected a decayed kind (\"retnet\" or \"gla\")");
}

bool is_delta(AttentionKind kind) {
  return kind == AttentionKind::deltanet || kind == AttentionKind::gated_deltanet || kind == AttentionKind::kda;
}

DeltaGate delta_gate_of(AttentionKind kind) {
  if (kind == AttentionKind::deltanet) return DeltaGate::none;
  if (kind == AttentionKind::gated_deltanet) return DeltaGate::token;
  if (kind == AttentionKind::kda) return DeltaGate::key;
  throw Error(std::string("linattn::model: attention is \"") + attention_name(kind) +
              "\", expected a delta kind (\"deltanet\", \"gated_deltanet\" or \"kda\")");
}

bool has_head_norm(AttentionKind kind) {
  return is_decayed(kind) || is_delta(kind) || kind == AttentionKind::mamba2 || kind == AttentionKind::rwkv7;
}

int64_t gate_width(AttentionKind kind, int64_t d_model, int64_t heads) {
  if (kind == AttentionKind::gla || kind == AttentionKind::kda || kind == AttentionKind::rwkv7) return d_model;
  if (kind == AttentionKind::gated_deltanet || kind == AttentionKind::mamba2) return heads;
  return 0;
}

bool has_alog(AttentionKind kind) { return gate_width(kind, 1, 1) > 0 && kind != AttentionKind::gla; }

int64_t beta_width(AttentionKind kind, int64_t d_model, int64_t heads) {
  if (is_delta(kind) || kind == AttentionKind::mamba2) return heads;
  if (kind == AttentionKind::rwkv7) return d_model;
  return 0;
}

void check_config(const ModelConfig& c) {
  auto positive = [](const char* name, int64_t value) {
    if (value < 1)
      throw Error(std::string("linattn::model: ") + name + " is " + std::to_string(value) + ", expected ≥ 1");
  };
  positive("vocab_size", c.vocab_size);
  positive("d_model", c.d_model);
  positive("layers", c.layers);
  positive("heads", c.heads);
  positive("mlp_hidden", c.mlp_hidden);
  positive("favor_features", c.favor_features);
  positive("chunk_size", c.chunk_size);
  check_bounded("linattn::model", "classes", c.classes, 0, 1 << 16, "0: the decoder");
  if (c.d_model % c.heads != 0)
    throw Error("linattn::model: d_model is " + std::to_string(c.d_model) + ", expected a multiple of heads (" +
                std::to_string(c.heads) + ")");
  // Bounded before anything is allocated: a 2.9 KB model file with favor_features = 16384 asked for a
  // gigabyte of chunk scratch (quadratic in M).
  check_bounded("linattn::model", "favor_features", c.favor_features, 1, limits::kMaxFavorFeatures);
  // The decayed and delta kinds' chunk scratch is quadratic in it: their operators' bound, checked here so
  // that a model file or checkpoint saying more is refused on load, not at its first forward.
  const int64_t max_chunk = is_decayed(c.attention) || c.attention == AttentionKind::mamba2 ? limits::kMaxDecayChunkSize
                            : is_delta(c.attention)                                         ? limits::kMaxDeltaChunkSize
                                                                                            : limits::kMaxChunkSize;
  check_bounded("linattn::model", "chunk_size", c.chunk_size, 1, max_chunk);
  if ((c.attention == AttentionKind::mamba2 || c.attention == AttentionKind::rwkv7) && c.classes > 0)
    throw Error(std::string("linattn::model: attention ") + attention_name(c.attention) +
                " is the decoder's only (classes 0), got the encoder classifier (classes " + std::to_string(c.classes) +
                "): train it on a next-token task, or pick retnet, gla or a delta kind, which run in both directions");
  if (c.attention == AttentionKind::linformer) {
    if (c.classes == 0)
      throw Error(
          "linattn::model: attention linformer needs the encoder classifier (classes > 0): each projected "
          "key mixes every position of the sequence, later ones included, so the decoder's causal mask "
          "cannot apply");
    check_bounded("linattn::model", "linformer_length", c.linformer_length, 1, 4096);
    check_bounded("linattn::model", "max_seq_len", c.max_seq_len, 1, limits::kMaxSeqLen);
    // E and F of every layer and head: bounded before the weights are allocated.
    check_bounded("linattn::model", "layers × heads × linformer_length × max_seq_len",
                  c.layers * c.heads * c.linformer_length * c.max_seq_len, 1, int64_t(1) << 28, "projection weights");
  }
  if (c.vocab_size > (int64_t(1) << 24) || c.d_model > 65536 || c.layers > 1024 || c.mlp_hidden > (int64_t(1) << 20))
    throw Error("linattn::model: config sizes are implausibly large (vocab_size " + std::to_string(c.vocab_size) +
                ", d_model " + std::to_string(c.d_model) + ", layers " + std::to_string(c.layers) +
                "), expected a small model");
}

void check_tokens(const char* what, const int32_t* tokens, int64_t n, int64_t vocab_size) {
  for (int64_t i = 0; i < n; ++i)
    if (tokens[i] < 0 || tokens[i] >= vocab_size)
      throw Error(std::string("linattn::model: ") + what + "[" + std::to_string(i) + "] is " +
                  std::to_string(tokens[i]) + ", expected a token in [0, " + std::to_string(vocab_size) + ")");
}

namespace {
FeatureMapPtr favor_map(int64_t head_dim, int64_t features, uint64_t seed) {
#ifdef LINATTN_MODEL_HAS_FAVOR
  FavorOptions options;
  options.n_features = features;
  options.seed = seed;
  return favor_feature_map(head_dim, options);
#else
  (void)head_dim, (void)features, (void)seed;
  throw Error("linattn::model: attention is \"favor\", expected a build with linattn/performer.hpp");
#endif
}
}  // namespace

FeatureMapPtr feature_map_for(const ModelConfig& config, int64_t layer) {
  switch (config.attention) {
    case AttentionKind::softmax:
    case AttentionKind::retnet:
    case AttentionKind::gla:
    case AttentionKind::deltanet:
    case AttentionKind::gated_deltanet:
    case AttentionKind::kda:
    case AttentionKind::linformer:
    case AttentionKind::mamba2:
    case AttentionKind::rwkv7:
      return nullptr;
    case AttentionKind::linear:
      return elu_feature_map();
    case AttentionKind::favor:
      return favor_map(config.head_dim(), config.favor_features, config.favor_seed + uint64_t(layer));
  }
  return nullptr;
}

namespace {
// Every config key but attention (an enum, written by name).
constexpr detail::Field<ModelConfig> kConfigFields[] = {
    {"vocab_size", &ModelConfig::vocab_size}, {"d_model", &ModelConfig::d_model},
    {"layers", &ModelConfig::layers},         {"heads", &ModelConfig::heads},
    {"mlp_hidden", &ModelConfig::mlp_hidden}, {"favor_features", &ModelConfig::favor_features},
    {"favor_seed", &ModelConfig::favor_seed}, {"chunk_size", &ModelConfig::chunk_size},
    {"init_seed", &ModelConfig::init_seed}};
}  // namespace

std::string config_to_text(const ModelConfig& c) {
  detail::KeyValues kv;
  detail::write_fields<ModelConfig>(kv, c, kConfigFields);
  kv.set("attention", attention_name(c.attention));
  if (c.classes > 0) kv.set("classes", c.classes);  // the decoder's files keep the keys they always had
  if (c.attention == AttentionKind::linformer) {
    kv.set("linformer_length", c.linformer_length);
    kv.set("max_seq_len", c.max_seq_len);
  }
  return kv.text();
}

ModelConfig config_from_text(std::string_view text) {
  const detail::KeyValues kv(text, "model config");
  ModelConfig c;
  detail::read_fields<ModelConfig>(kv, c, kConfigFields);
  c.attention = attention_by_name(kv.get_string("attention"));
  if (kv.has("classes")) c.classes = kv.get_int("classes");
  if (c.attention == AttentionKind::linformer) {
    c.linformer_length = kv.get_int("linformer_length");
    c.max_seq_len = kv.get_int("max_seq_len");
  }
  kv.check_all_read();
  check_config(c);
  return c;
}

}  // namespace linattn::model
