#pragma once
// NumPy .npy files (format versions 1.0, 2.0 and 3.0) of float32 or float16, read as untrusted input.
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "linattn/half.hpp"

namespace linattn::npy {

// A float32 array in C (row-major) order; dtype: what the file stored (f16: '<f2'/'>f2', widened
// exactly).
struct Array {
  std::vector<int64_t> shape;
  std::vector<float> data;
  DType dtype = DType::f32;
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

// Loads a float32 or float16 array (little- or big-endian; Fortran order is transposed to C order).
// Throws linattn::Error naming the path for a truncated file, another dtype, or a bad header.
Array load(const std::filesystem::path& path);
// Parses a whole file's bytes; `name` is used in error messages.
Array parse(std::string_view bytes, std::string_view name = "<bytes>");

// Writes a little-endian C-order array of float32, or of float16 (dtype f16: '<f2', each value
// rounded to nearest even; bf16 is refused, numpy has no bfloat16), atomically.
void save(const std::filesystem::path& path, std::span<const int64_t> shape, std::span<const float> data,
          DType dtype = DType::f32);
// The bytes save writes.
std::string serialize(std::span<const int64_t> shape, std::span<const float> data, DType dtype = DType::f32);

}  // namespace linattn::npy
