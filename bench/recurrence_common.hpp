#pragma once
// What the recurrence families' benches share (decay_bench.cpp, delta_bench.cpp, recurrent_bench.cpp),
// so that each family states only its calls and its work per token: issue 12's and 13's shape
// (B = 4, H = 8, K = V = 64, [B, T, H, K] storage, flash-linear-attention's layout), the gate drawn as
// the tests draw it, the chunked rows of the operator table timed forward or forward + backward, the
// token-by-token forward from a zero state, and decode steps (H = 8 heads, 256 tokens a timing) against
// a state prefilled to a position, beside the plain linear recurrent step (the table's "recurrent").
#include <algorithm>
#include <initializer_list>
#include <random>
#include <span>
#include <string>
#include <utility>

#include "bench_common.hpp"
#include "linattn/linear_attention.hpp"
#include "linattn/recurrent_state.hpp"

namespace linattn::bench {

constexpr int64_t kB = 4, kH = 8, kK = 64, kV = 64;
constexpr int64_t kDecodeB = 1, kSteps = 256;

// [B, T, H, cols] log decays, logsigmoid(N(0, 1)) / 16, reproducible from seed.
inline Floats log_decays(int64_t count, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal;
  Floats g(static_cast<size_t>(count));
  for (float& x : g) x = table::log_decay_of_normal(normal(rng));
  return g;
}

// The operands of one recurrence: B sequences of T tokens, token-major ([B, T, H, ·]), drawn from seeds
// seed, seed + 1, …: q, k, v, out, dout, dq, dk, dv, the gate (gate_cols columns, 0: none) and β in [0, 1].
struct RecurrenceProblem {
  int64_t B, T, gate_cols;
  Tensor q, k, v, out, dout, dq, dk, dv;
  Floats g, dg, beta;
  RecurrenceProblem(int64_t B_, int64_t T_, int64_t gate_cols_, uint64_t seed = 1)
      : B(B_),
        T(T_),
        gate_cols(gate_cols_),
        q(B, kH, T, kK, seed, Storage::bnhd),
        k(B, kH, T, kK, seed + 1, Storage::bnhd),
        v(B, kH, T, kV, seed + 2, Storage::bnhd),
        out(B, kH, T, kV, seed + 3, Storage::bnhd),
        dout(B, kH, T, kV, seed + 4, Storage::bnhd),
        dq(B, kH, T, kK, seed + 5, Storage::bnhd),
        dk(B, kH, T, kK, seed + 6, Storage::bnhd),
        dv(B, kH, T, kV, seed + 7, Storage::bnhd),
        g(log_decays(B * T * kH * gate_cols, seed + 8)),
        dg(g.size()),
        beta(random_floats(B * T * kH, seed + 9, 0.0f, 1.0f)) {}
  // The gate's [B, T, H, cols] view; empty without one.
  ConstTensorView gate() const { return gate_cols > 0 ? bnhd(g.data(), B, T, kH, gate_cols) : ConstTensorView{}; }
  ConstTensorView beta_view() const { return bnhd(beta.data(), B, T, kH, 1); }
  table::Operands operands() {
    table::Operands a;
    a.q = q.view, a.k = k.view, a.v = v.view, a.dout = dout.view;
    a.out = out.view, a.dq = dq.view, a.dk = dk.view, a.dv = dv.view;
    if (gate_cols > 0) {
      a.g = bnhd(g.data(), B, T, kH, gate_cols);
      a.dg = bnhd(dg.data(), B, T, kH, gate_cols);
    }
    return a;
  }
};

// Forward, or forward then backward (a training step), of the table's row `name` at the library's
// default chunk size `chunk` (as a user calls it). Args: T, threads.
inline void time_chunked_row(benchmark::State& state, const char* name, bool backward, int64_t chunk) {
  const int64_t T = state.range(0);
  const int threads = int(state.range(1));
  const ThreadScope scope(threads);
  const table::Operator& op = table::find(name);
  table::Sizes s = sizes(kB, kH, T, T, kK, kV);
  s.chunk = chunk;
  RecurrenceProblem p(kB, T, op.gate_dim(s));
  const table::Operands operands = p.operands();
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

// Times run(p, S), a token-by-token forward of p (T = the first arg, B = 4, a gate of gate_cols columns)
// from a zero state S [B, H, K, V]. FLOPS counts the recurrence's own work, `kv_flops` · K·V per token and
// head (not the chunked algorithm's); bytes, `token_floats` floats read or written per token and head
// beside the gate's. Args: T, threads.
template <class Run>
void time_recurrence(benchmark::State& state, int64_t gate_cols, double kv_flops, int64_t token_floats, Run run) {
  const int threads = int(state.range(1));
  const ThreadScope scope(threads);
  const RecurrenceProblem p(kB, state.range(0), gate_cols);
  Floats S(size_t(p.B * kH * kK * kV));
  for (auto _ : state) {
    std::fill(S.begin(), S.end(), 0.0f);
    run(p, std::span<float>(S.data(), S.size()));
    benchmark::ClobberMemory();
  }
  set_counters(state, double(p.B * p.T * kH) * kv_flops * double(kK * kV),
               4.0 * double(p.B * p.T * kH * (token_floats + gate_cols)), threads);
  state.SetItemsProcessed(state.iterations() * p.B * p.T);
}

// ---- decoding ----------------------------------------------------------------------------------

// A [1, 1, H, ·] view of token n of a token-major [1, kSteps, H, cols] buffer.
template <class T>
View4<T> token(T* data, int64_t n, int64_t cols) {
  return bnhd(data + n * kH * cols, kDecodeB, 1, kH, cols);
}

// The first seed of the RecurrenceProblem(kDecodeB, position, …) that prefills a decode state.
constexpr uint64_t kPrefillSeed = 11;

// The kSteps tokens the decode steps read, and the output they write.
struct DecodeTokens {
  Floats q = random_floats(kSteps * kH * kK, 1), k = random_floats(kSteps * kH * kK, 2),
         v = random_floats(kSteps * kH * kV, 3), beta = random_floats(kSteps * kH, 5, 0.0f, 1.0f), g;
  Floats out = Floats(kSteps * kH * kV);
  int64_t gate_cols;
  explicit DecodeTokens(int64_t gate_cols_) : g(log_decays(kSteps * kH * gate_cols_, 4)), gate_cols(gate_cols_) {}
  // Token n's gate; empty without one.
  ConstTensorView gate(int64_t n) const { return gate_cols > 0 ? token(g.data(), n, gate_cols) : ConstTensorView{}; }
};

// Times steps(carried), kSteps decode steps on a copy of `start`, which is put back untimed after each
// iteration; items are tokens. Args: position, threads.
template <class Steps>
void time_decode(benchmark::State& state, const RecurrentState& start, Steps steps) {
  RecurrentState carried = start;
  for (auto _ : state) {
    steps(carried);
    benchmark::ClobberMemory();
    state.PauseTiming();
    carried = start;
    state.ResumeTiming();
  }
  state.SetItemsProcessed(state.iterations() * kSteps);  // tokens per second
  state.counters["position"] = double(state.range(0));
}
// The counters of kSteps decode steps of `kv_flops` · K·V each per head, reading `token_floats` floats per
// token and head and the state once each way.
inline void set_decode_counters(benchmark::State& state, double kv_flops, int64_t token_floats, int threads) {
  set_counters(state, double(kSteps * kDecodeB * kH) * kv_flops * double(kK * kV),
               4.0 * double(kSteps * kDecodeB * kH * token_floats) + 2.0 * 4.0 * double(kH * kK * kV), threads);
}

// The plain linear recurrent step (elu+1, with its normaliser z), the table's "recurrent": kSteps tokens
// for every head against a state prefilled to the position by the causal forward (final_state), for the
// ratio with the families' steps. Args: position, threads.
inline void time_linear_step(benchmark::State& state) {
  const int64_t position = state.range(0);
  const int threads = int(state.range(1));
  const ThreadScope scope(threads);
  const table::Operator& op = table::find("recurrent");
  const table::Sizes s = sizes(kDecodeB, kH, kSteps, kSteps, kK, kV);
  const table::Options table_options = op.options(s);
  RecurrentState start(kDecodeB, kH, op.feature_dim(s), kV, table_options.linear.feature_map->name());
  {
    const Tensor q(kDecodeB, kH, position, kK, 11), k(kDecodeB, kH, position, kK, 12),
        v(kDecodeB, kH, position, kV, 13);
    Tensor out(kDecodeB, kH, position, kV, 14);
    causal_linear_attention_forward(out.view, q.view, k.view, v.view, table_options.linear, nullptr, &start);
  }
  // [1, kSteps, H, D] (token-major: each step reads one contiguous [H, D] slab).
  DecodeTokens tokens(0);
  table::Operands operands;
  operands.q = bnhd(tokens.q.data(), kDecodeB, kSteps, kH, kK),
  operands.k = bnhd(tokens.k.data(), kDecodeB, kSteps, kH, kK);
  operands.v = bnhd(tokens.v.data(), kDecodeB, kSteps, kH, kV);
  operands.out = bnhd(tokens.out.data(), kDecodeB, kSteps, kH, kV);
  time_decode(state, start, [&](RecurrentState& carried) {
    operands.state = &carried;
    op.forward(operands, table_options);  // kSteps recurrent steps
  });
  set_counters(state, op, s, false, threads);
}

// Registers positions × threads {1, 2}, timed by the wall clock in microseconds.
template <int64_t... kPositions>
void positions_by_threads(benchmark::internal::Benchmark* b) {
  b->ArgNames({"position", "threads"})
      ->ArgsProduct({{kPositions...}, {1, 2}})
      ->UseRealTime()
      ->Unit(benchmark::kMicrosecond);
}

// Registers, for each (row, label) of the table's chunked rows, BM_<label>Forward and
// BM_<label>ForwardBackward at T 1024 (a quick one) and 16384 (the issues' shape), threads {1, 2}.
inline bool register_chunked_rows(std::initializer_list<std::pair<const char*, const char*>> rows, int64_t chunk) {
  for (const auto& [row, label] : rows)
    for (bool backward : {false, true})
      benchmark::RegisterBenchmark(
          (std::string("BM_") + label + (backward ? "ForwardBackward" : "Forward")).c_str(),
          [row = row, backward, chunk](benchmark::State& state) { time_chunked_row(state, row, backward, chunk); })
          ->Apply(sizes_by_threads<1024, 16384>);
  return true;
}
// Registers BM_<label><suffix> for each (label, kind): run(state, kind), with args from `apply`.
template <class Kind, class Run>
bool register_runs(const char* suffix, std::initializer_list<std::pair<const char*, Kind>> kinds, Run run,
                   void (*apply)(benchmark::internal::Benchmark*)) {
  for (const auto& [label, kind] : kinds)
    benchmark::RegisterBenchmark((std::string("BM_") + label + suffix).c_str(), [run,
                                                                                 kind = kind](benchmark::State& state) {
      run(state, kind);
    })->Apply(apply);
  return true;
}

// Registers BM_LinearStep (time_linear_step), with args from `apply`.
inline bool register_linear_step(void (*apply)(benchmark::internal::Benchmark*)) {
  benchmark::RegisterBenchmark("BM_LinearStep", time_linear_step)->Apply(apply);
  return true;
}

}  // namespace linattn::bench
