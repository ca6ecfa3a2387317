#include "memory_estimates.hpp"

#include <algorithm>
#include <string>

#include "family_args.hpp"
#include "linattn/memory.hpp"
#include "linattn/threads.hpp"

namespace linattn::python {

void check_chunked_memory(ChunkedFamily family, ConstTensorView q, ConstTensorView v, std::array<int64_t, 4> states,
                          int64_t chunk_size, int state_arrays, bool backward, bool half) {
  // Grouped value heads: the outputs of v's side, the states and the chunked scratch are per value head (HV, a
  // multiple of q's H); dq and dk have q's heads. Query groups (q with a multiple of v's heads): out has q's
  // heads, the states and the scratch v's.
  const double B = double(q.extent[0]), T = double(q.extent[1]), H = double(q.extent[2]), HV = double(v.extent[2]),
               K = double(q.extent[3]), V = double(v.extent[3]), N = std::max(1.0, double(states[0]));
  // Bad shapes are left to the operator's checks, which name the argument.
  if (B < 1 || T < 1 || H < 1 || HV < 1 || K < 1 || V < 1) return;
  if (H > HV ? q.extent[2] % v.extent[2] != 0 : v.extent[2] % q.extent[2] != 0) return;
  const double outputs = B * T * (std::max(H, HV) * V + (backward ? 2 * H * K : 0));
  const double scratch =
      chunked_scratch_bytes({family == ChunkedFamily::delta, states[0], q.extent[1], v.extent[2], q.extent[3],
                             v.extent[3], chunk_size, backward, half && HV > H ? v.extent[2] / q.extent[2] : 1});
  const char* op = family == ChunkedFamily::decayed ? "decayed_attention" : "delta_rule";
  const std::string states_text =
      state_arrays > 0 ? ", " + std::to_string(state_arrays) + " × " + shape_text(states) + " states" : "";
  check_allocation(std::string(op) + (backward ? "_backward" : "") + " of q " + shape_text(q.extent) + " and v " +
                       shape_text(v.extent) + " with chunk_size " + std::to_string(chunk_size) + " (its outputs" +
                       states_text + " and the chunked scratch of " + std::to_string(num_threads()) + " threads)",
                   4 * (outputs + state_arrays * N * HV * K * V) + scratch);
}

}  // namespace linattn::python
