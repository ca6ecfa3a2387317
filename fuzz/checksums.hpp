#pragma once
// Rewrites the checksums of fuzzed bytes so that the readers' deeper checks are reached: a mutated
// file almost never has a valid CRC-32, and without this the fuzzer would only ever test the
// checksum comparison. The layouts are docs/state-format.md and docs/model-format.md.
#include <cstdint>
#include <string>
#include <string_view>

#include "io/bytes.hpp"
#include "io/state_file.hpp"
#include "linattn/file_io.hpp"

namespace linattn::fuzz {

// The u32 at `offset` of bytes, little-endian, set to v.
inline void set_u32(std::string& bytes, size_t offset, uint32_t v) {
  for (int i = 0; i < 4; ++i) bytes[offset + size_t(i)] = char(uint8_t(v >> (8 * i)));
}

// A state file: the header CRC after the name (when the name length field is within its bound and
// the header fits), then the file CRC over everything before the last 4 bytes.
inline std::string with_state_checksums(std::string bytes) {
  if (bytes.size() < size_t(io::kStateFixedHeader)) return bytes;
  const uint32_t name_length = io::get_u32(bytes.data() + io::kStateFixedHeader - 4);
  if (name_length > io::kMaxFeatureMapName) return bytes;
  const size_t header_end = size_t(io::kStateFixedHeader) + name_length;
  if (bytes.size() < header_end + 4) return bytes;
  set_u32(bytes, header_end, crc32(std::string_view(bytes.data(), header_end)));
  if (bytes.size() >= header_end + 8)
    set_u32(bytes, bytes.size() - 4, crc32(std::string_view(bytes.data(), bytes.size() - 4)));
  return bytes;
}

// A model file or checkpoint: the CRC over everything before the last 4 bytes (from 20 bytes on,
// the reader's minimum).
inline std::string with_model_checksum(std::string bytes) {
  if (bytes.size() < 20) return bytes;
  set_u32(bytes, bytes.size() - 4, crc32(std::string_view(bytes.data(), bytes.size() - 4)));
  return bytes;
}

// The kind field of a model file (offset 12, after magic and version) set to 2, a checkpoint.
inline std::string as_checkpoint(std::string bytes) {
  if (bytes.size() >= 16) set_u32(bytes, 12, 2);
  return bytes;
}

}  // namespace linattn::fuzz
