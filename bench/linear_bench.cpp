// Non-causal linear attention, forward and backward, elu+1, B = 4, H = 8, D = E = 64, [B, H, N, D] storage.
// Args: N, threads.
#include "bench_common.hpp"
#include "linattn/linear_attention.hpp"

namespace linattn::bench {
namespace {

void LinearForward(benchmark::State& state, Storage storage) {
  const ThreadScope threads(int(state.range(1)));
  Problem p(4, 8, state.range(0), 64, 64, storage);
  const LinearAttentionOptions options;
  for (auto _ : state) {
    linear_attention_forward(p.out.view, p.q.view, p.k.view, p.v.view, options);
    benchmark::ClobberMemory();
  }
  set_counters(state, linear_forward_flops(p.B, p.H, p.N, p.N, options.feature_map->feature_dim(p.D), p.E),
               p.forward_bytes(), int(state.range(1)));
}
void BM_LinearForward(benchmark::State& state) { LinearForward(state, Storage::bhnd); }
void BM_LinearForwardBnhd(benchmark::State& state) { LinearForward(state, Storage::bnhd); }

void LinearBackward(benchmark::State& state, Storage storage) {
  const ThreadScope threads(int(state.range(1)));
  Problem p(4, 8, state.range(0), 64, 64, storage);
  const LinearAttentionOptions options;
  for (auto _ : state) {
    linear_attention_backward(p.dq.view, p.dk.view, p.dv.view, p.dout.view, p.q.view, p.k.view, p.v.view, options);
    benchmark::ClobberMemory();
  }
  set_counters(state, linear_backward_flops(p.B, p.H, p.N, p.N, options.feature_map->feature_dim(p.D), p.E),
               p.backward_bytes(), int(state.range(1)));
}
void BM_LinearBackward(benchmark::State& state) { LinearBackward(state, Storage::bhnd); }
void BM_LinearBackwardBnhd(benchmark::State& state) { LinearBackward(state, Storage::bnhd); }

// N = 16384 is issue 3's target 1.
BENCHMARK(BM_LinearForward)->Apply(sizes_by_threads<1024, 16384>);
BENCHMARK(BM_LinearBackward)->Apply(sizes_by_threads<1024, 16384>);
// The same operators on [B, N, H, D] storage (the library's logical order).
BENCHMARK(BM_LinearForwardBnhd)->Apply(sizes_by_threads<16384>);
BENCHMARK(BM_LinearBackwardBnhd)->Apply(sizes_by_threads<16384>);

}  // namespace
}  // namespace linattn::bench

BENCHMARK_MAIN();
