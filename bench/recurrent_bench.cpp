// The recurrent step (one token for every head against the carried state S, z), H = 8, D = E = 64, at
// positions 1K..64K: the state is prefilled to the position by the causal forward (final_state), then each
// iteration steps 256 tokens and the state is put back (untimed). Args: position, threads.
#include <vector>

#include "bench_common.hpp"
#include "linattn/linear_attention.hpp"
#include "linattn/recurrent_state.hpp"

namespace linattn::bench {
namespace {

constexpr int64_t kB = 1, kH = 8, kD = 64, kE = 64, kSteps = 256;

void BM_RecurrentStep(benchmark::State& state) {
  const int64_t position = state.range(0);
  const ThreadScope threads(int(state.range(1)));
  const LinearAttentionOptions options;
  const int64_t M = options.feature_map->feature_dim(kD);
  RecurrentState prefilled(kB, kH, M, kE, options.feature_map->name());
  {
    Tensor q(kB, kH, position, kD, 11), k(kB, kH, position, kD, 12), v(kB, kH, position, kE, 13);
    Tensor out(kB, kH, position, kE, 14);
    causal_linear_attention_forward(out.view, q.view, k.view, v.view, options, nullptr, &prefilled);
  }
  // kSteps new tokens, [1, kSteps, H, D] (token-major: each step reads one contiguous [H, D] slab).
  const Floats q = random_floats(kSteps * kH * kD, 1), k = random_floats(kSteps * kH * kD, 2),
               v = random_floats(kSteps * kH * kE, 3);
  std::vector<float> out(kSteps * kH * kE);
  RecurrentState s = prefilled;
  for (auto _ : state) {
    for (int64_t t = 0; t < kSteps; ++t)
      recurrent_step(bnhd(out.data() + t * kH * kE, kB, 1, kH, kE), bnhd(q.data() + t * kH * kD, kB, 1, kH, kD),
                     bnhd(k.data() + t * kH * kD, kB, 1, kH, kD), bnhd(v.data() + t * kH * kE, kB, 1, kH, kE), s,
                     options);
    benchmark::ClobberMemory();
    state.PauseTiming();
    s = prefilled;
    state.ResumeTiming();
  }
  set_counters(state, double(kSteps) * recurrent_step_flops(kB, kH, M, kE),
               double(kSteps) * (2 * tensor_bytes(kB, kH, 1, kD) + 2 * tensor_bytes(kB, kH, 1, kE)) +
                   2 * 4.0 * double(kB * kH * (M * kE + M)),
               int(state.range(1)));
  state.SetItemsProcessed(state.iterations() * kSteps);  // tokens per second
  state.counters["position"] = double(position);
}
BENCHMARK(BM_RecurrentStep)
    ->ArgNames({"position", "threads"})
    ->ArgsProduct({{1024, 4096, 16384, 65536}, {1, 2}})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace linattn::bench

BENCHMARK_MAIN();
