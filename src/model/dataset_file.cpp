// The dataset file (docs/datasets.md): its writer, its reader of untrusted bytes, and its task.
#include <algorithm>
#include <cstring>
#include <string>

#include "io/bytes.hpp"
#include "linattn/error.hpp"
#include "linattn/file_io.hpp"
#include "linattn/limits.hpp"
#include "linattn/model/dataset.hpp"
#include "model/byte_reader.hpp"
#include "model/printable.hpp"

namespace linattn::model {
namespace {

constexpr const char* kSplitNames[3] = {"train", "validation", "test"};
// magic, version, token width, seq_len, vocab, classes, the task's length: what precedes the first
// variable-length field, and the CRC after the last.
constexpr size_t kHeaderBytes = 8 + 4 + 4 + 8 + 8 + 8 + 8, kCrcBytes = 4;

// One spelling per file: one byte a token when the vocabulary fits in it, else two.
int token_bytes(int64_t vocab) { return vocab <= 256 ? 1 : 2; }

bool task_byte(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-'; }
bool printable_byte(char c) { return c >= 0x20 && c < 0x7f; }

// The rules a dataset's fields keep, shared by the writer and the reader; `fail` names the file.
template <class Fail>
void check_header(int64_t seq_len, int64_t vocab, int64_t classes, Fail&& fail) {
  auto bounded = [&](const char* field, int64_t value, int64_t lo, int64_t hi) {
    if (value < lo || value > hi)
      fail(std::string(field) + " is " + std::to_string(value) + ", expected " + std::to_string(lo) + " to " +
           std::to_string(hi));
  };
  bounded("seq_len", seq_len, 1, limits::kMaxSeqLen);
  bounded("vocab", vocab, 2, kMaxDatasetVocab);
  bounded("classes", classes, 2, kMaxDatasetClasses);
}

template <class Fail>
void check_name(std::string_view field, std::string_view text, int64_t max_bytes, bool (*allowed)(char),
                const char* rule, Fail&& fail) {
  if (text.empty() || int64_t(text.size()) > max_bytes || !std::all_of(text.begin(), text.end(), allowed))
    fail(std::string(field) + " is \"" + detail::printable(text.substr(0, 80)) + "\" (" + std::to_string(text.size()) +
         " bytes), expected 1 to " + std::to_string(max_bytes) + " bytes of " + rule);
}

void put_text(std::string& out, std::string_view text) {
  io::put_i64(out, int64_t(text.size()));
  out += text;
}

}  // namespace

std::string serialize_dataset(Dataset& d) {
  auto fail = [](const std::string& message) -> void { throw Error("linattn::model: dataset " + message); };
  check_header(d.seq_len, d.vocab, d.classes(), fail);
  check_name("task", d.task, kMaxDatasetTaskName, task_byte, "[a-z0-9_-]", fail);
  for (const std::string& c : d.class_names)
    check_name("class name", c, kMaxDatasetClassName, printable_byte, "printable ASCII", fail);
  const int width = token_bytes(d.vocab);
  std::string out(kDatasetMagic, 8);
  io::put_u32(out, kDatasetFormatVersion);
  io::put_u32(out, uint32_t(width));
  io::put_i64(out, d.seq_len);
  io::put_i64(out, d.vocab);
  io::put_i64(out, d.classes());
  put_text(out, d.task);
  for (const std::string& c : d.class_names) put_text(out, c);
  for (size_t s = 0; s < 3; ++s) {
    const DatasetSplit& split = d.splits[s];
    const std::string name = std::string(kSplitNames[s]) + " split";
    if (split.count < 1 || split.tokens.size() != size_t(split.count * d.seq_len) ||
        split.labels.size() != size_t(split.count))
      fail(name + " has count " + std::to_string(split.count) + ", " + std::to_string(split.tokens.size()) +
           " tokens and " + std::to_string(split.labels.size()) + " labels, expected count ≥ 1, count × seq_len " +
           "tokens and count labels");
    io::put_i64(out, split.count);
    for (uint16_t t : split.tokens) {
      if (t >= d.vocab)
        fail(name + " holds token " + std::to_string(t) + ", expected < vocab " + std::to_string(d.vocab));
      io::put_le(out, t, width);
    }
    for (int32_t label : split.labels) {
      if (label < 0 || label >= d.classes())
        fail(name + " holds label " + std::to_string(label) +
             ", expected 0 to classes − 1 = " + std::to_string(d.classes() - 1));
      io::put_u32(out, uint32_t(label));
    }
  }
  d.crc = crc32(out);
  io::put_u32(out, d.crc);
  return out;
}

Dataset parse_dataset(std::string_view bytes, std::string_view name) {
  detail::ByteReader r(bytes, name);
  if (bytes.size() < 8 || std::memcmp(bytes.data(), kDatasetMagic, 8) != 0)
    r.fail("does not start with the magic \"LATNDSET\", expected a linattn dataset file (docs/datasets.md)");
  if (bytes.size() < kHeaderBytes + kCrcBytes)
    r.fail("has " + std::to_string(bytes.size()) + " bytes, expected at least " +
           std::to_string(kHeaderBytes + kCrcBytes) + " (truncated file?)");
  r.take(8, "magic");
  const uint32_t version = r.u32("version");
  if (version != kDatasetFormatVersion)
    r.fail("format version is " + std::to_string(version) + ", expected " + std::to_string(kDatasetFormatVersion));
  Dataset d;
  d.crc = io::get_u32(bytes.data() + bytes.size() - kCrcBytes);
  const uint32_t computed = crc32(bytes.substr(0, bytes.size() - kCrcBytes));
  if (d.crc != computed)
    r.fail("CRC-32 is " + std::to_string(d.crc) + ", expected " + std::to_string(computed) +
           " (the file is corrupt or truncated)");
  // From here the reader sees the bytes before the CRC only.
  detail::ByteReader body(bytes.substr(0, bytes.size() - kCrcBytes), name);
  body.take(12, "magic and version");
  const uint32_t width = body.u32("token_bytes");
  d.seq_len = body.i64("seq_len");
  d.vocab = body.i64("vocab");
  const int64_t classes = body.i64("classes");
  auto fail = [&](const std::string& message) { body.fail(message); };
  check_header(d.seq_len, d.vocab, classes, fail);
  if (int(width) != token_bytes(d.vocab))
    body.fail("token_bytes is " + std::to_string(width) + ", expected " + std::to_string(token_bytes(d.vocab)) +
              " for vocab " + std::to_string(d.vocab) + " (1 up to 256 symbols, else 2)");
  d.task = body.text("task");
  check_name("task", d.task, kMaxDatasetTaskName, task_byte, "[a-z0-9_-]", fail);
  // Each name takes at least its 8-byte length: more classes than that cannot be in the file.
  if (uint64_t(classes) > body.remaining() / 8)
    body.fail("classes is " + std::to_string(classes) + ", but only " + std::to_string(body.remaining()) +
              " bytes remain for their names (truncated file?)");
  d.class_names.reserve(size_t(classes));
  for (int64_t c = 0; c < classes; ++c) {
    d.class_names.push_back(body.text("class name"));
    check_name("class name " + std::to_string(c), d.class_names.back(), kMaxDatasetClassName, printable_byte,
               "printable ASCII", fail);
  }
  for (size_t s = 0; s < 3; ++s) {
    const std::string split = std::string(kSplitNames[s]) + " split";
    DatasetSplit& out = d.splits[s];
    out.count = body.i64((split + " count").c_str());
    const uint64_t row = uint64_t(d.seq_len) * width + 4;  // a sequence's tokens and its label
    if (out.count < 1 || uint64_t(out.count) > body.remaining() / row)
      body.fail(split + " count is " + std::to_string(out.count) + ", expected 1 to " +
                std::to_string(body.remaining() / row) + " (what the " + std::to_string(body.remaining()) +
                " bytes left hold at " + std::to_string(row) + " bytes a sequence; truncated file?)");
    const size_t n = size_t(out.count * d.seq_len);
    const char* tokens = body.take(n * width, (split + " tokens").c_str());
    out.tokens.resize(n);
    for (size_t i = 0; i < n; ++i) {
      const auto t = uint16_t(io::get_uint(tokens + i * width, int(width)));
      if (t >= d.vocab)
        body.fail(split + " token " + std::to_string(i % size_t(d.seq_len)) + " of sequence " +
                  std::to_string(i / size_t(d.seq_len)) + " is " + std::to_string(t) + ", expected < vocab " +
                  std::to_string(d.vocab));
      out.tokens[i] = t;
    }
    const char* labels = body.take(size_t(out.count) * 4, (split + " labels").c_str());
    out.labels.resize(size_t(out.count));
    for (size_t i = 0; i < out.labels.size(); ++i) {
      const uint32_t label = io::get_u32(labels + 4 * i);
      if (label >= uint64_t(classes))
        body.fail(split + " label of sequence " + std::to_string(i) + " is " + std::to_string(label) +
                  ", expected < classes " + std::to_string(classes));
      out.labels[i] = int32_t(label);
    }
  }
  if (body.remaining() != 0)
    body.fail("has " + std::to_string(body.remaining()) + " unexpected bytes before the checksum, expected none");
  return d;
}

Dataset load_dataset(const std::filesystem::path& path) { return parse_dataset(read_file(path), path.string()); }

void save_dataset(const std::filesystem::path& path, Dataset& dataset) {
  write_file_atomically(path, serialize_dataset(dataset));
}

namespace {
Tokenizer byte_vocabulary(const Dataset& d, const std::string& name) {
  if (d.vocab > 256)
    throw Error("linattn::model: " + name + ": vocab is " + std::to_string(d.vocab) +
                ", expected ≤ 256 (the model's tokenizer holds one byte a token)");
  return Tokenizer::byte_range(d.vocab);
}
}  // namespace

DatasetTask::DatasetTask(const std::filesystem::path& path) : DatasetTask(load_dataset(path), path.string()) {}

DatasetTask::DatasetTask(Dataset dataset, std::string name)
    : dataset_(std::move(dataset)), name_(std::move(name)), tokenizer_(byte_vocabulary(dataset_, name_)) {}

LabelledSequence DatasetTask::example(Split split, int64_t i, int64_t max_len) const {
  if (max_len != dataset_.seq_len)
    throw Error("linattn::model: " + name_ + " holds sequences of " + std::to_string(dataset_.seq_len) +
                " tokens, but seq_len is " + std::to_string(max_len) + ", expected " +
                std::to_string(dataset_.seq_len));
  check_index(split, i, dataset_.task);
  const DatasetSplit& s = dataset_.splits[size_t(split)];
  const auto first = s.tokens.begin() + i * dataset_.seq_len;
  return {std::vector<int32_t>(first, first + dataset_.seq_len), s.labels[size_t(i)]};
}

}  // namespace linattn::model
