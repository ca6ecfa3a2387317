// Performer (FAVOR+ features, m = default_favor_features(D) = 267 for D = 64) through non-causal and causal
// linear attention, and Linformer (P = 256 projected positions), forward and backward, [B, H, N, D] storage.
// Args: N, threads.
#include <vector>

#include "bench_common.hpp"
#include "linattn/linear_attention.hpp"
#include "linattn/linformer.hpp"
#include "linattn/favor.hpp"

namespace linattn::bench {
namespace {

constexpr int64_t kB = 4, kH = 8, kD = 64, kE = 64, kP = 256;

LinearAttentionOptions favor_options(bool causal) {
  LinearAttentionOptions options;
  options.feature_map = favor_feature_map(kD);
  options.causal = causal;
  return options;
}

double favor_forward_flops(const LinearAttentionOptions& o, int64_t N) {
  const int64_t M = o.feature_map->feature_dim(kD);
  // φ itself: ωᵀx for every row of q and k (2·D·M each).
  const double features = 2.0 * double(kB * kH * N) * 2.0 * double(kD * M);
  return features +
         (o.causal ? causal_forward_flops(kB, kH, N, M, kE, o.chunk_size) : linear_forward_flops(kB, kH, N, N, M, kE));
}
double favor_backward_flops(const LinearAttentionOptions& o, int64_t N) {
  const int64_t M = o.feature_map->feature_dim(kD);
  // φ again and its backward ω·∂φ, for q and k.
  const double features = 2.0 * double(kB * kH * N) * 4.0 * double(kD * M);
  return features + (o.causal ? causal_backward_flops(kB, kH, N, M, kE, o.chunk_size)
                              : linear_backward_flops(kB, kH, N, N, M, kE));
}

// Args: N, causal, threads.
void BM_FavorForward(benchmark::State& state) {
  const ThreadScope threads(int(state.range(2)));
  Problem p(kB, kH, state.range(0), kD, kE);
  const LinearAttentionOptions options = favor_options(state.range(1) != 0);
  for (auto _ : state) {
    linear_attention_forward(p.out.view, p.q.view, p.k.view, p.v.view, options);
    benchmark::ClobberMemory();
  }
  set_counters(state, favor_forward_flops(options, p.N), p.forward_bytes(), int(state.range(2)));
}

void BM_FavorBackward(benchmark::State& state) {
  const ThreadScope threads(int(state.range(2)));
  Problem p(kB, kH, state.range(0), kD, kE);
  const LinearAttentionOptions options = favor_options(state.range(1) != 0);
  for (auto _ : state) {
    linear_attention_backward(p.dq.view, p.dk.view, p.dv.view, p.dout.view, p.q.view, p.k.view, p.v.view, options);
    benchmark::ClobberMemory();
  }
  set_counters(state, favor_backward_flops(options, p.N), p.backward_bytes(), int(state.range(2)));
}

#define LINATTN_FAVOR_BENCHMARK(fn)                        \
  BENCHMARK(fn)                                            \
      ->ArgNames({"N", "causal", "threads"})               \
      ->ArgsProduct({{1024, 4096, 16384}, {0, 1}, {1, 2}}) \
      ->UseRealTime()                                      \
      ->Unit(benchmark::kMillisecond)
LINATTN_FAVOR_BENCHMARK(BM_FavorForward);
LINATTN_FAVOR_BENCHMARK(BM_FavorBackward);

// Linformer with one projection per head: E, F: [H, P, N].
struct Linformer {
  Tensor q, k, v, out;
  Floats E, F, lse;
  LinformerOptions options;
  explicit Linformer(int64_t N)
      : q(kB, kH, N, kD, 1),
        k(kB, kH, N, kD, 2),
        v(kB, kH, N, kE, 3),
        out(kB, kH, N, kE, 4),
        E(random_floats(kH * kP * N, 5, -0.05f, 0.05f)),
        F(random_floats(kH * kP * N, 6, -0.05f, 0.05f)),
        lse(kB * kH * N) {
    options.projected_length = kP;
    options.max_length = N;
  }
  void forward() { linformer_attention_forward(out.view, lse, q.view, k.view, v.view, E, F, options); }
};

void BM_LinformerForward(benchmark::State& state) {
  const int64_t N = state.range(0);
  const ThreadScope threads(int(state.range(1)));
  Linformer l(N);
  for (auto _ : state) {
    l.forward();
    benchmark::ClobberMemory();
  }
  set_counters(state, linformer_forward_flops(kB, kH, N, N, kP, kD, kE),
               2 * tensor_bytes(kB, kH, N, kD) + 2 * tensor_bytes(kB, kH, N, kE) + 2 * tensor_bytes(1, kH, kP, N),
               int(state.range(1)));
}

void BM_LinformerBackward(benchmark::State& state) {
  const int64_t N = state.range(0);
  const ThreadScope threads(int(state.range(1)));
  Linformer l(N);
  l.forward();
  Tensor dout(kB, kH, N, kE, 7), dq(kB, kH, N, kD, 8), dk(kB, kH, N, kD, 9), dv(kB, kH, N, kE, 10);
  std::vector<float> dE(l.E.size()), dF(l.F.size());
  for (auto _ : state) {
    linformer_attention_backward(dq.view, dk.view, dv.view, dE, dF, dout.view, l.q.view, l.k.view, l.v.view, l.E, l.F,
                                 l.out.view, l.lse, l.options);
    benchmark::ClobberMemory();
  }
  set_counters(state, linformer_backward_flops(kB, kH, N, N, kP, kD, kE),
               4 * tensor_bytes(kB, kH, N, kD) + 4 * tensor_bytes(kB, kH, N, kE) + 4 * tensor_bytes(1, kH, kP, N),
               int(state.range(1)));
}

BENCHMARK(BM_LinformerForward)->Apply(sizes_by_threads<1024, 4096, 16384>);
BENCHMARK(BM_LinformerBackward)->Apply(sizes_by_threads<1024, 4096, 16384>);

}  // namespace
}  // namespace linattn::bench

BENCHMARK_MAIN();
