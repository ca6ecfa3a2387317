// Loads of fp32, bf16 or f16 elements into fp32 vectors and rounded stores back, shared by every
// kernel that reads or writes half precision in place (conversion, decode scores, recurrent steps).
// bf16 is widened by a shift and rounded to nearest even on its integer bits (Highway 1.0's DemoteTo
// truncates); f16 uses F16C (x86) or the A64 conversions, and the scalar code on other targets,
// where Highway's emulation truncates and mishandles ∞. Highway's per-target include guard: this
// file is compiled once per target.
#if defined(LINATTN_KERNELS_HALF_LANES_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef LINATTN_KERNELS_HALF_LANES_INL_H_
#undef LINATTN_KERNELS_HALF_LANES_INL_H_
#else
#define LINATTN_KERNELS_HALF_LANES_INL_H_
#endif

#include "hwy/highway.h"
#include "linattn/half.hpp"

HWY_BEFORE_NAMESPACE();
namespace linattn::kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#if (HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2) || HWY_ARCH_ARM_A64
inline constexpr bool kNativeF16 = true;
#else
inline constexpr bool kNativeF16 = false;
#endif

template <class DF>
HWY_INLINE hn::Vec<DF> LoadWide(DF d, const float* HWY_RESTRICT p) {
  return hn::LoadU(d, p);
}
template <class DF>
HWY_INLINE hn::Vec<DF> LoadWide(DF d, const bf16* HWY_RESTRICT p) {
  const hn::Rebind<uint16_t, DF> du16;
  const hn::RebindToUnsigned<DF> du32;
  return hn::BitCast(d, hn::ShiftLeft<16>(hn::PromoteTo(du32, hn::LoadU(du16, &p->bits))));
}
template <class DF>
HWY_INLINE hn::Vec<DF> LoadWide(DF d, const f16* HWY_RESTRICT p) {
  (void)d;
  if constexpr (kNativeF16) {
    const hn::Rebind<hwy::float16_t, DF> dh;
    return hn::PromoteTo(d, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(p)));
  } else {
    HWY_ALIGN float wide[HWY_MAX_BYTES / sizeof(float)];
    for (size_t i = 0; i < hn::Lanes(d); ++i) wide[i] = to_float(p[i]);
    return hn::Load(d, wide);
  }
}

template <class DF>
HWY_INLINE void StoreRounded(DF d, hn::Vec<DF> v, float* HWY_RESTRICT p) {
  hn::StoreU(v, d, p);
}
// v rounded to bf16 (nearest even; a NaN stays a quiet NaN with its sign), the bits in each lane's upper 16.
template <class DF>
HWY_INLINE hn::Vec<hn::RebindToUnsigned<DF>> RoundedBf16High(DF /*d*/, hn::Vec<DF> v) {
  const hn::RebindToUnsigned<DF> du32;
  const auto u = hn::BitCast(du32, v);
  const auto lsb = hn::And(hn::ShiftRight<16>(u), hn::Set(du32, 1));
  const auto rounded = hn::Add(hn::Add(u, hn::Set(du32, 0x7FFF)), lsb);
  const auto quiet = hn::Or(u, hn::Set(du32, 0x00400000));
  return hn::IfThenElse(hn::RebindMask(du32, hn::IsNaN(v)), quiet, rounded);
}
template <class DF>
HWY_INLINE void StoreRounded(DF d, hn::Vec<DF> v, bf16* HWY_RESTRICT p) {
  const hn::Rebind<uint16_t, DF> du16;
  const hn::RebindToSigned<DF> di32;
  const auto bits = hn::ShiftRight<16>(RoundedBf16High(d, v));
  hn::StoreU(hn::DemoteTo(du16, hn::BitCast(di32, bits)), du16, &p->bits);  // ≤ 0xFFFF: no saturation
}

// 2·Lanes(d) consecutive bf16 as two fp32 vectors, the even-indexed elements and the odd-indexed ones: one
// shift or one mask each, where LoadWide widens with a shuffle per vector. StoreBf16Pair rounds and joins
// them back (one shift and one blend). For kernels that can keep their columns split this way; not on
// HWY_SCALAR, whose u16 vectors hold one lane.
inline constexpr bool kBf16Pairs = HWY_TARGET != HWY_SCALAR;
template <class DF>
HWY_INLINE void LoadBf16Pair(DF d, const bf16* HWY_RESTRICT p, hn::Vec<DF>& even, hn::Vec<DF>& odd) {
  const hn::Repartition<uint16_t, DF> du16;
  const hn::RebindToUnsigned<DF> du32;
  const auto bits = hn::BitCast(du32, hn::LoadU(du16, &p->bits));  // element 2i low, 2i + 1 high in lane i
  even = hn::BitCast(d, hn::ShiftLeft<16>(bits));
  odd = hn::BitCast(d, hn::And(bits, hn::Set(du32, 0xFFFF0000u)));
}
template <class DF>
HWY_INLINE void StoreBf16Pair(DF d, hn::Vec<DF> even, hn::Vec<DF> odd, bf16* HWY_RESTRICT p) {
  const hn::Repartition<uint16_t, DF> du16;
  const auto low = hn::BitCast(du16, hn::ShiftRight<16>(RoundedBf16High(d, even)));
  hn::StoreU(hn::OddEven(hn::BitCast(du16, RoundedBf16High(d, odd)), low), du16, &p->bits);
}
template <class DF>
HWY_INLINE void StoreRounded(DF d, hn::Vec<DF> v, f16* HWY_RESTRICT p) {
  (void)d;
  if constexpr (kNativeF16) {
    const hn::Rebind<hwy::float16_t, DF> dh;
    hn::StoreU(hn::DemoteTo(dh, v), dh, reinterpret_cast<hwy::float16_t*>(p));
  } else {
    HWY_ALIGN float wide[HWY_MAX_BYTES / sizeof(float)];
    hn::Store(v, d, wide);
    for (size_t i = 0; i < hn::Lanes(d); ++i) p[i] = to_f16(wide[i]);
  }
}

HWY_INLINE float Widen(float x) { return x; }
HWY_INLINE float Widen(bf16 x) { return to_float(x); }
HWY_INLINE float Widen(f16 x) { return to_float(x); }
HWY_INLINE void Round(float x, float* p) { *p = x; }
HWY_INLINE void Round(float x, bf16* p) { *p = to_bf16(x); }
HWY_INLINE void Round(float x, f16* p) { *p = to_f16(x); }

}  // namespace HWY_NAMESPACE
}  // namespace linattn::kernels
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
