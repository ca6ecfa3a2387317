#pragma once
// NumPy .npy files (format versions 1.0, 2.0 and 3.0) of float32, read as untrusted input.
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace linattn::npy {

// A float32 array in C (row-major) order.
struct Array {
  std::vector<int64_t> shape;
  std::vector<float> data;
};

// The parsed header of a .npy file.
struct Header {
  std::string descr;  // e.g. "<f4"
  bool fortran_order = false;
  std::vector<int64_t> shape;
  int64_t data_offset = 0;  // bytes from the start of the file to the data
};

// Parses and checks the magic, version, header length and header dict of `bytes` (the file's
// first bytes, at least the whole header). Throws linattn::Error saying what is wrong: never
// crashes, whatever the bytes.
Header parse_header(std::string_view bytes);

// Loads a float32 array (little- or big-endian; Fortran order is transposed to C order).
// Throws linattn::Error naming the path for a truncated file, another dtype, or a bad header.
Array load(const std::filesystem::path& path);
// Parses a whole file's bytes; `name` is used in error messages.
Array parse(std::string_view bytes, std::string_view name = "<bytes>");

// Writes a little-endian float32 C-order array, atomically.
void save(const std::filesystem::path& path, std::span<const int64_t> shape, std::span<const float> data);
// The bytes save writes.
std::string serialize(std::span<const int64_t> shape, std::span<const float> data);

}  // namespace linattn::npy
