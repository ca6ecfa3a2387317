// The DPLR delta rule (RWKV-7, issue 40), B = 4, H = 8, K = V = 64, [B, T, H, K] storage: the token-by-token
// forward (dplr_delta_rule_recurrent_forward) and the chunked forward (dplr_delta_rule_forward, chunks of 64)
// on the same operands, back to back in one process. a = −κ̂, b = κ̂ ⊙ σ(z) (RWKV-7's removal key and
// in-context learning rate, as the table's rwkv7 row draws them), gk the recurrence harness's log decays
// (logsigmoid(N(0, 1)) / 16, one per key column). FLOPS counts each algorithm's own work (below), so that
// the chunked forward's is its fraction of bench_peak's FMA peak; items are tokens, the like-for-like rate.
// Args: T, threads.
#include <cmath>
#include <random>

#include "linattn/dplr.hpp"
#include "recurrence_common.hpp"

namespace linattn::bench {
namespace {

// a and b for every (batch, token, head) of p, drawn from seed.
struct LowRank {
  Floats a, b;
  LowRank(int64_t rows, uint64_t seed) : a(size_t(rows * kK)), b(size_t(rows * kK)) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<double> normal;
    double kappa[kK];
    for (int64_t r = 0; r < rows; ++r) {
      double norm = 0;
      for (double& x : kappa) x = normal(rng), norm += x * x;
      for (int64_t c = 0; c < kK; ++c) {
        const double unit = kappa[c] / std::sqrt(norm);
        a[size_t(r * kK + c)] = float(-unit), b[size_t(r * kK + c)] = float(unit / (1.0 + std::exp(-normal(rng))));
      }
    }
  }
};

// Multiply-adds per chunk of C tokens and head (K, V the head dims), the chunked algorithm of
// src/ops/dplr/dplr_chunk.hpp: the four score triangles (2·C²·K), the triangular inverse (C³/6), the
// low-rank reads A_ak V and T R and the outputs P_qb U and P_qk V (½·C²·V each), the state's three
// products with the chunk (Ae S, Qe S, Bdᵀ U and Kdᵀ V: 4·C·K·V). At C = K = V = 64: 33.4K per token, 1.8×
// the recurrence's 9·K·V / 2 (the table's rwkv7 row).
double chunk_multiply_adds(double C, double K, double V) {
  return 2 * C * C * K + C * C * C / 6 + 2 * C * C * V + 4 * C * K * V;
}

void DplrForward(benchmark::State& state, bool chunked) {
  const int64_t T = state.range(0);
  const int threads = int(state.range(1));
  const ThreadScope scope(threads);
  const RecurrenceProblem p(kB, T, kK);
  const LowRank ab(kB * T * kH, 21);
  const ConstTensorView a = bnhd(ab.a.data(), kB, T, kH, kK), b = bnhd(ab.b.data(), kB, T, kH, kK);
  const DplrOptions options;
  const auto run = chunked ? dplr_delta_rule_forward : dplr_delta_rule_recurrent_forward;
  Floats S(size_t(kB * kH * kK * kV));
  for (auto _ : state) {
    std::fill(S.begin(), S.end(), 0.0f);
    run(p.out.view, p.q.view, p.k.view, p.v.view, a, b, p.gate(), std::span<float>(S.data(), S.size()), options);
    benchmark::ClobberMemory();
  }
  const double chunks = double(T) / double(options.chunk_size), heads = double(kB * kH);
  const double flops = chunked ? 2 * heads * chunks * chunk_multiply_adds(double(options.chunk_size), kK, kV)
                               : 9.0 * heads * double(T) * kK * kV;
  // q, k, a, b, gk and v read, out written.
  set_counters(state, flops, 4.0 * heads * double(T) * double(5 * kK + 2 * kV), threads);
  state.SetItemsProcessed(state.iterations() * kB * T);
}

const bool registered = register_runs<bool>("Forward", {{"Rwkv7Recurrent", false}, {"Rwkv7Chunked", true}}, DplrForward,
                                            sizes_by_threads<1024, 16384>);

}  // namespace
}  // namespace linattn::bench

BENCHMARK_MAIN();
