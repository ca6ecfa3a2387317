#pragma once
// Files that linattn writes and reads: atomic writes and the checksum every format carries.
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>

namespace linattn {

// Writes bytes to a temporary file beside path, flushes it to disk, then renames it over path:
// readers see the old file or the whole new one, never a half-written one. Throws linattn::Error
// naming the path and the system's reason on failure, and leaves no temporary file behind.
void write_file_atomically(const std::filesystem::path& path, std::string_view bytes);

// The whole file; throws linattn::Error naming the path when it cannot be read.
std::string read_file(const std::filesystem::path& path);

// CRC-32 (the zlib / PNG polynomial), continuing from `crc` (0 to start).
uint32_t crc32(std::string_view bytes, uint32_t crc = 0);

}  // namespace linattn
