// NumPy .npy files of float32: a strict reader of the header dict, and a writer whose bytes match
// numpy.save's (version 1.0, '<f4', C order, header padded to 64 bytes).
#include "linattn/npy.hpp"

#include <algorithm>
#include <cstring>
#include <sstream>

#include "core/validate.hpp"
#include "io/bytes.hpp"
#include "io/input_file.hpp"
#include "linattn/file_io.hpp"
#include "linattn/half.hpp"

namespace linattn::npy {
namespace {

constexpr char kMagic[6] = {'\x93', 'N', 'U', 'M', 'P', 'Y'};
constexpr int kMaxRank = 8;                  // linattn's arrays have at most 4 dims; more is a corrupt header
constexpr int64_t kMaxHeaderLength = 10000;  // numpy's own default limit (max_header_size)
constexpr const char* kExpectedDtype = "float32 ('<f4') or float16 ('<f2')";

// Bytes per element of the dtypes read: float32, or float16 (IEEE binary16, widened exactly).
bool is_f16(const Header& h) { return h.descr == "<f2" || h.descr == ">f2"; }
int64_t element_bytes(const Header& h) { return is_f16(h) ? 2 : 4; }

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

// A recursive-descent reader of the header's Python dict literal. It accepts what numpy writes and
// the spacing and trailing commas Python allows, and nothing else.
class HeaderParser {
 public:
  // Python 2's long suffix ("3L") is accepted in version 1.0 and 2.0 headers only, as numpy does.
  HeaderParser(std::string_view text, const std::string& where, bool allow_long)
      : text_(text), where_(where), allow_long_(allow_long) {}

  Header parse() {
    Header h;
    skip_space();
    if (!take('{')) error("is not a dict: expected '{' at offset " + std::to_string(pos_));
    bool seen[3] = {false, false, false};
    const char* const keys[3] = {"descr", "fortran_order", "shape"};
    for (;;) {
      skip_space();
      if (take('}')) break;
      const std::string key = parse_string("a key");
      int k = 0;
      while (k < 3 && key != keys[k]) ++k;
      if (k == 3) error("has unknown key '" + key + "', expected only 'descr', 'fortran_order' and 'shape'");
      if (seen[k]) error("has key '" + key + "' twice");
      seen[k] = true;
      skip_space();
      if (!take(':')) error("expected ':' after key '" + key + "' at offset " + std::to_string(pos_));
      skip_space();
      if (k == 0) h.descr = parse_descr();
      if (k == 1) h.fortran_order = parse_bool();
      if (k == 2) h.shape = parse_shape();
      skip_space();
      if (take(',')) continue;
      if (take('}')) break;
      error("expected ',' or '}' at offset " + std::to_string(pos_));
    }
    skip_space();
    if (pos_ != text_.size()) error("has text after the dict at offset " + std::to_string(pos_));
    for (int k = 0; k < 3; ++k)
      if (!seen[k]) error("is missing key '" + std::string(keys[k]) + "'");
    return h;
  }

