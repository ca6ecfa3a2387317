// The chunked recurrences' scratch estimate (linattn/memory.hpp: chunked_scratch_bytes), which the bindings
// check against the memory the process may take before a call allocates anything.
#include <gtest/gtest.h>

#include <algorithm>

#include "linattn/memory.hpp"
#include "linattn/threads.hpp"

namespace linattn {
namespace {

// A half-precision backward with grouped value heads sums each q/k head's dq and dk rows in fp32: 2 · T · K floats
// per q/k head of a task, on each live thread, more than the same call without grouping; the forward sums nothing.
TEST(ChunkedScratch, HalfGroupedBackwardCountsItsGroupSums) {
  const int threads = num_threads();
  set_num_threads(2);
  for (const bool delta : {true, false}) {
    SCOPED_TRACE(delta ? "delta rule" : "decayed family");
    ChunkedScratch s{
        .delta = delta, .sequences = 1, .T = 4096, .H = 8, .K = 128, .V = 128, .chunk_size = 64, .backward = true};
    const double plain = chunked_scratch_bytes(s);
    s.half_group = 2;
    // The delta rule's backward runs a task per (sequence, value head): one q/k head's sums; the decayed
    // family's splits the 8 value heads into 2 tasks of 4 (2 threads, 1 sequence): two q/k heads' sums.
    const double qk_heads_per_task = delta ? 1 : 2, live = 2;
    EXPECT_DOUBLE_EQ(chunked_scratch_bytes(s) - plain, 4 * live * qk_heads_per_task * 2 * 4096 * 128);
    s.backward = false;
    EXPECT_DOUBLE_EQ(chunked_scratch_bytes(s),
                     chunked_scratch_bytes(
                         {.delta = delta, .sequences = 1, .T = 4096, .H = 8, .K = 128, .V = 128, .chunk_size = 64}));
    s.K = 0;  // a bad shape is left to the operator's checks
    EXPECT_EQ(chunked_scratch_bytes(s), 0.0);
  }
  set_num_threads(threads);
}

}  // namespace
}  // namespace linattn
