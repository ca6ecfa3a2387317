#pragma once
// Little-endian encoding shared by the file formats: explicit shifts, so the bytes on disk are the
// same whatever the host's byte order.
#include <bit>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>

namespace linattn::io {

// Appends the low `size` bytes of v, least significant first.
inline void put_le(std::string& out, uint64_t v, int size) {
  for (int i = 0; i < size; ++i) out.push_back(char(uint8_t(v >> (8 * i))));
}
inline void put_u32(std::string& out, uint32_t v) { put_le(out, v, 4); }
inline void put_i64(std::string& out, int64_t v) { put_le(out, uint64_t(v), 8); }

// The `size`-byte unsigned integer at p, least (or most, when big_endian) significant byte first.
inline uint64_t get_uint(const char* p, int size, bool big_endian = false) {
  uint64_t v = 0;
  for (int i = 0; i < size; ++i) v |= uint64_t(uint8_t(p[big_endian ? size - 1 - i : i])) << (8 * i);
  return v;
}
inline uint32_t get_u32(const char* p) { return uint32_t(get_uint(p, 4)); }
inline int64_t get_i64(const char* p) { return int64_t(get_uint(p, 8)); }

// The host's float bits with their bytes in the other order.
inline uint32_t swapped_bits(float x) { return __builtin_bswap32(std::bit_cast<uint32_t>(x)); }

// floats as little-endian IEEE binary32, appended to out. A plain copy on little-endian hosts, a
// byte swap on big-endian ones: the bytes on disk are the same.
inline void put_f32s(std::string& out, std::span<const float> x) {
  const size_t start = out.size();
  out.resize(start + 4 * x.size());
  char* p = out.data() + start;
  if constexpr (std::endian::native == std::endian::little) {
    if (!x.empty()) std::memcpy(p, x.data(), 4 * x.size());
  } else {
    for (size_t i = 0; i < x.size(); ++i) {
      const uint32_t bits = swapped_bits(x[i]);
      std::memcpy(p + 4 * i, &bits, 4);
    }
  }
}

// y holds binary32 bytes as stored (little- or big-endian); puts them in the host's order.
inline void to_host_order(std::span<float> y, bool big_endian) {
  if (big_endian != (std::endian::native == std::endian::big))
    for (float& v : y) v = std::bit_cast<float>(swapped_bits(v));
}

// y[i] = the i-th binary32 at p, stored little- or big-endian; the caller has checked 4 * y.size() bytes.
inline void get_f32s(std::span<float> y, const char* p, bool big_endian = false) {
  if (y.empty()) return;
  std::memcpy(y.data(), p, 4 * y.size());
  to_host_order(y, big_endian);
}

}  // namespace linattn::io
