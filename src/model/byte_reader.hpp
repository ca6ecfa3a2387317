#pragma once
// Reads the fields of an untrusted file's bytes in order: every read is checked against what remains
// before anything is taken or allocated, and every failure names the file (the model format's and the
// dataset format's readers share it).
#include <cmath>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "io/bytes.hpp"
#include "linattn/error.hpp"

namespace linattn::model::detail {

class ByteReader {
 public:
  ByteReader(std::string_view bytes, std::string_view name) : bytes_(bytes), name_(name) {}
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
  size_t offset() const { return pos_; }
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

}  // namespace linattn::model::detail
