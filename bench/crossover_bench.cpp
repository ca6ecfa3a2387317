// Where linear attention starts to beat exact softmax: forwards of both at B = 1, H = 8, D = E = 64 over
// a sweep of N, non-causal and causal, with 1 and 2 threads, in one program so that they share one run.
// Args: N, causal, threads.
#include <vector>

#include "bench_common.hpp"

namespace linattn::bench {
namespace {

constexpr int64_t kB = 1, kH = 8, kD = 64, kE = 64;

// The forward of `op` (the causal one when the causal arg is set) on fresh inputs.
void CrossoverRun(benchmark::State& state, const table::Operator& op, bool causal) {
  const int64_t N = state.range(0);
  const int threads = int(state.range(2));
  const ThreadScope scope(threads);
  Tensor q(kB, kH, N, kD, 1), k(kB, kH, N, kD, 2), v(kB, kH, N, kE, 3), out(kB, kH, N, kE, 4);
  std::vector<float> lse(op.has_lse ? kB * kH * N : 0);
  table::Sizes s = sizes(kB, kH, N, N, kD, kE);
  s.causal = causal;
  table::Operands operands;
  operands.q = q.view, operands.k = k.view, operands.v = v.view, operands.out = out.view, operands.lse = lse;
  time_operator(state, op, s, operands, false, threads);
}

void BM_CrossoverLinear(benchmark::State& state) {
  const bool causal = state.range(1) != 0;
  CrossoverRun(state, table::find(causal ? "causal" : "linear"), causal);
}
void BM_CrossoverSoftmax(benchmark::State& state) { CrossoverRun(state, table::find("softmax"), state.range(1) != 0); }

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
