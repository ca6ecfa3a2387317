// Where linear attention starts to beat exact softmax: forwards of both at B = 1, H = 8, D = E = 64 over
// a sweep of N, non-causal and causal, with 1 and 2 threads, in one program so that they share one run.
// Args: N, causal, threads.
#include <vector>

#include "bench_common.hpp"
#include "linattn/linear_attention.hpp"
#include "linattn/softmax_attention.hpp"

namespace linattn::bench {
namespace {

constexpr int64_t kB = 1, kH = 8, kD = 64, kE = 64;

void BM_CrossoverLinear(benchmark::State& state) {
  const int64_t N = state.range(0);
  const bool causal = state.range(1) != 0;
  const int threads = int(state.range(2));
  const ThreadScope scope(threads);
  Tensor q(kB, kH, N, kD, 1), k(kB, kH, N, kD, 2), v(kB, kH, N, kE, 3), out(kB, kH, N, kE, 4);
  LinearAttentionOptions options;
  options.causal = causal;
  for (auto _ : state) {
    linear_attention_forward(out.view, q.view, k.view, v.view, options);
    benchmark::ClobberMemory();
  }
  const int64_t M = options.feature_map->feature_dim(kD);
  set_counters(
      state,
      causal ? causal_forward_flops(kB, kH, N, M, kE, options.chunk_size) : linear_forward_flops(kB, kH, N, N, M, kE),
      2 * tensor_bytes(kB, kH, N, kD) + 2 * tensor_bytes(kB, kH, N, kE), threads);
}

void BM_CrossoverSoftmax(benchmark::State& state) {
  const int64_t N = state.range(0);
  const bool causal = state.range(1) != 0;
  const int threads = int(state.range(2));
  const ThreadScope scope(threads);
  Tensor q(kB, kH, N, kD, 1), k(kB, kH, N, kD, 2), v(kB, kH, N, kE, 3), out(kB, kH, N, kE, 4);
  std::vector<float> lse(kB * kH * N);
  SoftmaxAttentionOptions options;
  options.causal = causal;
  for (auto _ : state) {
    softmax_attention_forward(out.view, lse, q.view, k.view, v.view, options);
    benchmark::ClobberMemory();
  }
  set_counters(state, softmax_forward_flops(kB, kH, N, N, kD, kE, causal),
               2 * tensor_bytes(kB, kH, N, kD) + 2 * tensor_bytes(kB, kH, N, kE), threads);
}

#define LINATTN_CROSSOVER_BENCHMARK(fn)                                                   \
  BENCHMARK(fn)                                                                           \
      ->ArgNames({"N", "causal", "threads"})                                              \
      ->ArgsProduct({{32, 64, 128, 192, 256, 384, 512, 768, 1024, 2048}, {0, 1}, {1, 2}}) \
      ->UseRealTime()                                                                     \
      ->Unit(benchmark::kMicrosecond)
LINATTN_CROSSOVER_BENCHMARK(BM_CrossoverLinear);
LINATTN_CROSSOVER_BENCHMARK(BM_CrossoverSoftmax);

}  // namespace
}  // namespace linattn::bench

BENCHMARK_MAIN();
