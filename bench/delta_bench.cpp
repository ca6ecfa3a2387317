// The delta rule (issue 13), B = 4, H = 8, T = 16384, K = V = 64, [B, T, H, K] storage
// (flash-linear-attention's layout): the chunked forward, and forward + backward, of the table's
// "delta_rule", "gated_delta_rule" and "kda" (their calls, β and flop and byte models; q and k
// l2-normalised in the operator), the gate drawn as the tests draw it (logsigmoid(N(0, 1)) / 16), and the
// token-by-token forward of the gated delta rule and KDA on the same operands.
// Then the decode step: delta_rule_step one token at a time for H = 8 heads against a state
// prefilled to position 1K … 64K, beside the plain linear recurrent_step (the table's "recurrent") on
// the same shapes. Args: T or position, threads.
#include <algorithm>
#include <map>
#include <random>
#include <utility>

#include "bench_common.hpp"
#include "linattn/delta.hpp"
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

// The operands of one delta row at T tokens, token-major ([B, T, H, ·]); β is the row's options'.
struct DeltaProblem {
  Tensor q, k, v, out, dout, dq, dk, dv;
  int64_t gate_cols;
  Floats g, dg;
  DeltaProblem(int64_t T, int64_t gate_cols_)
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

// Forward, or forward then backward (a training step), of the row `name`.
void DeltaRun(benchmark::State& state, const char* name, bool backward) {
  const int64_t T = state.range(0);
  const int threads = int(state.range(1));
  const ThreadScope scope(threads);
  const table::Operator& op = table::find(name);
  table::Sizes s = sizes(kB, kH, T, T, kK, kV);
  s.chunk = DeltaRuleOptions{}.chunk_size;  // the library's default, as a user calls it
  DeltaProblem p(T, op.gate_dim(s));
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

void BM_DeltaRuleForward(benchmark::State& state) { DeltaRun(state, "delta_rule", false); }
void BM_DeltaRuleForwardBackward(benchmark::State& state) { DeltaRun(state, "delta_rule", true); }
void BM_GatedDeltaRuleForward(benchmark::State& state) { DeltaRun(state, "gated_delta_rule", false); }
void BM_GatedDeltaRuleForwardBackward(benchmark::State& state) { DeltaRun(state, "gated_delta_rule", true); }
void BM_KdaForward(benchmark::State& state) { DeltaRun(state, "kda", false); }
void BM_KdaForwardBackward(benchmark::State& state) { DeltaRun(state, "kda", true); }

// The token-by-token forward (delta_rule_recurrent_forward: fused_recurrent_* in linattn.fla) on the same
// operands from a zero state, q and k l2-normalised, β drawn in [0, 1]. FLOPS counts the recurrence's own
// work per token and head: Pᵀk, the update and the read-out (2·K·V each) and the decay (K·V, when gated).
void DeltaRecurrentRun(benchmark::State& state, DeltaGate gate) {
  const int64_t T = state.range(0);
  const int threads = int(state.range(1));
  const ThreadScope scope(threads);
  const int64_t G = gate == DeltaGate::token ? 1 : gate == DeltaGate::key ? kK : 0;
  DeltaProblem p(T, G);
  DeltaRuleOptions options;
  options.gate = gate;
  options.qk_l2norm = true;
  const Floats beta = random_floats(kB * T * kH, 10, 0.0f, 1.0f);
  const ConstTensorView g = G > 0 ? bnhd(p.g.data(), kB, T, kH, G) : ConstTensorView{};
  Floats S(size_t(kB * kH * kK * kV));
  for (auto _ : state) {
    std::fill(S.begin(), S.end(), 0.0f);
    delta_rule_recurrent_forward(p.out.view, p.q.view, p.k.view, p.v.view, bnhd(beta.data(), kB, T, kH, 1), g, S,
                                 options);
    benchmark::ClobberMemory();
  }
  set_counters(state, double(kB * T * kH) * (G > 0 ? 7.0 : 6.0) * double(kK * kV),
               4.0 * double(kB * T * kH * (2 * kK + 2 * kV + 1 + G)), threads);
  state.SetItemsProcessed(state.iterations() * kB * T);
}
void BM_GatedDeltaRuleRecurrentForward(benchmark::State& state) { DeltaRecurrentRun(state, DeltaGate::token); }
void BM_KdaRecurrentForward(benchmark::State& state) { DeltaRecurrentRun(state, DeltaGate::key); }

// T = 16384 is issue 13's shape; 1024 a quick one.
BENCHMARK(BM_DeltaRuleForward)->Apply(sizes_by_threads<1024, 16384>);
BENCHMARK(BM_DeltaRuleForwardBackward)->Apply(sizes_by_threads<1024, 16384>);
BENCHMARK(BM_GatedDeltaRuleForward)->Apply(sizes_by_threads<1024, 16384>);
BENCHMARK(BM_GatedDeltaRuleForwardBackward)->Apply(sizes_by_threads<1024, 16384>);
BENCHMARK(BM_KdaForward)->Apply(sizes_by_threads<1024, 16384>);
BENCHMARK(BM_KdaForwardBackward)->Apply(sizes_by_threads<1024, 16384>);
BENCHMARK(BM_GatedDeltaRuleRecurrentForward)->Apply(sizes_by_threads<1024, 16384>);
BENCHMARK(BM_KdaRecurrentForward)->Apply(sizes_by_threads<1024, 16384>);

// ---- decoding ----------------------------------------------------------------------------------

constexpr int64_t kDecodeB = 1, kSteps = 256;

// A [1, 1, H, ·] view of token n of a token-major [1, kSteps, H, cols] buffer.
template <class T>
View4<T> token(T* data, int64_t n, int64_t cols) {
  return bnhd(data + n * kH * cols, kDecodeB, 1, kH, cols);
}

DeltaRuleOptions decode_options(DeltaGate gate) {
  DeltaRuleOptions o;
  o.gate = gate;
  o.qk_l2norm = true;
  return o;
}
int64_t decode_gate_cols(DeltaGate gate) { return gate == DeltaGate::token ? 1 : gate == DeltaGate::key ? kK : 0; }

// The state after `position` tokens (the chunked forward's final state), made once per (gate,
// position) and shared by the thread counts.
const RecurrentState& prefilled(DeltaGate gate, int64_t position) {
  static std::map<std::pair<DeltaGate, int64_t>, RecurrentState> states;
  auto it = states.find({gate, position});
  if (it != states.end()) return it->second;
  RecurrentState s(kDecodeB, kH, kK, kV, delta_name(gate));
  const int64_t G = decode_gate_cols(gate);
  const Tensor q(kDecodeB, kH, position, kK, 11, Storage::bnhd), k(kDecodeB, kH, position, kK, 12, Storage::bnhd),
      v(kDecodeB, kH, position, kV, 13, Storage::bnhd);
  Tensor out(kDecodeB, kH, position, kV, 14, Storage::bnhd);
  const Floats beta = random_floats(kDecodeB * position * kH, 16, 0.0f, 1.0f);
  const Floats g = log_decays(kDecodeB * position * kH * G, 15);
  const ConstTensorView gv = G > 0 ? bnhd(g.data(), kDecodeB, position, kH, G) : ConstTensorView{};
  delta_rule_forward(out.view, q.view, k.view, v.view, bnhd(beta.data(), kDecodeB, position, kH, 1), gv,
                     decode_options(gate), {}, s.S());
  s.set_position(position);
  return states.emplace(std::make_pair(gate, position), std::move(s)).first->second;
}

// kSteps decode steps of `gate` (one token each, as a generator calls it) from a state prefilled to
// `position`; the state is put back untimed.
void DeltaStep(benchmark::State& state, DeltaGate gate) {
  const int64_t position = state.range(0);
  const int threads = int(state.range(1));
  const ThreadScope scope(threads);
  const int64_t G = decode_gate_cols(gate);
  const DeltaRuleOptions options = decode_options(gate);
  const RecurrentState& start = prefilled(gate, position);
  const Floats q = random_floats(kSteps * kH * kK, 1), k = random_floats(kSteps * kH * kK, 2),
               v = random_floats(kSteps * kH * kV, 3), beta = random_floats(kSteps * kH, 5, 0.0f, 1.0f),
               g = log_decays(kSteps * kH * G, 4);
  Floats out(kSteps * kH * kV);
  RecurrentState carried = start;
  for (auto _ : state) {
    for (int64_t n = 0; n < kSteps; ++n) {
      const ConstTensorView gn = G > 0 ? token(g.data(), n, G) : ConstTensorView{};
      delta_rule_step(token(out.data(), n, kV), token(q.data(), n, kK), token(k.data(), n, kK), token(v.data(), n, kV),
                      token(beta.data(), n, 1), gn, carried, options);
    }
    benchmark::ClobberMemory();
    state.PauseTiming();
    carried = start;
    state.ResumeTiming();
  }
  // One step: the decay (K·V, gated), Sᵀk (2·K·V), the rank-1 correction (2·K·V) and o = Sᵀq (2·K·V).
  set_counters(state, double(kSteps * kDecodeB * kH) * (6.0 + (G > 0 ? 1.0 : 0.0)) * double(kK * kV),
               4.0 * double(kSteps * kDecodeB * kH * (2 * kK + 2 * kV + 1 + G)) + 2.0 * 4.0 * double(kH * kK * kV),
               threads);
  state.SetItemsProcessed(state.iterations() * kSteps);  // tokens per second
  state.counters["position"] = double(position);
}
void BM_DeltaRuleStep(benchmark::State& state) { DeltaStep(state, DeltaGate::none); }
void BM_GatedDeltaRuleStep(benchmark::State& state) { DeltaStep(state, DeltaGate::token); }
void BM_KdaStep(benchmark::State& state) { DeltaStep(state, DeltaGate::key); }

// The plain linear recurrent step (elu+1, with its normaliser z) on the same shapes, for the ratio:
// the table's "recurrent", as bench_recurrent times it.
void BM_LinearStep(benchmark::State& state) {
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
  const Floats q = random_floats(kSteps * kH * kK, 1), k = random_floats(kSteps * kH * kK, 2),
               v = random_floats(kSteps * kH * kV, 3);
  Floats out(kSteps * kH * kV);
  RecurrentState carried = start;
  table::Operands operands;
  operands.q = bnhd(q.data(), kDecodeB, kSteps, kH, kK), operands.k = bnhd(k.data(), kDecodeB, kSteps, kH, kK);
  operands.v = bnhd(v.data(), kDecodeB, kSteps, kH, kV), operands.out = bnhd(out.data(), kDecodeB, kSteps, kH, kV);
  operands.state = &carried;
  for (auto _ : state) {
    op.forward(operands, table_options);  // kSteps recurrent steps
    benchmark::ClobberMemory();
    state.PauseTiming();
    carried = start;
    state.ResumeTiming();
  }
  set_counters(state, op, s, false, threads);
  state.SetItemsProcessed(state.iterations() * kSteps);
  state.counters["position"] = double(position);
}

void positions_by_threads(benchmark::internal::Benchmark* b) {
  b->ArgNames({"position", "threads"})
      ->ArgsProduct({{1024, 4096, 16384, 65536}, {1, 2}})
      ->UseRealTime()
      ->Unit(benchmark::kMicrosecond);
}
BENCHMARK(BM_DeltaRuleStep)->Apply(positions_by_threads);
BENCHMARK(BM_GatedDeltaRuleStep)->Apply(positions_by_threads);
BENCHMARK(BM_KdaStep)->Apply(positions_by_threads);
BENCHMARK(BM_LinearStep)->Apply(positions_by_threads);

}  // namespace
}  // namespace linattn::bench

BENCHMARK_MAIN();
