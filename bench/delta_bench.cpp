// The delta rule (issue 13), B = 4, H = 8, T = 16384, K = V = 64, [B, T, H, K] storage
// (flash-linear-attention's layout): the chunked forward, and forward + backward, of the table's
// "delta_rule", "gated_delta_rule" and "kda" (their calls, β and flop and byte models; q and k
// l2-normalised in the operator), the gate drawn as the tests draw it (logsigmoid(N(0, 1)) / 16), and the
// token-by-token forward of the gated delta rule and KDA on the same operands.
// Then the decode step: delta_rule_step one token at a time for H = 8 heads against a state
// prefilled to position 1K … 64K, beside the plain linear recurrent_step (the table's "recurrent") on
// the same shapes. Args: T or position, threads.
// The harness is the recurrences' (recurrence_common.hpp); this file states the family's calls.
#include <map>
#include <utility>

#include "linattn/delta.hpp"
#include "recurrence_common.hpp"

namespace linattn::bench {
namespace {

int64_t gate_cols(DeltaGate gate) { return gate == DeltaGate::token ? 1 : gate == DeltaGate::key ? kK : 0; }

// q and k l2-normalised in the operator, as the models call it.
DeltaRuleOptions options_of(DeltaGate gate) {
  DeltaRuleOptions o;
  o.gate = gate;
  o.qk_l2norm = true;
  return o;
}

// The token-by-token forward (delta_rule_recurrent_forward: fused_recurrent_* in linattn.fla), β drawn in
// [0, 1]: Pᵀk, the update and the read-out (2·K·V each) and the decay (K·V, when gated) per token and head.
void DeltaRecurrentRun(benchmark::State& state, DeltaGate gate) {
  const DeltaRuleOptions options = options_of(gate);
  time_recurrence(state, gate_cols(gate), gate == DeltaGate::none ? 6.0 : 7.0, 2 * kK + 2 * kV + 1,
                  [&](const RecurrenceProblem& p, std::span<float> S) {
                    delta_rule_recurrent_forward(p.out.view, p.q.view, p.k.view, p.v.view, p.beta_view(), p.gate(), S,
                                                 options);
                  });
}

// The state after `position` tokens (the chunked forward's final state), made once per (gate,
// position) and shared by the thread counts.
const RecurrentState& prefilled(DeltaGate gate, int64_t position) {
  static std::map<std::pair<DeltaGate, int64_t>, RecurrentState> states;
  auto it = states.find({gate, position});
  if (it != states.end()) return it->second;
  RecurrentState s(kDecodeB, kH, kK, kV, delta_name(gate));
  const RecurrenceProblem p(kDecodeB, position, gate_cols(gate), kPrefillSeed);
  delta_rule_forward(p.out.view, p.q.view, p.k.view, p.v.view, p.beta_view(), p.gate(), options_of(gate), {}, s.S());
  s.set_position(position);
  return states.emplace(std::make_pair(gate, position), std::move(s)).first->second;
}

// kSteps decode steps of `gate` (one token each, as a generator calls it) from a state prefilled to
// `position`.
void DeltaStep(benchmark::State& state, DeltaGate gate) {
  const int threads = int(state.range(1));
  const ThreadScope scope(threads);
  const DeltaRuleOptions options = options_of(gate);
  DecodeTokens t(gate_cols(gate));
  time_decode(state, prefilled(gate, state.range(0)), [&](RecurrentState& carried) {
    for (int64_t n = 0; n < kSteps; ++n)
      delta_rule_step(token(t.out.data(), n, kV), token(t.q.data(), n, kK), token(t.k.data(), n, kK),
                      token(t.v.data(), n, kV), token(t.beta.data(), n, 1), t.gate(n), carried, options);
  });
  // One step: the decay (K·V, gated), Sᵀk (2·K·V), the rank-1 correction (2·K·V) and o = Sᵀq (2·K·V).
  set_decode_counters(state, t.gate_cols > 0 ? 7.0 : 6.0, 2 * kK + 2 * kV + 1 + t.gate_cols, threads);
}

// T = 16384 is issue 13's shape; 1024 a quick one. The steps sit beside BM_LinearStep, the plain linear
// recurrent step, for the ratio.
const bool registered =
    register_chunked_rows({{"delta_rule", "DeltaRule"}, {"gated_delta_rule", "GatedDeltaRule"}, {"kda", "Kda"}},
                          DeltaRuleOptions{}.chunk_size) &&
    register_runs<DeltaGate>("RecurrentForward", {{"GatedDeltaRule", DeltaGate::token}, {"Kda", DeltaGate::key}},
                             DeltaRecurrentRun, sizes_by_threads<1024, 16384>) &&
    register_runs<DeltaGate>(
        "Step", {{"DeltaRule", DeltaGate::none}, {"GatedDeltaRule", DeltaGate::token}, {"Kda", DeltaGate::key}},
        DeltaStep, positions_by_threads<1024, 4096, 16384, 65536>) &&
    register_linear_step(positions_by_threads<1024, 4096, 16384, 65536>);

}  // namespace
}  // namespace linattn::bench

BENCHMARK_MAIN();
