// Model files and checkpoints: round trips, and every way a file can be wrong gets a clear error.
#include "linattn/model/model_file.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "io/bytes.hpp"
#include "linattn/error.hpp"
#include "linattn/file_io.hpp"
#include "linattn/model/data.hpp"
#include "linattn/model/transformer.hpp"

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

// The error message parse_model_file gives for bytes, or "" when it accepts them.
std::string parse_error(const std::string& bytes) {
  try {
    parse_model_file(bytes, "test.model");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// bytes with the trailing CRC recomputed, so that a deliberate change gets past the checksum.
std::string with_crc(std::string bytes) {
  bytes.resize(bytes.size() - 4);
  io::put_u32(bytes, crc32(bytes));
  return bytes;
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
