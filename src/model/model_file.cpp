// The model / checkpoint file format: docs/model-format.md.
#include "linattn/model/model_file.hpp"

#include <cstring>

#include "io/bytes.hpp"
#include "linattn/error.hpp"
#include "linattn/file_io.hpp"
#include "linattn/model/transformer.hpp"
#include "model/byte_reader.hpp"

namespace linattn::model {
namespace {

constexpr uint32_t kKindModel = 1, kKindCheckpoint = 2;

// "linattn::model: x" → "x", for a message that is re-thrown with the file's name in front.
std::string without_prefix(std::string_view message) {
  constexpr std::string_view prefix = "linattn::model: ";
  if (message.starts_with(prefix)) message.remove_prefix(prefix.size());
  return std::string(message);
}

void put_text(std::string& out, std::string_view text) {
  io::put_i64(out, int64_t(text.size()));
  out += text;
}

}  // namespace

std::string serialize_model_file(const ModelFile& f) {
  std::string out(kModelMagic, 8);
  io::put_u32(out, kModelFormatVersion);
  io::put_u32(out, f.checkpoint ? kKindCheckpoint : kKindModel);
  put_text(out, config_to_text(f.config));
  put_text(out, f.vocab);
  io::put_i64(out, int64_t(f.params.size()));
  io::put_f32s(out, f.params);
  if (f.checkpoint) {
    put_text(out, f.train_options);
    io::put_i64(out, f.step);
    io::put_f32s(out, f.adam_m);
    io::put_f32s(out, f.adam_v);
  }
  io::put_u32(out, crc32(out));
  return out;
}

ModelFile parse_model_file(std::string_view bytes, std::string_view name) {
  detail::ByteReader r(bytes, name);
  if (bytes.size() < 8 || std::memcmp(bytes.data(), kModelMagic, 8) != 0)
    r.fail("does not start with the magic \"LATNMODL\", expected a linattn model file");
  if (bytes.size() < 20)
    r.fail("has " + std::to_string(bytes.size()) + " bytes, expected at least 20 (truncated file?)");
  r.take(8, "magic");
  const uint32_t version = r.u32("version");
  if (version != kModelFormatVersion)
    r.fail("format version is " + std::to_string(version) + ", expected " + std::to_string(kModelFormatVersion));
  const uint32_t stored = io::get_u32(bytes.data() + bytes.size() - 4);
  const uint32_t computed = crc32(bytes.substr(0, bytes.size() - 4));
  if (stored != computed)
    r.fail("CRC-32 is " + std::to_string(stored) + ", expected " + std::to_string(computed) +
           " (the file is corrupt or truncated)");
  ModelFile f;
  const uint32_t kind = r.u32("kind");
  if (kind != kKindModel && kind != kKindCheckpoint)
    r.fail("kind is " + std::to_string(kind) + ", expected 1 (model) or 2 (checkpoint)");
  f.checkpoint = kind == kKindCheckpoint;
  const std::string config_text = r.text("config");
  try {
    f.config = config_from_text(config_text);
  } catch (const Error& e) {
    r.fail(without_prefix(e.what()));  // the message names the file, not just "model config"
  }
  f.vocab = r.text("vocabulary");
  if (int64_t(f.vocab.size()) != f.config.vocab_size)
    r.fail("vocabulary has " + std::to_string(f.vocab.size()) + " bytes, expected " +
           std::to_string(f.config.vocab_size) + " (the config's vocab_size)");
  const int64_t count = r.i64("parameter count");
  if (count != param_count(f.config))
    r.fail("parameter count is " + std::to_string(count) + ", expected " + std::to_string(param_count(f.config)) +
           " (what the config's shape holds)");
  f.params = r.floats(count, "weights");
  r.check_values(f.params, "weights", false);
  if (f.checkpoint) {
    f.train_options = r.text("training options");
    f.step = r.i64("step");
    if (f.step < 0) r.fail("step is " + std::to_string(f.step) + ", expected ≥ 0");
    f.adam_m = r.floats(count, "AdamW first moments");
    f.adam_v = r.floats(count, "AdamW second moments");
    r.check_values(f.adam_m, "AdamW first moments", false);
    r.check_values(f.adam_v, "AdamW second moments", true);
  }
  if (r.remaining() != 4)
    r.fail("has " + std::to_string(r.remaining() - 4) + " unexpected bytes before the checksum, expected none");
  return f;
}

void save_model_file(const std::filesystem::path& path, const ModelFile& file) {
  write_file_atomically(path, serialize_model_file(file));
}

ModelFile load_model_file(const std::filesystem::path& path) {
  return parse_model_file(read_file(path), path.string());
}

}  // namespace linattn::model
