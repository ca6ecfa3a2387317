#pragma once
// What the token-by-token drivers (the decode steps, the decayed and delta-rule recurrences) share about
// threads: when a call is worth a parallel region, and a scratch that outlives the call.
#include <cstddef>
#include <cstdint>
#include <vector>

namespace linattn::detail {

// A call of the token-by-token drivers goes over threads once its work, tokens × K × V summed over its
// heads, is this large (a step of a large batch, or a long sequence). Below it, it stays on the calling
// thread and enters no parallel region: starting and ending one costs about what a small decode step's
// arithmetic does.
inline constexpr int64_t kRecurrentParallelWork = int64_t(1) << 18;

// `floats` floats of the calling thread, kept from call to call so that a decode step allocates nothing
// (a fresh buffer for a large batch was a fresh mmap, zeroed and faulted in on every token). Uninitialised
// where it grows; valid until the thread's next call. The drivers that use it do not nest.
inline float* kept_scratch(size_t floats) {
  thread_local std::vector<float> kept;
  if (kept.size() < floats) kept.resize(floats);
  return kept.data();
}

}  // namespace linattn::detail
