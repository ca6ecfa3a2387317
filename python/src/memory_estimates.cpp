#include "memory_estimates.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "family_args.hpp"
#include "linattn/limits.hpp"
#include "linattn/memory.hpp"
#include "linattn/threads.hpp"

namespace linattn::python {

namespace {

// Floats of the scratch all threads hold together. A lower bound of the operators' buffers (their
// largest terms only), so that a call refused here would certainly have run out of memory: per thread
// the [C, C] matrices, the [C, K] and [C, V] row blocks, the transposes [max(K, V), C], and per head
// being run its [K, V] state, with the backward's state before every chunk.
double scratch_floats(ChunkedFamily family, double T, double H, double K, double V, double N, double C, bool backward) {
  const bool decayed = family == ChunkedFamily::decayed;
  const double threads = std::max(1, num_threads());
  // The decayed family splits each sequence's heads into enough groups for every thread; the delta
  // rule runs a task per (sequence, head).
  const double groups = decayed ? std::clamp(std::ceil(threads / N), 1.0, H) : H;
  const double heads_per_task = decayed ? std::ceil(H / groups) : 1;
  const double live = std::min(threads, N * groups);
  const double chunks = std::ceil(T / C);
  const double per_head = K * V * ((decayed ? 1 : 2) + (backward ? chunks + 1 : 0));
  const double per_thread = (decayed ? 3 : 5) * C * C + 4 * C * (K + V) + std::max(K, V) * C;
  return live * (per_thread + heads_per_task * per_head);
}

}  // namespace

void check_chunked_memory(ChunkedFamily family, ConstTensorView q, ConstTensorView v, std::array<int64_t, 4> states,
                          int64_t chunk_size, int state_arrays, bool backward) {
  const double B = double(q.extent[0]), T = double(q.extent[1]), H = double(q.extent[2]), K = double(q.extent[3]),
               V = double(v.extent[3]), N = std::max(1.0, double(states[0]));
  // Bad shapes and chunk sizes are left to the operator's checks, which name the argument.
  const int64_t max_chunk = family == ChunkedFamily::decayed ? limits::kMaxDecayChunkSize : limits::kMaxDeltaChunkSize;
  if (B < 1 || T < 1 || H < 1 || K < 1 || V < 1 || chunk_size < 1 || chunk_size > max_chunk) return;
  const double C = std::min(double(chunk_size), T);
  const double outputs = B * T * H * (backward ? 2 * K + V : V);
  const double floats = outputs + state_arrays * N * H * K * V + scratch_floats(family, T, H, K, V, N, C, backward);
  const char* op = family == ChunkedFamily::decayed ? "decayed_attention" : "delta_rule";
  const std::string states_text =
      state_arrays > 0 ? ", " + std::to_string(state_arrays) + " × " + shape_text(states) + " states" : "";
  check_allocation(std::string(op) + (backward ? "_backward" : "") + " of q " + shape_text(q.extent) + " and v " +
                       shape_text(v.extent) + " with chunk_size " + std::to_string(chunk_size) + " (its outputs" +
                       states_text + " and the chunked scratch of " + std::to_string(num_threads()) + " threads)",
                   4 * floats);
}

}  // namespace linattn::python
