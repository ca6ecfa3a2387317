// detail::zeroed_scratch: zeroed, aligned, and (where the system gives them) on huge pages.
#include "core/huge_pages.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <string>

namespace linattn::detail {
namespace {

constexpr size_t kHugeFloats = (size_t(2) << 20) / sizeof(float);

bool all_zero(const float* data, size_t floats) {
  for (size_t i = 0; i < floats; ++i)
    if (data[i] != 0.0f) return false;
  return true;
}

TEST(ZeroedScratch, SmallBuffersAreZeroedAndLineAligned) {
  for (size_t floats : {size_t(0), size_t(1), size_t(15), size_t(17), size_t(1000), kHugeFloats - 1}) {
    const Scratch s = zeroed_scratch(floats);
    ASSERT_NE(s, nullptr) << floats;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(s.get()) % 64, 0u) << floats;
    EXPECT_TRUE(all_zero(s.get(), floats)) << floats;
  }
}

TEST(ZeroedScratch, LargeBuffersAreZeroedAndAlignedToHugePages) {
  for (size_t floats : {kHugeFloats, kHugeFloats + 1, 5 * kHugeFloats / 2}) {
    const Scratch s = zeroed_scratch(floats);
    ASSERT_NE(s, nullptr) << floats;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(s.get()) % (size_t(2) << 20), 0u) << floats;
    EXPECT_TRUE(all_zero(s.get(), floats)) << floats;
    s[floats - 1] = 1.0f;  // the whole range is writable
  }
}

TEST(ZeroedScratch, AnImpossibleSizeThrowsBadAlloc) {
  EXPECT_THROW(zeroed_scratch(SIZE_MAX / sizeof(float)), std::bad_alloc);
  // Counted in bytes, this one wraps to 4: it must not become a 4-byte buffer.
  EXPECT_THROW(zeroed_scratch(SIZE_MAX / sizeof(float) + 2), std::bad_alloc);
}

// Where transparent huge pages are on ("always" or "madvise"), a large buffer is backed by them:
// the process's AnonHugePages grow once it is touched. Skips where THP is off or absent, and where the
// kernel found no free 2 MiB frame (a hint, not a promise).
TEST(ZeroedScratch, LargeBuffersGetHugePagesWhereTheSystemHasThem) {
  std::ifstream mode_file("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string mode;
  if (!std::getline(mode_file, mode) || mode.find("[never]") != std::string::npos)
    GTEST_SKIP() << "transparent huge pages are off or absent here";
  const auto huge_kib = [] {
    std::ifstream smaps("/proc/self/smaps_rollup");
    std::string key;
    long long kib = 0, value = 0;
    while (smaps >> key) {
      if (key == "AnonHugePages:" && smaps >> value) kib = value;
    }
    return kib;
  };
  const long long before = huge_kib();
  const Scratch s = zeroed_scratch(8 * kHugeFloats);  // 32 MiB
  const long long after = huge_kib();
  if (after == before) GTEST_SKIP() << "the kernel gave no huge page (none free?): " << mode;
  EXPECT_GE(after - before, 2048) << mode;
}

}  // namespace
}  // namespace linattn::detail
