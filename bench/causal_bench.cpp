// Causal linear attention (chunked), forward and backward, against the token-by-token prefix-sum
// baseline on the same inputs. elu+1, B = 4, H = 8, D = E = 64, [B, H, N, D] storage (…Bnhd: [B, N, H, D]).
// Args: N, threads.
#include "baseline/prefix_sum_causal.hpp"
#include "bench_common.hpp"
#include "linattn/linear_attention.hpp"

namespace linattn::bench {
namespace {

LinearAttentionOptions causal_options() {
  LinearAttentionOptions options;
  options.causal = true;
  return options;
}

void CausalForward(benchmark::State& state, Storage storage) {
  const ThreadScope threads(int(state.range(1)));
  Problem p(4, 8, state.range(0), 64, 64, storage);
  const LinearAttentionOptions options = causal_options();
  for (auto _ : state) {
    causal_linear_attention_forward(p.out.view, p.q.view, p.k.view, p.v.view, options);
    benchmark::ClobberMemory();
  }
  const int64_t M = options.feature_map->feature_dim(p.D);
  set_counters(state, causal_forward_flops(p.B, p.H, p.N, M, p.E, options.chunk_size), p.forward_bytes(),
               int(state.range(1)));
  // The flops the strips actually multiply (fewer than the chunked algorithm's count above).
  state.counters["FLOPS_executed"] =
      benchmark::Counter(causal_forward_flops_executed(p.B, p.H, p.N, M, p.E, options.chunk_size),
                         benchmark::Counter::kIsIterationInvariantRate);
  state.counters["chunk"] = double(options.chunk_size);
}
void BM_CausalForward(benchmark::State& state) { CausalForward(state, Storage::bhnd); }
void BM_CausalForwardBnhd(benchmark::State& state) { CausalForward(state, Storage::bnhd); }

void CausalBackward(benchmark::State& state, Storage storage) {
  const ThreadScope threads(int(state.range(1)));
  Problem p(4, 8, state.range(0), 64, 64, storage);
  const LinearAttentionOptions options = causal_options();
  for (auto _ : state) {
    causal_linear_attention_backward(p.dq.view, p.dk.view, p.dv.view, p.dout.view, p.q.view, p.k.view, p.v.view,
                                     options);
    benchmark::ClobberMemory();
  }
  set_counters(state,
               causal_backward_flops(p.B, p.H, p.N, options.feature_map->feature_dim(p.D), p.E, options.chunk_size),
               p.backward_bytes(), int(state.range(1)));
  state.counters["chunk"] = double(options.chunk_size);
}
void BM_CausalBackward(benchmark::State& state) { CausalBackward(state, Storage::bhnd); }
void BM_CausalBackwardBnhd(benchmark::State& state) { CausalBackward(state, Storage::bnhd); }

// The baseline's FLOPS count its own (token-by-token) work; compare the two by time.
void BM_PrefixSumForward(benchmark::State& state) {
  const ThreadScope threads(int(state.range(1)));
  Problem p(4, 8, state.range(0), 64, 64);
  const LinearAttentionOptions options = causal_options();
  for (auto _ : state) {
    baseline::prefix_sum_causal_forward(p.out.data.data(), p.q.data.data(), p.k.data.data(), p.v.data.data(), p.B, p.H,
                                        p.N, p.D, p.E, *options.feature_map, options.eps);
    benchmark::ClobberMemory();
  }
  set_counters(state, double(p.N) * recurrent_step_flops(p.B, p.H, options.feature_map->feature_dim(p.D), p.E),
               p.forward_bytes(), int(state.range(1)));
}

void BM_PrefixSumBackward(benchmark::State& state) {
  const ThreadScope threads(int(state.range(1)));
  Problem p(4, 8, state.range(0), 64, 64);
  const LinearAttentionOptions options = causal_options();
  for (auto _ : state) {
    baseline::prefix_sum_causal_backward(p.dq.data.data(), p.dk.data.data(), p.dv.data.data(), p.dout.data.data(),
                                         p.q.data.data(), p.k.data.data(), p.v.data.data(), p.B, p.H, p.N, p.D, p.E,
                                         *options.feature_map, options.eps);
    benchmark::ClobberMemory();
  }
  set_counters(state, prefix_sum_backward_flops(p.B, p.H, p.N, options.feature_map->feature_dim(p.D), p.E),
               p.backward_bytes(), int(state.range(1)));
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
