/* LINATTN_UNDER_SANITIZER: 1 when this test program runs under AddressSanitizer or ThreadSanitizer. GCC
 * defines __SANITIZE_ADDRESS__; clang (the sanitizer build's clang 14 included) only answers
 * __has_feature. linattn_address_space_limit_untestable(): whether a test that limits the address space
 * (RLIMIT_AS) must skip: under the sanitizers, whose shadow reservations cannot live under such a limit
 * ("ERROR: Failed to mmap"), and under qemu-user (scripts/cross_test.sh exports QEMU_CPU), which reserves
 * the guest's address space itself, so the limit never reaches the guest's allocations, and where a death
 * test cannot re-execute the binary. C and C++. */
#ifndef LINATTN_TESTS_SUPPORT_SANITIZERS_H
#define LINATTN_TESTS_SUPPORT_SANITIZERS_H

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define LINATTN_UNDER_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define LINATTN_UNDER_SANITIZER 1
#endif
#endif
#ifndef LINATTN_UNDER_SANITIZER
#define LINATTN_UNDER_SANITIZER 0
#endif

#include <stdlib.h>

static inline int linattn_address_space_limit_untestable(void) {
  return LINATTN_UNDER_SANITIZER || getenv("QEMU_CPU") != NULL;
}

#endif
