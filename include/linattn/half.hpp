#pragma once
// Half-precision storage: bf16 (bfloat16: fp32's exponent, 8 bits of significand) and f16 (IEEE
// binary16). They are storage types only: every operator reads them into fp32, accumulates in fp32
// and rounds its outputs back to nearest, ties to even (docs/half-precision.md).
#include <concepts>
#include <cstdint>
#include <span>
#include <string_view>

#include "linattn/view.hpp"

namespace linattn {

// The bit pattern of one bfloat16 value (the upper half of an fp32).
struct bf16 {
  uint16_t bits = 0;
};
// The bit pattern of one IEEE 754 binary16 value.
struct f16 {
  uint16_t bits = 0;
};

// The element type of a tensor (the C API's and the command's `--dtype`).
enum class DType : uint8_t { f32, bf16, f16 };
// "f32", "bf16", "f16".
const char* dtype_name(DType dtype);
// By name ("f32", "bf16", "f16"; also "float32", "bfloat16", "float16"). Throws linattn::Error
// naming the choices otherwise.
DType dtype_by_name(std::string_view name);
// 4 or 2.
int64_t dtype_bytes(DType dtype);

template <class T>
concept HalfType = std::same_as<T, bf16> || std::same_as<T, f16>;
template <HalfType H>
inline constexpr DType dtype_of = std::same_as<H, bf16> ? DType::bf16 : DType::f16;

// Exact widening, and rounding to nearest, ties to even (NaN stays NaN, overflow goes to ±∞; f16
// keeps subnormals).
float to_float(bf16 x);
float to_float(f16 x);
bf16 to_bf16(float x);
f16 to_f16(float x);

// The same over arrays, SIMD (Highway, dispatched at runtime; F16C on x86 where present).
// dst and src have the same length.
void convert(std::span<float> dst, std::span<const bf16> src);
void convert(std::span<float> dst, std::span<const f16> src);
void convert(std::span<bf16> dst, std::span<const float> src);
void convert(std::span<f16> dst, std::span<const float> src);

using Bf16View = View4<bf16>;
using ConstBf16View = View4<const bf16>;
using F16View = View4<f16>;
using ConstF16View = View4<const f16>;

}  // namespace linattn
