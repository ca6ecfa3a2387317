#include "core/huge_pages.hpp"

#include <algorithm>
#include <cstdint>
#include <new>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace linattn::detail {

Scratch zeroed_scratch(size_t floats) {
  constexpr size_t kHuge = size_t(2) << 20, kLine = 64;
  // No size that would wrap once counted in bytes and rounded up to a huge page.
  if (floats > (SIZE_MAX - kHuge) / sizeof(float)) throw std::bad_alloc();
  const size_t bytes = std::max<size_t>(floats, 1) * sizeof(float);
  const size_t align = bytes >= kHuge ? kHuge : kLine;
  const size_t rounded = (bytes + align - 1) / align * align;  // aligned_alloc takes whole multiples
  Scratch memory(static_cast<float*>(std::aligned_alloc(align, rounded)));
  if (!memory) throw std::bad_alloc();
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  // Before the first touch, so that the faults below take whole huge pages. A refusal (EINVAL where
  // THP is compiled out) leaves ordinary pages.
  if (align == kHuge) (void)madvise(memory.get(), rounded, MADV_HUGEPAGE);
#endif
  std::fill_n(memory.get(), floats, 0.0f);
  return memory;
}

}  // namespace linattn::detail
