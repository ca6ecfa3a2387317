// Half ↔ fp32 conversion (linattn/half.hpp): scalar bit arithmetic for single values, Highway for
// arrays (the vector loads and rounded stores of kernels/half_lanes-inl.h).
#include <bit>
#include <cmath>
#include <cstring>

#include "linattn/half.hpp"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/convert.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#ifndef LINATTN_KERNELS_CONVERT_SCALAR
#define LINATTN_KERNELS_CONVERT_SCALAR
namespace linattn::kernels::scalar {

inline float bf16_to_float(uint16_t h) { return std::bit_cast<float>(uint32_t(h) << 16); }

// Round to nearest, ties to even: add 0x7FFF plus the lowest kept bit, then drop the low 16 bits.
inline uint16_t float_to_bf16(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return uint16_t((u >> 16) | 0x0040u);  // NaN: quiet, sign kept
  return uint16_t((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

inline float f16_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16, exp = (h >> 10) & 0x1Fu, mant = h & 0x3FFu;
  if (exp == 0) {  // zero or subnormal: mant · 2^−24, exact in fp32
    const float v = std::ldexp(float(mant), -24);
    return sign ? -v : v;
  }
  if (exp == 31) return std::bit_cast<float>(sign | 0x7F800000u | (mant << 13));
  return std::bit_cast<float>(sign | ((exp + 112u) << 23) | (mant << 13));
}

// Round to nearest, ties to even, keeping subnormals; ≥ 65520 in magnitude goes to ∞.
inline uint16_t float_to_f16(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return uint16_t(sign | 0x7E00u | ((a >> 13) & 0x3FFu));  // NaN, quiet
  if (a >= 0x477FF000u) return uint16_t(sign | 0x7C00u);                        // rounds to ∞
  if (a < 0x38800000u) {  // below 2^−14: a subnormal (or zero) result, in units of 2^−24
    // Adding 0.5 (exponent 2^−1, units 2^−24 in the low mantissa bits) makes the FPU round to nearest even.
    const float magic = std::bit_cast<float>(uint32_t(126) << 23);
    const float sum = std::bit_cast<float>(a) + magic;
    return uint16_t(sign | (std::bit_cast<uint32_t>(sum) - std::bit_cast<uint32_t>(magic)));
  }
  // Normal: rebias the exponent (127 → 15) and round the 13 dropped bits to nearest even.
  const uint32_t r = a + (uint32_t(15 - 127) << 23) + 0xFFFu + ((a >> 13) & 1u);
  return uint16_t(sign | (r >> 13));
}

}  // namespace linattn::kernels::scalar
#endif

#include "kernels/half_lanes-inl.h"

HWY_BEFORE_NAMESPACE();
namespace linattn::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// dst[i] = float(src[i]) (T half) or round(src[i]) (T float, U half): whole vectors, then the tail.
template <class T, class U>
void ConvertN(U* HWY_RESTRICT dst, const T* HWY_RESTRICT src, int64_t n) {
  const hn::ScalableTag<float> d;
  const int64_t L = int64_t(hn::Lanes(d));
  int64_t i = 0;
  for (; i + L <= n; i += L) StoreRounded(d, LoadWide(d, src + i), dst + i);
  for (; i < n; ++i) Round(Widen(src[i]), dst + i);
}
void WidenBf16(float* dst, const bf16* src, int64_t n) { ConvertN(dst, src, n); }
void WidenF16(float* dst, const f16* src, int64_t n) { ConvertN(dst, src, n); }
void NarrowBf16(bf16* dst, const float* src, int64_t n) { ConvertN(dst, src, n); }
void NarrowF16(f16* dst, const float* src, int64_t n) { ConvertN(dst, src, n); }

}  // namespace linattn::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace linattn {
namespace kernels {
HWY_EXPORT(WidenBf16);
HWY_EXPORT(NarrowBf16);
HWY_EXPORT(WidenF16);
HWY_EXPORT(NarrowF16);
// The dispatch inside the namespace of the exports, with unqualified names: a build of one static
// target (HWY_COMPILE_ONLY_STATIC) turns HWY_DYNAMIC_DISPATCH(F) into N_<TARGET>::F.
namespace {
void widen(float* dst, const bf16* src, int64_t n) { HWY_DYNAMIC_DISPATCH(WidenBf16)(dst, src, n); }
void widen(float* dst, const f16* src, int64_t n) { HWY_DYNAMIC_DISPATCH(WidenF16)(dst, src, n); }
void narrow(bf16* dst, const float* src, int64_t n) { HWY_DYNAMIC_DISPATCH(NarrowBf16)(dst, src, n); }
void narrow(f16* dst, const float* src, int64_t n) { HWY_DYNAMIC_DISPATCH(NarrowF16)(dst, src, n); }
}  // namespace
}  // namespace kernels

float to_float(bf16 x) { return kernels::scalar::bf16_to_float(x.bits); }
float to_float(f16 x) { return kernels::scalar::f16_to_float(x.bits); }
bf16 to_bf16(float x) { return {kernels::scalar::float_to_bf16(x)}; }
f16 to_f16(float x) { return {kernels::scalar::float_to_f16(x)}; }

void convert(std::span<float> dst, std::span<const bf16> src) {
  kernels::widen(dst.data(), src.data(), int64_t(src.size()));
}
void convert(std::span<float> dst, std::span<const f16> src) {
  kernels::widen(dst.data(), src.data(), int64_t(src.size()));
}
void convert(std::span<bf16> dst, std::span<const float> src) {
  kernels::narrow(dst.data(), src.data(), int64_t(src.size()));
}
void convert(std::span<f16> dst, std::span<const float> src) {
  kernels::narrow(dst.data(), src.data(), int64_t(src.size()));
}

}  // namespace linattn
#endif  // HWY_ONCE