 private:
  [[noreturn]] void error(const std::string& what) const {
    std::string shown(text_.substr(0, 120));
    while (!shown.empty() && (shown.back() == ' ' || shown.back() == '\n')) shown.pop_back();
    detail::fail("npy", where_ + ": header " + what + " (header: " + shown + ")");
  }
  bool at_end() const { return pos_ >= text_.size(); }
  char peek() const { return at_end() ? '\0' : text_[pos_]; }
  bool take(char c) {
    if (peek() != c || at_end()) return false;
    ++pos_;
    return true;
  }
  void skip_space() {
    while (!at_end() && (peek() == ' ' || peek() == '\n' || peek() == '\t' || peek() == '\r')) ++pos_;
  }
  // 'text' or "text", without escapes (numpy writes none).
  std::string parse_string(const char* what) {
    const char quote = peek();
    if (quote != '\'' && quote != '"')
      error("expected " + std::string(what) + " string at offset " + std::to_string(pos_));
    const size_t start = ++pos_;
    while (!at_end() && peek() != quote) {
      if (peek() == '\\') error("has an escape sequence in a string at offset " + std::to_string(pos_));
      ++pos_;
    }
    if (at_end()) error("has an unterminated string at offset " + std::to_string(start - 1));
    return std::string(text_.substr(start, pos_++ - start));
  }
  std::string parse_descr() {
    if (peek() == '[') error("descr is a structured dtype, expected " + std::string(kExpectedDtype));
    return parse_string("descr as a");
  }
  bool parse_bool() {
    for (const bool value : {true, false}) {
      const std::string_view word = value ? "True" : "False";
      if (text_.substr(pos_, word.size()) == word) {
        pos_ += word.size();
        return value;
      }
    }
    error("fortran_order is not True or False at offset " + std::to_string(pos_));
  }
  // A tuple of Python ints: (), (3,), (2, 3) or (2, 3,). "(3)" is an int, not a tuple.
  std::vector<int64_t> parse_shape() {
    if (!take('(')) error("shape is not a tuple: expected '(' at offset " + std::to_string(pos_));
    std::vector<int64_t> shape;
    bool comma_after_last = false;
    for (;;) {
      skip_space();
      if (take(')')) break;
      if (int(shape.size()) == kMaxRank) error("shape has more than " + std::to_string(kMaxRank) + " dims");
      shape.push_back(parse_dim(shape.size()));
      skip_space();
      comma_after_last = take(',');
      if (comma_after_last) continue;
      if (take(')')) break;
      error("expected ',' or ')' in shape at offset " + std::to_string(pos_));
    }
    if (shape.size() == 1 && !comma_after_last) error("shape (" + std::to_string(shape[0]) + ") is not a tuple");
    return shape;
  }
  int64_t parse_dim(size_t index) {
    const std::string name = "shape[" + std::to_string(index) + "]";
    const bool negative = take('-');
    if (peek() < '0' || peek() > '9') error(name + " is not an integer at offset " + std::to_string(pos_));
    if (peek() == '0' && pos_ + 1 < text_.size() && text_[pos_ + 1] >= '0' && text_[pos_ + 1] <= '9') {
      // Python 3 allows leading zeros only in a literal that is all zeros.
      for (size_t i = pos_; i < text_.size() && text_[i] >= '0' && text_[i] <= '9'; ++i)
        if (text_[i] != '0') error(name + " has a leading zero at offset " + std::to_string(pos_));
    }
    int64_t v = 0;
    while (peek() >= '0' && peek() <= '9') {
      if (__builtin_mul_overflow(v, int64_t(10), &v) || __builtin_add_overflow(v, int64_t(peek() - '0'), &v))
        error(name + " overflows int64");
      ++pos_;
    }
    if (allow_long_) take('L');
    if (negative && v != 0) error(name + " is -" + std::to_string(v) + ", expected ≥ 0");
    return v;
  }

