// The recurrent step (the table's "recurrent": one token for every head against the carried state
// S, z), H = 8, D = E = 64, at positions 1K..64K: the state is prefilled to the position by the causal forward
// (final_state), then each iteration steps 256 tokens and the state is put back (untimed). Args: position, threads.
// The decay and delta benches time the same step beside theirs (recurrence_common.hpp).
#include "recurrence_common.hpp"

namespace linattn::bench {
namespace {

void BM_RecurrentStep(benchmark::State& state) { time_linear_step(state); }
BENCHMARK(BM_RecurrentStep)->Apply(positions_by_threads<1024, 4096, 16384, 65536>);

}  // namespace
}  // namespace linattn::bench

BENCHMARK_MAIN();
