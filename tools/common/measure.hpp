#pragma once
// Measures one Problem in a forked child: median times, peak memory and the thread count used.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>

#include "common/timing.hpp"
#include "common/workload.hpp"

namespace linattn::cli {

struct MeasureOptions {
  int threads = 0;              // linattn::set_num_threads; 0: the library's default
  bool forward = true;          // time the forward alone
  bool backward = false;        // time forward + backward
  double budget_seconds = 0.5;  // repetitions per timing, after one warm-up call
  int min_reps = 3;
  int max_reps = 50;
};

struct Measurement {
  int threads = 0;
  std::optional<Timing> forward, forward_backward;
  // Peak resident growth (PeakMeter) with the inputs allocated and the forward run, and after the
  // backward too; -1 when unmeasurable.
  int64_t peak_forward_bytes = -1, peak_total_bytes = -1;
};

// {median, min, repetitions}, or null.
nlohmann::json timing_json(const std::optional<Timing>& t);

// Refuses (exit 3) up front when estimated_bytes exceeds what the process can allocate (check_memory).
Measurement measure(const Problem& p, const MeasureOptions& options);

}  // namespace linattn::cli
