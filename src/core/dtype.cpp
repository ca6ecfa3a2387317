// The names and sizes of linattn::DType (linattn/half.hpp).
#include <string>

#include "core/validate.hpp"
#include "linattn/half.hpp"

namespace linattn {

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return "f32";
    case DType::bf16:
      return "bf16";
    case DType::f16:
      return "f16";
  }
  return "unknown";
}

DType dtype_by_name(std::string_view name) {
  if (name == "f32" || name == "float32") return DType::f32;
  if (name == "bf16" || name == "bfloat16") return DType::bf16;
  if (name == "f16" || name == "float16") return DType::f16;
  detail::fail("dtype_by_name", "dtype '" + std::string(name) + "' is unknown, expected f32, bf16 or f16");
}

int64_t dtype_bytes(DType dtype) { return dtype == DType::f32 ? 4 : 2; }

}  // namespace linattn
