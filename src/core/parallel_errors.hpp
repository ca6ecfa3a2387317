#pragma once
// Exceptions inside an OpenMP parallel region: one that leaves the region's structured block ends the
// process (std::terminate), and a thread that skips a worksharing loop leaves the others waiting at its
// barrier. So every piece of a region's work runs through ParallelErrors::run, which keeps the first
// exception (out of memory included) and lets the threads finish their loops with nothing more to do;
// the caller rethrows it after the region. Shared by every driver that runs a parallel region.
#include <atomic>
#include <exception>
#include <mutex>

namespace linattn::detail {

class ParallelErrors {
 public:
  // Runs f() unless a thread has failed already; keeps the first exception f throws.
  template <class F>
  void run(F&& f) noexcept {
    if (failed_.load(std::memory_order_relaxed)) return;
    try {
      f();
    } catch (...) {
      const std::lock_guard<std::mutex> lock(mutex_);
      if (!first_) first_ = std::current_exception();
      failed_.store(true, std::memory_order_relaxed);
    }
  }
  bool failed() const { return failed_.load(std::memory_order_relaxed); }
  // After the region: throws the first exception kept, if any.
  void rethrow() const {
    if (first_) std::rethrow_exception(first_);
  }

 private:
  std::atomic<bool> failed_{false};
  std::mutex mutex_;
  std::exception_ptr first_;
};

}  // namespace linattn::detail
