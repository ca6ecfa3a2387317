// Causal linear attention (chunked; the table's "causal"), forward and backward, against the token-by-
// token prefix-sum baseline on the same inputs. elu+1, B = 4, H = 8, D = E = 64, [B, H, N, D] storage
// (…Bnhd: [B, N, H, D]). Args: N, threads.
#include "baseline/prefix_sum_causal.hpp"
#include "bench_common.hpp"

namespace linattn::bench {
namespace {

void CausalRun(benchmark::State& state, Storage storage, bool backward) {
  const ThreadScope threads(int(state.range(1)));
  const Problem p(4, 8, state.range(0), 64, 64, storage);
  const table::Sizes s = sizes(p.B, p.H, p.N, p.N, p.D, p.E);
  time_operator(state, table::find("causal"), s, p.operands(), backward, int(state.range(1)));
  // The flops the strips actually multiply (fewer than the chunked algorithm's count above).
  if (!backward)
    state.counters["FLOPS_executed"] =
        benchmark::Counter(table::causal_forward_flops_executed(s), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["chunk"] = double(s.chunk);
}
void BM_CausalForward(benchmark::State& state) { CausalRun(state, Storage::bhnd, false); }
void BM_CausalForwardBnhd(benchmark::State& state) { CausalRun(state, Storage::bnhd, false); }
void BM_CausalBackward(benchmark::State& state) { CausalRun(state, Storage::bhnd, true); }
void BM_CausalBackwardBnhd(benchmark::State& state) { CausalRun(state, Storage::bnhd, true); }

// The baseline's FLOPS count its own (token-by-token) work: the recurrent step's count per token
// forward; compare the two by time.
void BM_PrefixSumForward(benchmark::State& state) {
  const ThreadScope threads(int(state.range(1)));
  Problem p(4, 8, state.range(0), 64, 64);
  const LinearAttentionOptions options;
  for (auto _ : state) {
    baseline::prefix_sum_causal_forward(p.out.data.data(), p.q.data.data(), p.k.data.data(), p.v.data.data(), p.B, p.H,
                                        p.N, p.D, p.E, *options.feature_map, options.eps);
    benchmark::ClobberMemory();
  }
  const table::Sizes s = sizes(p.B, p.H, p.N, p.N, p.D, p.E);
  set_counters(state, table::find("recurrent").forward_flops(s), table::find("causal").forward_bytes(s),
               int(state.range(1)));
}

void BM_PrefixSumBackward(benchmark::State& state) {
  const ThreadScope threads(int(state.range(1)));
  Problem p(4, 8, state.range(0), 64, 64);
  const LinearAttentionOptions options;
  for (auto _ : state) {
    baseline::prefix_sum_causal_backward(p.dq.data.data(), p.dk.data.data(), p.dv.data.data(), p.dout.data.data(),
                                         p.q.data.data(), p.k.data.data(), p.v.data.data(), p.B, p.H, p.N, p.D, p.E,
                                         *options.feature_map, options.eps);
    benchmark::ClobberMemory();
  }
  const table::Sizes s = sizes(p.B, p.H, p.N, p.N, p.D, p.E);
  set_counters(state, baseline::prefix_sum_backward_flops(p.B, p.H, p.N, options.feature_map->feature_dim(p.D), p.E),
               table::find("causal").backward_bytes(s), int(state.range(1)));
}

// N = 16384 is issue 3's target 2.
BENCHMARK(BM_CausalForward)->Apply(sizes_by_threads<1024, 16384>);
BENCHMARK(BM_PrefixSumForward)->Apply(sizes_by_threads<1024, 16384>);
BENCHMARK(BM_CausalBackward)->Apply(sizes_by_threads<1024, 16384>);
BENCHMARK(BM_PrefixSumBackward)->Apply(sizes_by_threads<1024, 16384>);
// The same operators on [B, N, H, D] storage (the library's logical order).
BENCHMARK(BM_CausalForwardBnhd)->Apply(sizes_by_threads<16384>);
BENCHMARK(BM_CausalBackwardBnhd)->Apply(sizes_by_threads<16384>);

}  // namespace
}  // namespace linattn::bench

BENCHMARK_MAIN();
