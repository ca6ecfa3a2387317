// Decayed linear attention (issue 12), B = 4, H = 8, T = 16384, K = V = 64, [B, T, H, K] storage
// (flash-linear-attention's layout): the chunked forward, and forward + backward, of the table's
// "retention", "lightning", "simple_gla" and "gla" (their calls and flop and byte models), with the
// gate drawn as the tests draw it (logsigmoid(N(0, 1)) / 16), and the token-by-token forward of simple GLA
// and GLA on the same operands. Then the decode step: decayed_step one
// token at a time for H = 8 heads against a state prefilled to position 1K or 16K, beside the plain
// linear recurrent_step (the table's "recurrent") on the same shapes. Args: T or position, threads.
#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "bench_common.hpp"
#include "linattn/decay.hpp"
#include "linattn/recurrent_state.hpp"

namespace linattn::bench {
namespace {

constexpr int64_t kB = 4, kH = 8, kK = 64, kV = 64;

// [B, T, H, cols] log decays, logsigmoid(N(0, 1)) / 16, reproducible from seed.
Floats log_decays(int64_t count, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal;
  Floats g(static_cast<size_t>(count));
  for (float& x : g) x = table::log_decay_of_normal(normal(rng));
  return g;
}

// The operands of one decayed row at T tokens, token-major ([B, T, H, ·]).
struct DecayProblem {
  Tensor q, k, v, out, dout, dq, dk, dv;
  int64_t gate_cols;
  Floats g, dg;
  DecayProblem(int64_t T, int64_t gate_cols_)
      : q(kB, kH, T, kK, 1, Storage::bnhd),
        k(kB, kH, T, kK, 2, Storage::bnhd),
        v(kB, kH, T, kV, 3, Storage::bnhd),
        out(kB, kH, T, kV, 4, Storage::bnhd),
        dout(kB, kH, T, kV, 5, Storage::bnhd),
        dq(kB, kH, T, kK, 6, Storage::bnhd),
        dk(kB, kH, T, kK, 7, Storage::bnhd),
        dv(kB, kH, T, kV, 8, Storage::bnhd),
        gate_cols(gate_cols_),
        g(log_decays(kB * T * kH * gate_cols_, 9)),
        dg(g.size()) {}
  table::Operands operands(int64_t T) {
    table::Operands a;
    a.q = q.view, a.k = k.view, a.v = v.view, a.dout = dout.view;
    a.out = out.view, a.dq = dq.view, a.dk = dk.view, a.dv = dv.view;
    if (gate_cols > 0) {
      a.g = bnhd(g.data(), kB, T, kH, gate_cols);
      a.dg = bnhd(dg.data(), kB, T, kH, gate_cols);
    }
    return a;
  }
};

table::Sizes decay_sizes(int64_t B, int64_t T) {
  table::Sizes s = sizes(B, kH, T, T, kK, kV);
  s.chunk = DecayedAttentionOptions{}.chunk_size;  // the library's default, as a user calls it
  return s;
}

// Forward, or forward then backward (a training step), of the row `name`.
void DecayRun(benchmark::State& state, const char* name, bool backward) {
  const int64_t T = state.range(0);
  const int threads = int(state.range(1));
  const ThreadScope scope(threads);
  const table::Operator& op = table::find(name);
  const table::Sizes s = decay_sizes(kB, T);
  DecayProblem p(T, op.gate_dim(s));
  const table::Operands operands = p.operands(T);
  const table::Options options = op.options(s);
  for (auto _ : state) {
    op.forward(operands, options);
    if (backward) op.backward(operands, options);
    benchmark::ClobberMemory();
  }
  set_counters(state, op.forward_flops(s) + (backward ? op.backward_flops(s) : 0.0),
               op.forward_bytes(s) + (backward ? op.backward_bytes(s) : 0.0), threads);
  state.SetItemsProcessed(state.iterations() * kB * T);  // tokens per second
}

void BM_RetentionForward(benchmark::State& state) { DecayRun(state, "retention", false); }
void BM_RetentionForwardBackward(benchmark::State& state) { DecayRun(state, "retention", true); }
void BM_LightningForward(benchmark::State& state) { DecayRun(state, "lightning", false); }
void BM_LightningForwardBackward(benchmark::State& state) { DecayRun(state, "lightning", true); }
void BM_SimpleGlaForward(benchmark::State& state) { DecayRun(state, "simple_gla", false); }
void BM_SimpleGlaForwardBackward(benchmark::State& state) { DecayRun(state, "simple_gla", true); }
void BM_GlaForward(benchmark::State& state) { DecayRun(state, "gla", false); }
void BM_GlaForwardBackward(benchmark::State& state) { DecayRun(state, "gla", true); }

// The token-by-token forward (decayed_recurrent_forward: fused_recurrent_* in linattn.fla) on the same
// operands from a zero state. FLOPS counts the recurrence's own work, 5·K·V per token and head (the decay,
// the rank-1 update, the read-out), not the chunked algorithm's.
void DecayRecurrentRun(benchmark::State& state, Decay decay) {
  const int64_t T = state.range(0);
  const int threads = int(state.range(1));
  const ThreadScope scope(threads);
  const int64_t G = decay == Decay::token ? 1 : decay == Decay::key ? kK : 0;
  DecayProblem p(T, G);
  DecayedAttentionOptions options;
  options.decay = decay;
  const ConstTensorView g = G > 0 ? bnhd(p.g.data(), kB, T, kH, G) : ConstTensorView{};
  Floats S(size_t(kB * kH * kK * kV));
  for (auto _ : state) {
    std::fill(S.begin(), S.end(), 0.0f);
    decayed_recurrent_forward(p.out.view, p.q.view, p.k.view, p.v.view, g, S, options);
    benchmark::ClobberMemory();
  }
  set_counters(state, double(kB * T * kH) * 5.0 * double(kK * kV), 4.0 * double(kB * T * kH * (2 * kK + 2 * kV + G)),
               threads);
  state.SetItemsProcessed(state.iterations() * kB * T);
}
void BM_SimpleGlaRecurrentForward(benchmark::State& state) { DecayRecurrentRun(state, Decay::token); }
void BM_GlaRecurrentForward(benchmark::State& state) { DecayRecurrentRun(state, Decay::key); }

// T = 16384 is issue 12's shape; 1024 a quick one.
BENCHMARK(BM_RetentionForward)->Apply(sizes_by_threads<1024, 16384>);
BENCHMARK(BM_RetentionForwardBackward)->Apply(sizes_by_threads<1024, 16384>);
BENCHMARK(BM_LightningForward)->Apply(sizes_by_threads<1024, 16384>);
BENCHMARK(BM_LightningForwardBackward)->Apply(sizes_by_threads<1024, 16384>);
BENCHMARK(BM_SimpleGlaForward)->Apply(sizes_by_threads<1024, 16384>);
BENCHMARK(BM_SimpleGlaForwardBackward)->Apply(sizes_by_threads<1024, 16384>);
BENCHMARK(BM_GlaForward)->Apply(sizes_by_threads<1024, 16384>);
BENCHMARK(BM_GlaForwardBackward)->Apply(sizes_by_threads<1024, 16384>);
BENCHMARK(BM_SimpleGlaRecurrentForward)->Apply(sizes_by_threads<1024, 16384>);
BENCHMARK(BM_GlaRecurrentForward)->Apply(sizes_by_threads<1024, 16384>);

// ---- decoding ----------------------------------------------------------------------------------

constexpr int64_t kDecodeB = 1, kSteps = 256;

// A [1, 1, H, ·] view of token n of a token-major [1, kSteps, H, cols] buffer.
template <class T>
View4<T> token(T* data, int64_t n, int64_t cols) {
  return bnhd(data + n * kH * cols, kDecodeB, 1, kH, cols);
}

// kSteps decode steps of `decay` (one token each, as a generator calls it) from a state prefilled to
// `position` by the token-by-token forward (final state); the state is put back untimed.
void DecayedStep(benchmark::State& state, Decay decay) {
  const int64_t position = state.range(0);
  const int threads = int(state.range(1));
  const ThreadScope scope(threads);
  const int64_t G = decay == Decay::token ? 1 : decay == Decay::key ? kK : 0;
  DecayedAttentionOptions options;
  options.decay = decay;
  RecurrentState prefilled(kDecodeB, kH, kK, kV, decay_name(decay));
  {
    const Tensor q(kDecodeB, kH, position, kK, 11, Storage::bnhd), k(kDecodeB, kH, position, kK, 12, Storage::bnhd),
        v(kDecodeB, kH, position, kV, 13, Storage::bnhd);
    Tensor out(kDecodeB, kH, position, kV, 14, Storage::bnhd);
    const Floats g = log_decays(kDecodeB * position * kH * G, 15);
    const ConstTensorView gv = G > 0 ? bnhd(g.data(), kDecodeB, position, kH, G) : ConstTensorView{};
    decayed_recurrent_forward(out.view, q.view, k.view, v.view, gv, prefilled.S(), options);
    prefilled.set_position(position);
  }
  const Floats q = random_floats(kSteps * kH * kK, 1), k = random_floats(kSteps * kH * kK, 2),
               v = random_floats(kSteps * kH * kV, 3), g = log_decays(kSteps * kH * G, 4);
  Floats out(kSteps * kH * kV);
  RecurrentState carried = prefilled;
  for (auto _ : state) {
    for (int64_t n = 0; n < kSteps; ++n) {
      const ConstTensorView gn = G > 0 ? token(g.data(), n, G) : ConstTensorView{};
      decayed_step(token(out.data(), n, kV), token(q.data(), n, kK), token(k.data(), n, kK), token(v.data(), n, kV), gn,
                   carried, options);
    }
    benchmark::ClobberMemory();
    state.PauseTiming();
    carried = prefilled;
    state.ResumeTiming();
  }
  // One step: S = diag(a) S + k vᵀ (3·K·V: the decay, the rank-1 product, the add) and o = Sᵀ q (2·K·V).
  set_counters(state, double(kSteps * kDecodeB * kH) * 5.0 * double(kK * kV),
               4.0 * double(kSteps * kDecodeB * kH * (2 * kK + 2 * kV + G)) + 2.0 * 4.0 * double(kH * kK * kV),
               threads);
  state.SetItemsProcessed(state.iterations() * kSteps);  // tokens per second
  state.counters["position"] = double(position);
}
void BM_RetentionStep(benchmark::State& state) { DecayedStep(state, Decay::retention); }
void BM_SimpleGlaStep(benchmark::State& state) { DecayedStep(state, Decay::token); }
void BM_GlaStep(benchmark::State& state) { DecayedStep(state, Decay::key); }

// The plain linear recurrent step (elu+1, with its normaliser z) on the same shapes, for the ratio:
// the table's "recurrent", as bench_recurrent times it.
void BM_LinearStep(benchmark::State& state) {
  const int64_t position = state.range(0);
  const int threads = int(state.range(1));
  const ThreadScope scope(threads);
  const table::Operator& op = table::find("recurrent");
  const table::Sizes s = sizes(kDecodeB, kH, kSteps, kSteps, kK, kV);
  const table::Options table_options = op.options(s);
  RecurrentState prefilled(kDecodeB, kH, op.feature_dim(s), kV, table_options.linear.feature_map->name());
  {
    const Tensor q(kDecodeB, kH, position, kK, 11), k(kDecodeB, kH, position, kK, 12),
        v(kDecodeB, kH, position, kV, 13);
    Tensor out(kDecodeB, kH, position, kV, 14);
    causal_linear_attention_forward(out.view, q.view, k.view, v.view, table_options.linear, nullptr, &prefilled);
  }
  const Floats q = random_floats(kSteps * kH * kK, 1), k = random_floats(kSteps * kH * kK, 2),
               v = random_floats(kSteps * kH * kV, 3);
  Floats out(kSteps * kH * kV);
  RecurrentState carried = prefilled;
  table::Operands operands;
  operands.q = bnhd(q.data(), kDecodeB, kSteps, kH, kK), operands.k = bnhd(k.data(), kDecodeB, kSteps, kH, kK);
  operands.v = bnhd(v.data(), kDecodeB, kSteps, kH, kV), operands.out = bnhd(out.data(), kDecodeB, kSteps, kH, kV);
  operands.state = &carried;
  for (auto _ : state) {
    op.forward(operands, table_options);  // kSteps recurrent steps
    benchmark::ClobberMemory();
    state.PauseTiming();
    carried = prefilled;
    state.ResumeTiming();
  }
  set_counters(state, op, s, false, threads);
  state.SetItemsProcessed(state.iterations() * kSteps);
  state.counters["position"] = double(position);
}

void positions_by_threads(benchmark::internal::Benchmark* b) {
  b->ArgNames({"position", "threads"})
      ->ArgsProduct({{1024, 16384}, {1, 2}})
      ->UseRealTime()
      ->Unit(benchmark::kMicrosecond);
}
BENCHMARK(BM_RetentionStep)->Apply(positions_by_threads);
BENCHMARK(BM_SimpleGlaStep)->Apply(positions_by_threads);
BENCHMARK(BM_GlaStep)->Apply(positions_by_threads);
BENCHMARK(BM_LinearStep)->Apply(positions_by_threads);

}  // namespace
}  // namespace linattn::bench

BENCHMARK_MAIN();
