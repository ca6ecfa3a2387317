// Non-causal linear attention, forward and backward, elu+1, B = 4, H = 8, D = E = 64, [B, H, N, D] storage.
// The operator, its calls and its flop and byte models are the table's "linear". Args: N, threads.
#include "bench_common.hpp"

namespace linattn::bench {
namespace {

void LinearRun(benchmark::State& state, Storage storage, bool backward) {
  const ThreadScope threads(int(state.range(1)));
  const Problem p(4, 8, state.range(0), 64, 64, storage);
  time_operator(state, table::find("linear"), sizes(p.B, p.H, p.N, p.N, p.D, p.E), p.operands(), backward,
                int(state.range(1)));
}
void BM_LinearForward(benchmark::State& state) { LinearRun(state, Storage::bhnd, false); }
void BM_LinearForwardBnhd(benchmark::State& state) { LinearRun(state, Storage::bnhd, false); }
void BM_LinearBackward(benchmark::State& state) { LinearRun(state, Storage::bhnd, true); }
void BM_LinearBackwardBnhd(benchmark::State& state) { LinearRun(state, Storage::bnhd, true); }

// N = 16384 is issue 3's target 1.
BENCHMARK(BM_LinearForward)->Apply(sizes_by_threads<1024, 16384>);
BENCHMARK(BM_LinearBackward)->Apply(sizes_by_threads<1024, 16384>);
// The same operators on [B, N, H, D] storage (the library's logical order).
BENCHMARK(BM_LinearForwardBnhd)->Apply(sizes_by_threads<16384>);
BENCHMARK(BM_LinearBackwardBnhd)->Apply(sizes_by_threads<16384>);

}  // namespace
}  // namespace linattn::bench

BENCHMARK_MAIN();
