// FAVOR+ (the table's "favor"; m = default_favor_features(D) = 267 for D = 64) through non-causal and
// causal linear attention, and Linformer (the table's "linformer", P = 256 projected positions),
// forward and backward, [B, H, N, D] storage. The program is bench_favor; bench_performer, its old
// name, is kept as an alias (bench/CMakeLists.txt). Args: N, (causal,) threads.
#include <vector>

#include "bench_common.hpp"

namespace linattn::bench {
namespace {

constexpr int64_t kB = 4, kH = 8, kD = 64, kE = 64, kP = 256;

// Args: N, causal, threads.
void FavorRun(benchmark::State& state, bool backward) {
  const ThreadScope threads(int(state.range(2)));
  const Problem p(kB, kH, state.range(0), kD, kE);
  table::Sizes s = sizes(kB, kH, p.N, p.N, kD, kE);
  s.causal = state.range(1) != 0;
  time_operator(state, table::find("favor"), s, p.operands(), backward, int(state.range(2)));
}
void BM_FavorForward(benchmark::State& state) { FavorRun(state, false); }
void BM_FavorBackward(benchmark::State& state) { FavorRun(state, true); }

#define LINATTN_FAVOR_BENCHMARK(fn)                        \
  BENCHMARK(fn)                                            \
      ->ArgNames({"N", "causal", "threads"})               \
      ->ArgsProduct({{1024, 4096, 16384}, {0, 1}, {1, 2}}) \
      ->UseRealTime()                                      \
      ->Unit(benchmark::kMillisecond)
LINATTN_FAVOR_BENCHMARK(BM_FavorForward);
LINATTN_FAVOR_BENCHMARK(BM_FavorBackward);

// Linformer with one projection per head: E, F: [H, P, N], and what a forward saves for the backward.
struct Linformer {
  table::Sizes s;
  Tensor q, k, v, out, dout, dq, dk, dv;
  Floats E, F, lse;
  std::vector<float> dE, dF;
  explicit Linformer(int64_t N)
      : s(sizes(kB, kH, N, N, kD, kE)),
        q(kB, kH, N, kD, 1),
        k(kB, kH, N, kD, 2),
        v(kB, kH, N, kE, 3),
        out(kB, kH, N, kE, 4),
        dout(kB, kH, N, kE, 7),
        dq(kB, kH, N, kD, 8),
        dk(kB, kH, N, kD, 9),
        dv(kB, kH, N, kE, 10),
        E(random_floats(kH * kP * N, 5, -0.05f, 0.05f)),
        F(random_floats(kH * kP * N, 6, -0.05f, 0.05f)),
        lse(kB * kH * N),
        dE(E.size()),
        dF(F.size()) {
    s.projected = kP;
  }
  table::Operands operands() {
    table::Operands a;
    a.q = q.view, a.k = k.view, a.v = v.view, a.out = out.view, a.lse = lse, a.E = E, a.F = F;
    a.dout = dout.view, a.dq = dq.view, a.dk = dk.view, a.dv = dv.view, a.dE = dE, a.dF = dF;
    return a;
  }
};

void LinformerRun(benchmark::State& state, bool backward) {
  const ThreadScope threads(int(state.range(1)));
  Linformer l(state.range(0));
  time_operator(state, table::find("linformer"), l.s, l.operands(), backward, int(state.range(1)));
}
void BM_LinformerForward(benchmark::State& state) { LinformerRun(state, false); }
void BM_LinformerBackward(benchmark::State& state) { LinformerRun(state, true); }

BENCHMARK(BM_LinformerForward)->Apply(sizes_by_threads<1024, 4096, 16384>);
BENCHMARK(BM_LinformerBackward)->Apply(sizes_by_threads<1024, 4096, 16384>);

}  // namespace
}  // namespace linattn::bench

BENCHMARK_MAIN();
