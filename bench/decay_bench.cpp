// Decayed linear attention (issue 12), B = 4, H = 8, T = 16384, K = V = 64, [B, T, H, K] storage
// (flash-linear-attention's layout): the chunked forward, and forward + backward, of the table's
// "retention", "lightning", "simple_gla" and "gla" (their calls and flop and byte models), with the
// gate drawn as the tests draw it (logsigmoid(N(0, 1)) / 16), and the token-by-token forward of simple GLA
// and GLA on the same operands. Then the decode step: decayed_step one
// token at a time for H = 8 heads against a state prefilled to position 1K or 16K, beside the plain
// linear recurrent_step (the table's "recurrent") on the same shapes. Args: T or position, threads.
// The harness is the recurrences' (recurrence_common.hpp); this file states the family's calls.
#include "linattn/decay.hpp"
#include "recurrence_common.hpp"

namespace linattn::bench {
namespace {

int64_t gate_cols(Decay decay) { return decay == Decay::token ? 1 : decay == Decay::key ? kK : 0; }

// The token-by-token forward (decayed_recurrent_forward: fused_recurrent_* in linattn.fla): 5·K·V per
// token and head (the decay, the rank-1 update, the read-out).
void DecayRecurrentRun(benchmark::State& state, Decay decay) {
  DecayedAttentionOptions options;
  options.decay = decay;
  time_recurrence(state, gate_cols(decay), 5.0, 2 * kK + 2 * kV, [&](const RecurrenceProblem& p, std::span<float> S) {
    decayed_recurrent_forward(p.out.view, p.q.view, p.k.view, p.v.view, p.gate(), S, options);
  });
}

// kSteps decode steps of `decay` (one token each, as a generator calls it) from a state prefilled to
// `position` by the token-by-token forward (final state).
void DecayedStep(benchmark::State& state, Decay decay) {
  const int64_t position = state.range(0);
  const int threads = int(state.range(1));
  const ThreadScope scope(threads);
  DecayedAttentionOptions options;
  options.decay = decay;
  RecurrentState prefilled(kDecodeB, kH, kK, kV, decay_name(decay));
  {
    const RecurrenceProblem p(kDecodeB, position, gate_cols(decay), kPrefillSeed);
    decayed_recurrent_forward(p.out.view, p.q.view, p.k.view, p.v.view, p.gate(), prefilled.S(), options);
    prefilled.set_position(position);
  }
  DecodeTokens t(gate_cols(decay));
  time_decode(state, prefilled, [&](RecurrentState& carried) {
    for (int64_t n = 0; n < kSteps; ++n)
      decayed_step(token(t.out.data(), n, kV), token(t.q.data(), n, kK), token(t.k.data(), n, kK),
                   token(t.v.data(), n, kV), t.gate(n), carried, options);
  });
  // One step: S = diag(a) S + k vᵀ (3·K·V: the decay, the rank-1 product, the add) and o = Sᵀ q (2·K·V).
  set_decode_counters(state, 5.0, 2 * kK + 2 * kV + t.gate_cols, threads);
}

// T = 16384 is issue 12's shape; 1024 a quick one. The steps sit beside BM_LinearStep, the plain linear
// recurrent step, for the ratio.
const bool registered =
    register_chunked_rows(
        {{"retention", "Retention"}, {"lightning", "Lightning"}, {"simple_gla", "SimpleGla"}, {"gla", "Gla"}},
        DecayedAttentionOptions{}.chunk_size) &&
    register_runs<Decay>("RecurrentForward", {{"SimpleGla", Decay::token}, {"Gla", Decay::key}}, DecayRecurrentRun,
                         sizes_by_threads<1024, 16384>) &&
    register_runs<Decay>("Step", {{"Retention", Decay::retention}, {"SimpleGla", Decay::token}, {"Gla", Decay::key}},
                         DecayedStep, positions_by_threads<1024, 16384>) &&
    register_linear_step(positions_by_threads<1024, 16384>);

}  // namespace
}  // namespace linattn::bench

BENCHMARK_MAIN();
