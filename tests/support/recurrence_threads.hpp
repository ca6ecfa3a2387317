#pragma once
// The token-by-token forwards (decayed family, delta rule) against the oracle, and over 1, 2 and 3 threads: a
// call large enough for threads splits its sequences' heads into blocks by the thread count, and the result
// must not move; the chunked passes at one thread and at two.
#include <gtest/gtest.h>

#include <array>
#include <vector>

#include "linattn/reference.hpp"
#include "linattn/threads.hpp"
#include "support/tensors.hpp"

namespace linattn::testing {

// run(out, state) writes the forward's output into out and advances state (the initial state on entry): out is
// finite, and out and the final state are within 2e-5 of the oracle's.
template <class Run>
void expect_recurrence(std::array<int64_t, 4> out_extent, Layout layout, const std::vector<float>& initial,
                       const reference::Tensor& oracle_out, const std::vector<double>& oracle_state, Run&& run) {
  Tensor32 out = make_tensor(out_extent, layout);
  std::vector<float> state = initial;
  run(out.view, state);
  EXPECT_TRUE(all_finite(out.view));
  EXPECT_LT(relative_error(out.view, oracle_out), 2e-5);
  EXPECT_LT(relative_error(state, oracle_state), 2e-5);
}

// The same over 1, 2 and 3 threads (run as above). Each
// thread count's out and final state are within 2e-5 of the oracle's and bit for bit the single thread's.
template <class Run>
void expect_recurrence_over_threads(std::array<int64_t, 4> out_extent, Layout layout, const std::vector<float>& initial,
                                    const reference::Tensor& oracle_out, const std::vector<double>& oracle_state,
                                    Run&& run) {
  const int threads = num_threads();
  std::vector<float> first_out, first_state;
  for (int n : {1, 2, 3}) {
    set_num_threads(n);
    Tensor32 out = make_tensor(out_extent, layout);
    std::vector<float> state = initial;
    run(out.view, state);
    EXPECT_LT(relative_error(out.view, oracle_out), 2e-5) << n << " threads";
    EXPECT_LT(relative_error(state, oracle_state), 2e-5) << n << " threads";
    if (n == 1) first_out = out.storage, first_state = state;
    EXPECT_EQ(out.storage, first_out) << n << " threads";
    EXPECT_EQ(state, first_state) << n << " threads";
  }
  set_num_threads(threads);
}

// The chunked forward and backward, run(), at one thread and at two: each of the results' `fields`
// (Tensor32 or std::vector<float> members) the same bit for bit. The thread count is restored.
inline const std::vector<float>& bits(const Tensor32& x) { return x.storage; }
inline const std::vector<float>& bits(const std::vector<float>& x) { return x; }
template <class Run, class... Fields>
void expect_same_at_one_and_two_threads(Run&& run, Fields... fields) {
  const int threads = num_threads();
  set_num_threads(1);
  const auto one = run();
  set_num_threads(2);
  const auto two = run();
  set_num_threads(threads);
  auto expect_same = [&](auto field) { EXPECT_EQ(bits(one.*field), bits(two.*field)); };
  (expect_same(fields), ...);
}

}  // namespace linattn::testing
