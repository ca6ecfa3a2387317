#include "common/timing.hpp"

#include <algorithm>
#include <chrono>
#include <vector>

namespace linattn::cli {

Timing time_median(const std::function<void()>& fn, double budget_seconds, int min_reps, int max_reps) {
  using clock = std::chrono::steady_clock;
  fn();
  std::vector<double> seconds;
  double total = 0;
  while (int(seconds.size()) < max_reps && (int(seconds.size()) < min_reps || total < budget_seconds)) {
    const auto start = clock::now();
    fn();
    seconds.push_back(std::chrono::duration<double>(clock::now() - start).count());
    total += seconds.back();
  }
  std::sort(seconds.begin(), seconds.end());
  const size_t n = seconds.size();
  Timing t;
  t.median = n % 2 ? seconds[n / 2] : (seconds[n / 2 - 1] + seconds[n / 2]) / 2;
  t.min = seconds.front();
  t.repetitions = int(n);
  return t;
}

}  // namespace linattn::cli
