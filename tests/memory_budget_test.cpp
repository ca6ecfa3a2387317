// The chunked recurrences' scratch estimate (linattn/memory.hpp: chunked_scratch_bytes), which the bindings
// check against the memory the process may take before a call allocates anything.
#include <gtest/gtest.h>

#include <algorithm>

#include "linattn/memory.hpp"
#include "linattn/threads.hpp"

namespace linattn {
namespace {

// The delta rule's half-precision backward with grouped value heads sums a group's dq and dk rows in fp32 on
// each thread: 2 · T · K floats a live thread more than the same call without grouping or in the forward.
TEST(ChunkedScratch, HalfGroupedBackwardCountsItsGroupSums) {
  const int threads = num_threads();
  set_num_threads(2);
  ChunkedScratch s{
      .delta = true, .sequences = 1, .T = 4096, .H = 8, .K = 128, .V = 128, .chunk_size = 64, .backward = true};
  const double plain = chunked_scratch_bytes(s);
  s.half_group = 2;
  const double live = std::min(2.0, 8.0);  // a task per (sequence, head): 8 tasks on 2 threads
  EXPECT_DOUBLE_EQ(chunked_scratch_bytes(s) - plain, 4 * live * 2 * 4096 * 128);
  s.backward = false;  // the forward sums nothing
  EXPECT_DOUBLE_EQ(
      chunked_scratch_bytes(s),
      chunked_scratch_bytes({.delta = true, .sequences = 1, .T = 4096, .H = 8, .K = 128, .V = 128, .chunk_size = 64}));
  s.backward = true, s.delta = false;  // the decayed family's half backward does not either
  EXPECT_DOUBLE_EQ(chunked_scratch_bytes(s),
                   chunked_scratch_bytes(
                       {.sequences = 1, .T = 4096, .H = 8, .K = 128, .V = 128, .chunk_size = 64, .backward = true}));
  s.K = 0;  // a bad shape is left to the operator's checks
  EXPECT_EQ(chunked_scratch_bytes(s), 0.0);
  set_num_threads(threads);
}

}  // namespace
}  // namespace linattn