  std::string_view text_;
  const std::string& where_;
  bool allow_long_;
  size_t pos_ = 0;
};

Header parse_header_of(std::string_view bytes, const std::string& where) {
  auto fail = [&](const std::string& what) { detail::fail("npy", where + ": " + what); };
  const int64_t size = int64_t(bytes.size());
  if (size < 6 || std::memcmp(bytes.data(), kMagic, 6) != 0) fail("not a .npy file (magic is not \"\\x93NUMPY\")");
  if (size < 8) fail("truncated: " + std::to_string(size) + " bytes, expected at least 8 (magic and version)");
  const int major = uint8_t(bytes[6]), minor = uint8_t(bytes[7]);
  if ((major < 1 || major > 3) || minor != 0)
    fail("format version is " + std::to_string(major) + "." + std::to_string(minor) + ", expected 1.0, 2.0 or 3.0");
  const int length_size = major == 1 ? 2 : 4;
  const int64_t prefix = 8 + length_size;
  if (size < prefix) fail("truncated: " + std::to_string(size) + " bytes, expected at least " + std::to_string(prefix));
  const int64_t header_length = int64_t(io::get_uint(bytes.data() + 8, length_size));
  // The limit first: npy::load passes only the file's first kMaxHeaderLength + 12 bytes.
  if (header_length > kMaxHeaderLength)
    fail("header length " + std::to_string(header_length) + " exceeds " + std::to_string(kMaxHeaderLength) +
         " (numpy's own limit)");
  if (header_length > size - prefix)
    fail("header length " + std::to_string(header_length) + " exceeds the file (" + std::to_string(size - prefix) +
         " bytes after the length field)");
  const std::string_view text = bytes.substr(size_t(prefix), size_t(header_length));
  for (size_t i = 0; i < text.size(); ++i) {
    const uint8_t c = uint8_t(text[i]);
    if ((c < 0x20 || c > 0x7e) && c != '\n' && c != '\t' && c != '\r') {
      std::ostringstream m;
      m << "header byte " << i << " is 0x" << std::hex << int(c) << ", expected printable ASCII";
      fail(m.str());
    }
  }
  Header h = HeaderParser(text, where, major <= 2).parse();
  int64_t count = 1;
  for (int64_t d : h.shape)
    count = detail::checked_mul("npy", (where + ": the element count of shape").c_str(), count, d);
  h.data_offset = prefix + header_length;
  return h;
}

// c: C order = f: Fortran order, both holding an array of `shape`.
void fortran_to_c(float* c, const float* f, const std::vector<int64_t>& shape, int64_t count) {
  if (count == 0) return;  // the strides below may overflow when a zero dim hides huge ones
  const int rank = int(shape.size());
  std::vector<int64_t> index(size_t(rank), 0), stride(size_t(rank), 1);
  for (int k = 1; k < rank; ++k) stride[k] = stride[k - 1] * shape[k - 1];
  int64_t offset = 0;  // of element `index` in f
  for (int64_t i = 0; i < count; ++i) {
    c[i] = f[offset];
    for (int k = rank - 1; k >= 0; --k) {  // the C-order odometer: the last index moves fastest
      offset += stride[k];
      if (++index[k] < shape[k]) break;
      offset -= stride[k] * shape[k];
      index[k] = 0;
    }
  }
}

}  // namespace

Header parse_header(std::string_view bytes) { return parse_header_of(bytes, "<bytes>"); }

namespace {

// The checks on what follows a parsed header: the dtype, and exactly the bytes the shape implies
// (`available` of them follow the header). Returns the element count.
int64_t check_data(const Header& h, int64_t available, const std::string& where) {
  auto fail = [&](const std::string& what) { detail::fail("npy", where + ": " + what); };
  if (h.descr != "<f4" && h.descr != ">f4" && !is_f16(h))
    fail("dtype is '" + h.descr + "', expected " + kExpectedDtype +
         (h.descr == "|f4" ? " ('|f4' is not valid for float32)" : ""));
  int64_t count = 1;
  for (int64_t d : h.shape) count *= d;  // checked by parse_header_of
  const int64_t data_bytes = detail::checked_mul("npy", (where + ": the data size").c_str(), count, element_bytes(h));
  if (available != data_bytes) {
    std::ostringstream m;
    m << (available < data_bytes ? "truncated: data is " : "trailing bytes: data is ") << available
      << " bytes, expected " << data_bytes << " (" << (is_f16(h) ? "float16" : "float32") << ", shape "
      << shape_string(h.shape) << ")";
    fail(m.str());
  }
  return count;
}

// An array of h's shape and `count` elements: `fill(bytes)` writes the file's data bytes, which are
// then put in host byte order and C order.
template <class Fill>
Array decode(const Header& h, int64_t count, Fill&& fill) {
  Array a;
  a.shape = h.shape;
  a.data.resize(size_t(count));  // checked against the file's size by check_data
  if (is_f16(h)) {
    a.dtype = DType::f16;
    std::vector<f16> raw(static_cast<size_t>(count));
    fill(reinterpret_cast<char*>(raw.data()));
    for (f16& x : raw) x.bits = uint16_t(io::get_uint(reinterpret_cast<const char*>(&x.bits), 2, h.descr[0] == '>'));
    convert(std::span<float>(a.data), std::span<const f16>(raw));
  } else {
    fill(reinterpret_cast<char*>(a.data.data()));
    io::to_host_order(a.data, h.descr[0] == '>');
  }
  if (h.fortran_order && h.shape.size() >= 2) {
    std::vector<float> c(static_cast<size_t>(count));
    fortran_to_c(c.data(), a.data.data(), h.shape, count);
    a.data.swap(c);
  }
  return a;
}

}  // namespace

Array parse(std::string_view bytes, std::string_view name) {
  const std::string where(name);
  const Header h = parse_header_of(bytes, where);
  const int64_t count = check_data(h, int64_t(bytes.size()) - h.data_offset, where);
  return decode(h, count, [&](char* dst) {
    if (count > 0) std::memcpy(dst, bytes.data() + h.data_offset, size_t(element_bytes(h) * count));
  });
}

// Reads the header first and the data straight into the array: no whole-file copy, and nothing is
// allocated for the data before the file's size confirms it.
Array load(const std::filesystem::path& path) {
  const std::string where = path.string();
  io::InputFile file(path, "npy::load");
  std::string head(size_t(std::min<int64_t>(file.size(), 12 + kMaxHeaderLength)), '\0');
  head.resize(file.read_some(head.data(), head.size()));
  const Header h = parse_header_of(head, where);
  const int64_t count = check_data(h, file.size() - h.data_offset, where);
  return decode(h, count, [&](char* dst) {
    const size_t want = size_t(element_bytes(h) * count);
    const size_t in_head = std::min(want, head.size() - size_t(h.data_offset));
    if (in_head > 0) std::memcpy(dst, head.data() + h.data_offset, in_head);
    if (file.read_some(dst + in_head, want - in_head) != want - in_head)
      detail::fail("npy", where + ": truncated while reading (the file shrank)");
  });
}

std::string serialize(std::span<const int64_t> shape, std::span<const float> data, DType dtype) {
  const char* op = "npy::serialize";
  if (dtype == DType::bf16) detail::fail(op, "dtype is bf16, expected f32 or f16 (numpy has no bfloat16)");
  if (shape.size() > size_t(kMaxRank))
    detail::fail(op,
                 "shape has " + std::to_string(shape.size()) + " dims, expected at most " + std::to_string(kMaxRank));
  int64_t count = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] < 0)
      detail::fail(op, "shape[" + std::to_string(i) + "] is " + std::to_string(shape[i]) + ", expected ≥ 0");
    count = detail::checked_mul(op, "the element count of shape", count, shape[i]);
  }
  const std::vector<int64_t> dims(shape.begin(), shape.end());
  detail::check_size(op, "data", int64_t(data.size()), count, ("shape " + shape_string(dims)).c_str());
  // numpy.lib.format._write_array_header: sorted keys, repr values, room for the first axis to grow
  // to 21 digits, then spaces and '\n' up to a multiple of 64 bytes.
  const char* descr = dtype == DType::f16 ? "<f2" : "<f4";
  std::string header =
      std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': " + shape_string(dims) + ", }";
  if (!dims.empty()) header.append(21 - std::to_string(dims[0]).size(), ' ');
  const size_t padding = 64 - (10 + header.size() + 1) % 64;
  header.append(padding, ' ');
  header += '\n';
  std::string out(kMagic, sizeof kMagic);
  out += std::string("\x01\x00", 2);
  io::put_le(out, header.size(), 2);
  out += header;
  if (dtype == DType::f16) {
    std::vector<f16> rounded(data.size());
    convert(std::span<f16>(rounded), data);
    for (f16 x : rounded) io::put_le(out, x.bits, 2);
  } else {
    io::put_f32s(out, data);
  }
  return out;
}

void save(const std::filesystem::path& path, std::span<const int64_t> shape, std::span<const float> data, DType dtype) {
  write_file_atomically(path, serialize(shape, data, dtype));
}

}  // namespace linattn::npy
