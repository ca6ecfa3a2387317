// Model files and checkpoints: round trips, and every way a file can be wrong gets a clear error.
#include "linattn/model/model_file.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "io/bytes.hpp"
#include "linattn/error.hpp"
#include "linattn/file_io.hpp"
#include "linattn/model/data.hpp"
#include "linattn/model/transformer.hpp"
#include "support/file_bytes.hpp"

namespace linattn::model {
namespace {

ModelFile sample_file(bool checkpoint) {
  ModelFile f;
  f.config.vocab_size = 5;
  f.config.d_model = 8;
  f.config.heads = 2;
  f.config.layers = 1;
  f.config.mlp_hidden = 12;
  f.config.attention = AttentionKind::favor;
  f.config.favor_seed = 99;
  f.vocab = "abcde";
  f.params.resize(param_count(f.config));
  for (size_t i = 0; i < f.params.size(); ++i) f.params[i] = float(i) * 0.25f - 3.0f;
  f.checkpoint = checkpoint;
  if (checkpoint) {
    f.train_options = "task=copy\n";
    f.step = 42;
    f.adam_m.assign(f.params.size(), 0.5f);
    f.adam_v.assign(f.params.size(), 1e-9f);
  }
  return f;
}

using testing::with_crc;

// The error message parse_model_file gives for bytes, or "" when it accepts them.
std::string parse_error(const std::string& bytes) {
  return testing::error_of([](const std::string& b) { parse_model_file(b, "test.model"); }, bytes);
}

TEST(ModelFile, RoundTripsModelAndCheckpoint) {
  for (bool checkpoint : {false, true}) {
    const ModelFile f = sample_file(checkpoint);
    const ModelFile back = parse_model_file(serialize_model_file(f));
    EXPECT_EQ(config_to_text(back.config), config_to_text(f.config));
    EXPECT_EQ(back.config.attention, AttentionKind::favor);
    EXPECT_EQ(back.config.favor_seed, 99u);
    EXPECT_EQ(back.vocab, f.vocab);
    EXPECT_EQ(back.params, f.params);
    EXPECT_EQ(back.checkpoint, checkpoint);
    EXPECT_EQ(back.train_options, f.train_options);
    EXPECT_EQ(back.step, f.step);
    EXPECT_EQ(back.adam_m, f.adam_m);
    EXPECT_EQ(back.adam_v, f.adam_v);
  }
}

TEST(ModelFile, SaveAndLoadThroughDisk) {
  const auto path = std::filesystem::temp_directory_path() / ("linattn_model_file_" + std::to_string(::getpid()));
  const ModelFile f = sample_file(true);
  save_model_file(path, f);
  EXPECT_EQ(load_model_file(path).params, f.params);
  std::filesystem::remove(path);
  EXPECT_THROW(load_model_file(path), Error);  // missing
}

TEST(ModelFile, CorruptFilesAreRejected) {
  const std::string good = serialize_model_file(sample_file(true));
  ASSERT_EQ(parse_error(good), "");

  std::string flipped = good;
  flipped[good.size() / 2] ^= 0x10;
  EXPECT_NE(parse_error(flipped).find("CRC-32"), std::string::npos) << parse_error(flipped);

  for (size_t keep : {size_t(0), size_t(5), size_t(19), good.size() / 2, good.size() - 1}) {
    const std::string message = parse_error(good.substr(0, keep));
    EXPECT_NE(message, "") << keep;
    EXPECT_NE(message.find("test.model"), std::string::npos) << message;
  }

  std::string magic = good;
  magic[0] = 'X';
  EXPECT_NE(parse_error(magic).find("magic"), std::string::npos);

  std::string version = good;
  version[8] = 2;
  EXPECT_NE(parse_error(with_crc(version)).find("format version is 2, expected 1"), std::string::npos);

  std::string kind = good;
  kind[12] = 7;
  EXPECT_NE(parse_error(with_crc(kind)).find("kind is 7"), std::string::npos);

  std::string extra = good;
  extra.insert(extra.size() - 4, "zz");
  EXPECT_NE(parse_error(with_crc(extra)).find("unexpected bytes"), std::string::npos) << parse_error(with_crc(extra));
}

TEST(ModelFile, MismatchedContentsAreRejected) {
  // A config whose shape needs another number of weights.
  ModelFile f = sample_file(false);
  std::string bytes = serialize_model_file(f);
  const std::string from = "d_model=8", to = "d_model=4";
  bytes.replace(bytes.find(from), from.size(), to);
  EXPECT_NE(parse_error(with_crc(bytes)).find("parameter count is"), std::string::npos) << parse_error(with_crc(bytes));

  // A vocabulary of the wrong size.
  f.vocab = "abc";
  EXPECT_NE(parse_error(serialize_model_file(f)).find("vocabulary has 3 bytes, expected 5"), std::string::npos);

  // A bad config line and an unknown attention kind.
  f = sample_file(false);
  bytes = serialize_model_file(f);
  const std::string kind_from = "attention=favor", kind_to = "attention=fancy";
  bytes.replace(bytes.find(kind_from), kind_from.size(), kind_to);
  EXPECT_NE(parse_error(with_crc(bytes)).find("attention is \"fancy\""), std::string::npos);
  bytes = serialize_model_file(f);
  const std::string heads_from = "heads=2", heads_to = "heads=x";
  bytes.replace(bytes.find(heads_from), heads_from.size(), heads_to);
  EXPECT_NE(parse_error(with_crc(bytes)).find("heads is \"x\", expected an integer"), std::string::npos)
      << parse_error(with_crc(bytes));
}

// Issue 42, item 7: a checkpoint whose AdamW second moments are negative resumed into an all-NaN
// model (√v of a negative v), exit 0. Moments and weights are finite, and v ≥ 0, or the file is
// refused naming the field and the index.
TEST(ModelFile, DefectNegativeOrNonFiniteMomentsAreRefused) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  struct Case {
    std::vector<float> ModelFile::*field;
    float value;
    const char* message;
  };
  for (const Case& c :
       {Case{&ModelFile::adam_v, -1.0f, "test.model: AdamW second moments[3] is -1, expected a finite number ≥ 0"},
        Case{&ModelFile::adam_v, -1e-30f, "AdamW second moments[3] is -1e-30"},
        Case{&ModelFile::adam_v, inf, "AdamW second moments[3] is inf"},
        Case{&ModelFile::adam_m, nan, "AdamW first moments[3] is nan, expected a finite number"},
        Case{&ModelFile::params, -inf, "weights[3] is -inf, expected a finite number"}}) {
    ModelFile f = sample_file(true);
    (f.*c.field)[3] = c.value;
    const std::string message = parse_error(serialize_model_file(f));
    EXPECT_NE(message.find(c.message), std::string::npos) << message;
  }
  ModelFile f = sample_file(true);
  f.adam_m[3] = -1.0f;  // a first moment may be negative
  f.adam_v[3] = 0.0f;
  EXPECT_EQ(parse_error(serialize_model_file(f)), "");
}

// retnet and gla are recorded by name; gla's file holds its gate projection (2 more tensors).
TEST(ModelFile, RecordsTheDecayedKinds) {
  for (AttentionKind kind : {AttentionKind::retnet, AttentionKind::gla}) {
    ModelFile f = sample_file(true);
    f.config.attention = kind;
    f.params.assign(param_count(f.config), 0.5f);
    f.adam_m.assign(f.params.size(), 0.25f);
    f.adam_v.assign(f.params.size(), 1e-6f);
    const std::string bytes = serialize_model_file(f);
    EXPECT_NE(bytes.find(std::string("attention=") + attention_name(kind) + "\n"), std::string::npos);
    const ModelFile back = parse_model_file(bytes);
    EXPECT_EQ(back.config.attention, kind);
    EXPECT_EQ(back.params, f.params);
  }
  ModelConfig linear = sample_file(false).config, gla = linear;
  linear.attention = AttentionKind::linear;
  gla.attention = AttentionKind::gla;
  const int64_t C = gla.d_model, L = gla.layers;
  EXPECT_EQ(param_count(gla), param_count(linear) + L * C * C + L * C);
  // A gla file with the weights of a linear model is refused: the gate is missing.
  ModelFile f = sample_file(false);
  f.config.attention = AttentionKind::gla;
  f.params.assign(param_count(linear), 0.0f);
  EXPECT_NE(parse_error(serialize_model_file(f))
                .find("parameter count is " + std::to_string(param_count(linear)) + ", expected " +
                      std::to_string(param_count(gla))),
            std::string::npos)
      << parse_error(serialize_model_file(f));
}

// A model file as the format has always been written (version 1; the config text exactly as before
// retnet and gla existed) still loads, with the same weights in the same places.
TEST(ModelFile, FilesFromBeforeTheDecayedKindsStillLoad) {
  const std::string config =
      "attention=linear\nchunk_size=64\nd_model=8\nfavor_features=64\nfavor_seed=7\nheads=2\ninit_seed=1\n"
      "layers=1\nmlp_hidden=12\nvocab_size=5\n";
  // V·C + L·(2C + 3C² + 3C + C² + C + 2C + C·F + F + F·C + C) + 2C + C·V + V, with V 5, C 8, L 1, F 12
  const int64_t count = 40 + (16 + 192 + 24 + 64 + 8 + 16 + 96 + 12 + 96 + 8) + 16 + 40 + 5;
  std::string bytes(kModelMagic, 8);
  io::put_u32(bytes, 1);  // version
  io::put_u32(bytes, 1);  // a model
  io::put_i64(bytes, int64_t(config.size()));
  bytes += config;
  io::put_i64(bytes, 5);
  bytes += "abcde";
  io::put_i64(bytes, count);
  std::vector<float> weights(static_cast<size_t>(count));
  for (size_t i = 0; i < weights.size(); ++i) weights[i] = float(i);
  io::put_f32s(bytes, weights);
  io::put_u32(bytes, crc32(bytes));
  const ModelFile f = parse_model_file(bytes, "old.model");
  EXPECT_EQ(f.config.attention, AttentionKind::linear);
  EXPECT_EQ(f.params, weights);
  // The tensors sit where they always did: the head's bias is the last V weights.
  const ParamTensor last = param_tensors(f.config).back();
  EXPECT_EQ(last.name, "headb");
  EXPECT_EQ(last.offset, count - 5);
  Transformer<float> model(f.config);  // and it builds
  EXPECT_EQ(int64_t(model.params().size()), count);
}

TEST(ModelConfig, TextFormIsStrict) {
  ModelConfig c;
  c.vocab_size = 9;
  const std::string text = config_to_text(c);
  EXPECT_EQ(config_to_text(config_from_text(text)), text);
  auto message = [](const std::string& t) {
    try {
      config_from_text(t);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(message(text + "color=blue\n").find("key color (=blue) is unknown"), std::string::npos);
  EXPECT_NE(message(text + "layers=3\n").find("layers appears twice"), std::string::npos);
  EXPECT_NE(message(text + "oops\n").find("line \"oops\" is not key=value"), std::string::npos);
  const std::string layers_line = "layers=2\n";
  std::string missing = text;
  missing.erase(missing.find(layers_line), layers_line.size());
  EXPECT_NE(message(missing).find("layers is missing"), std::string::npos);
  std::string negative = text;
  negative.replace(negative.find("init_seed=1"), 11, "init_seed=-1");
  EXPECT_NE(message(negative).find("init_seed is \"-1\", expected a non-negative integer"), std::string::npos);
}

TEST(ModelConfig, ChecksNameTheField) {
  auto message = [](const ModelConfig& c) {
    try {
      check_config(c);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  ModelConfig c;
  c.vocab_size = 10;
  EXPECT_EQ(message(c), "");
  c.heads = 3;
  EXPECT_NE(message(c).find("d_model is 64, expected a multiple of heads (3)"), std::string::npos);
  c = ModelConfig{};
  EXPECT_NE(message(c).find("vocab_size is 0"), std::string::npos);
  for (int64_t ModelConfig::*field :
       {&ModelConfig::d_model, &ModelConfig::layers, &ModelConfig::heads, &ModelConfig::mlp_hidden,
        &ModelConfig::favor_features, &ModelConfig::chunk_size}) {
    c = ModelConfig{};
    c.vocab_size = 10;
    c.*field = 0;
    EXPECT_NE(message(c).find("is 0, expected ≥ 1"), std::string::npos);
  }
  c = ModelConfig{};
  c.vocab_size = int64_t(1) << 30;
  EXPECT_NE(message(c).find("implausibly large"), std::string::npos);
  EXPECT_THROW(attention_by_name("quadratic"), Error);
  EXPECT_EQ(attention_by_name("favor"), AttentionKind::favor);
  EXPECT_EQ(attention_by_name("retnet"), AttentionKind::retnet);
  EXPECT_EQ(attention_by_name("gla"), AttentionKind::gla);
  try {
    attention_by_name("mamba");
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("\"retnet\", \"gla\""), std::string::npos) << e.what();
  }
}

TEST(ModelTokenizer, EncodesDecodesAndRejectsUnknownBytes) {
  const Tokenizer t = Tokenizer::from_text("hello world");
  EXPECT_EQ(t.vocab(), " dehlorw");
  const auto tokens = t.encode("low");
  EXPECT_EQ(t.decode(tokens), "low");
  try {
    t.encode("lowz");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("('z') at offset 3"), std::string::npos) << e.what();
  }
  EXPECT_THROW(Tokenizer(""), Error);
  EXPECT_THROW(Tokenizer("abca"), Error);
}

}  // namespace
}  // namespace linattn::model
