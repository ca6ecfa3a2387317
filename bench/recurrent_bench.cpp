// The recurrent step (the table's "recurrent": one token for every head against the carried state
// S, z), H = 8, D = E = 64, at positions 1K..64K: the state is prefilled to the position by the causal forward
// (final_state), then each iteration steps 256 tokens and the state is put back (untimed). Args: position, threads.
#include <vector>

#include "bench_common.hpp"

namespace linattn::bench {
namespace {

constexpr int64_t kB = 1, kH = 8, kD = 64, kE = 64, kSteps = 256;

void BM_RecurrentStep(benchmark::State& state) {
  const int64_t position = state.range(0);
  const ThreadScope threads(int(state.range(1)));
  const table::Operator& op = table::find("recurrent");
  const table::Sizes s = sizes(kB, kH, kSteps, kSteps, kD, kE);
  const table::Options table_options = op.options(s);
  const LinearAttentionOptions& options = table_options.linear;
  RecurrentState prefilled(kB, kH, op.feature_dim(s), kE, options.feature_map->name());
  {
    Tensor q(kB, kH, position, kD, 11), k(kB, kH, position, kD, 12), v(kB, kH, position, kE, 13);
    Tensor out(kB, kH, position, kE, 14);
    causal_linear_attention_forward(out.view, q.view, k.view, v.view, options, nullptr, &prefilled);
  }
  // kSteps new tokens, [1, kSteps, H, D] (token-major: each step reads one contiguous [H, D] slab).
  const Floats q = random_floats(kSteps * kH * kD, 1), k = random_floats(kSteps * kH * kD, 2),
               v = random_floats(kSteps * kH * kE, 3);
  std::vector<float> out(kSteps * kH * kE);
  RecurrentState carried = prefilled;
  table::Operands operands;
  operands.q = bnhd(q.data(), kB, kSteps, kH, kD), operands.k = bnhd(k.data(), kB, kSteps, kH, kD);
  operands.v = bnhd(v.data(), kB, kSteps, kH, kE), operands.out = bnhd(out.data(), kB, kSteps, kH, kE);
  operands.state = &carried;
  for (auto _ : state) {
    op.forward(operands, table_options);  // kSteps recurrent steps
    benchmark::ClobberMemory();
    state.PauseTiming();
    carried = prefilled;
    state.ResumeTiming();
  }
  set_counters(state, op, s, false, int(state.range(1)));
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
