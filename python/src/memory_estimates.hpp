#pragma once
// What a chunked recurrence call (decay.cpp, delta.cpp) will allocate, checked against the memory the
// process may still use before anything is allocated: the outputs, the [N, H, K, V] state arrays the
// binding makes, and the scratch the operator's threads hold (linattn::chunked_scratch_bytes). Inputs
// of stride 0 describe far more than they hold, so a request of petabytes used to reach numpy or the
// operator and end in the OOM killer.
#include <array>
#include <cstdint>

#include "linattn/view.hpp"

namespace linattn::python {

// Which operator: the decayed family (decayed_attention) or the delta rule (delta_rule).
enum class ChunkedFamily { decayed, delta };

// Throws linattn::OutOfMemory (Python: MemoryError) naming the call, its shapes and the estimate when
// it exceeds linattn::available_memory(). q [B, T, H, K], v [B, T, H, V]; states: [N, H, K, V];
// state_arrays: how many arrays of that shape the binding allocates (a final state, dinitial_state); half: a
// half-precision call (its backward with grouped value heads sums dq and dk in fp32).
void check_chunked_memory(ChunkedFamily family, ConstTensorView q, ConstTensorView v, std::array<int64_t, 4> states,
                          int64_t chunk_size, int state_arrays, bool backward, bool half = false);

}  // namespace linattn::python
