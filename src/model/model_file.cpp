// The model / checkpoint file format: docs/model-format.md.
#include "linattn/model/model_file.hpp"

#include <cmath>
#include <cstdio>
#include <cstring>

#include "io/bytes.hpp"
#include "linattn/error.hpp"
#include "linattn/file_io.hpp"
#include "linattn/model/transformer.hpp"

namespace linattn::model {
namespace {

constexpr uint32_t kKindModel = 1, kKindCheckpoint = 2;

// Reads fields from the checked bytes, failing with the file's name when one runs past the end.
class Reader {
 public:
  Reader(std::string_view bytes, std::string_view name) : bytes_(bytes), name_(name) {}
  [[noreturn]] void fail(const std::string& message) const {
    throw Error("linattn::model: " + std::string(name_) + ": " + message);
  }
  const char* take(uint64_t n, const char* what) {
    if (n > bytes_.size() - pos_)
      fail(std::string(what) + " needs " + std::to_string(n) + " bytes at offset " + std::to_string(pos_) +
           ", but only " + std::to_string(bytes_.size() - pos_) + " remain (truncated file?)");
    const char* p = bytes_.data() + pos_;
    pos_ += n;
    return p;
  }
  uint32_t u32(const char* what) { return io::get_u32(take(4, what)); }
  int64_t i64(const char* what) { return io::get_i64(take(8, what)); }
  std::string text(const char* what) {
    const int64_t n = i64(what);
    if (n < 0) fail(std::string(what) + " length is " + std::to_string(n) + ", expected ≥ 0");
    return std::string(take(uint64_t(n), what), size_t(n));
  }
  std::vector<float> floats(int64_t n, const char* what) {
    if (n < 0 || uint64_t(n) > remaining() / 4)
      fail(std::string(what) + " needs " + std::to_string(n) + " floats at offset " + std::to_string(pos_) +
           ", but only " + std::to_string(remaining()) + " bytes remain (truncated file?)");
    std::vector<float> x(static_cast<size_t>(n));
    io::get_f32s(x, take(uint64_t(n) * 4, what));
    return x;
  }
  size_t remaining() const { return bytes_.size() - pos_; }
  // Every x finite and, with non_negative, ≥ 0; else fails naming the field and the first bad index.
  // A file is untrusted: a negative AdamW second moment makes √v NaN (a resumed run turned every
  // weight NaN and still exited 0), and a NaN weight makes every output NaN.
  void check_values(const std::vector<float>& x, const char* what, bool non_negative) const {
    for (size_t i = 0; i < x.size(); ++i) {
      if (std::isfinite(x[i]) && !(non_negative && x[i] < 0)) continue;
      char value[32];
      std::snprintf(value, sizeof value, "%g", double(x[i]));
      fail(std::string(what) + "[" + std::to_string(i) + "] is " + value + ", expected a finite number" +
           (non_negative ? " ≥ 0" : "") + " (a corrupt or tampered file)");
    }
  }

 private:
  std::string_view bytes_, name_;
  size_t pos_ = 0;
};

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
  Reader r(bytes, name);
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
