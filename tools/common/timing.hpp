#pragma once
// Wall-clock timing: one warm-up call, then repetitions until a time budget, reported as the median.
#include <functional>

namespace linattn::cli {

struct Timing {
  double median = 0;  // seconds
  double min = 0;
  int repetitions = 0;
};

// Calls fn once to warm up (threads, page faults, caches), then at least min_reps and at most
// max_reps times, stopping once budget_seconds of repetitions have run.
Timing time_median(const std::function<void()>& fn, double budget_seconds = 0.5, int min_reps = 3, int max_reps = 50);

}  // namespace linattn::cli
