// The delta rule (DeltaNet, Gated DeltaNet, KDA): the chunked forward and backward and the
// token-by-token path against the fp64 oracle, the oracle against finite differences, packed
// sequences, the numeric extremes of the issue (β near 2, nearly parallel and unnormalised keys,
// decays of −20 per token) and the argument checks.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "linattn/delta.hpp"
#include "linattn/error.hpp"
#include "linattn/reference.hpp"
#include "linattn/threads.hpp"
#include "support/decode_steps.hpp"
#include "support/delta_problem.hpp"
#include "support/finite_difference.hpp"
#include "support/packed.hpp"
#include "support/recurrence_threads.hpp"
#include "support/tensors.hpp"

namespace linattn::testing {
namespace {

using namespace delta;  // NOLINT: the shared problem's words (support/delta_problem.hpp)

TEST(DeltaRule, MatchesOracleOverAwkwardShapes) {
  for (DeltaGate gate : kAllGates)
    for (int64_t T : {1, 63, 65, 97})
      for (bool l2norm : {true, false})
        expect_matches_oracle({2,
                               T,
                               2,
                               7,
                               5,
                               gate,
                               l2norm,
                               32,
                               -0.7f,
                               0.0f,
                               0.0f,
                               1.0f,
                               T == 65 ? Layout::padded : Layout::bnhd,
                               {},
                               l2norm ? 1.0f : 0.4f});
}

TEST(DeltaRule, MatchesOracleForWideHeadsAndEveryLayout) {
  for (DeltaGate gate : kAllGates)
    for (Layout layout : kAllLayouts)
      expect_matches_oracle({1, 150, 3, 32, 24, gate, true, 64, -0.3f, 0.0f, 0.0f, 1.0f, layout});
}

TEST(DeltaRule, AnyChunkSizeGivesTheSameResult) {
  for (DeltaGate gate : kAllGates)
    for (int64_t C : {1, 5, 16, 17, 100}) expect_matches_oracle({1, 90, 2, 9, 11, gate, true, C});
}

// −20 per token: a chunk formed from its start would hold e^{±1280}; and a mix where most tokens
// keep and some forget at once.
TEST(DeltaRule, StrongDecayStaysFiniteAndAccurate) {
  for (DeltaGate gate : {DeltaGate::token, DeltaGate::key}) {
    expect_matches_oracle({2, 130, 2, 8, 8, gate, true, 64, -20.0f, -20.0f});
    expect_matches_oracle({1, 200, 2, 8, 8, gate, true, 64, -25.0f, 0.0f});
  }
}

// β near 2 (the update I − βkkᵀ has an eigenvalue near −1: the state flips along k each token), keys
// nearly parallel, and keys far from unit norm without l2norm: the fp32 triangular solve holds.
TEST(DeltaRule, HardRegimesOfTheTriangularSolve) {
  for (DeltaGate gate : kAllGates) {
    expect_matches_oracle({1, 128, 2, 16, 16, gate, true, 64, -0.2f, 0.0f, 1.9f, 1.99f});
    // Unnormalised keys with ‖k‖² β < 2 still contract.
    expect_matches_oracle({1, 128, 2, 16, 16, gate, false, 64, -0.2f, 0.0f, 0.0f, 1.0f, Layout::bnhd, {}, 0.3f}, 1e-3);
  }
  // Nearly parallel keys: every k_t = e + 1e-3 noise, β = 1 (each token overwrites the last).
  for (DeltaGate gate : kAllGates) {
    const Case c{1, 128, 1, 16, 8, gate, true, 64, -0.1f, 0.0f, 1.0f, 1.0f};
    SCOPED_TRACE(describe(c));
    Problem p = make_problem(c);
    std::mt19937_64 rng(5);
    std::uniform_real_distribution<float> noise(-1e-3f, 1e-3f);
    for (int64_t t = 0; t < c.T; ++t)
      for (int64_t x = 0; x < c.K; ++x) p.k.view(0, t, 0, x) = (x == 0 ? 1.0f : 0.0f) + noise(rng);
    const Errors e = errors(p);
    EXPECT_LT(e.out, 1e-3);
    EXPECT_LT(e.final_state, 1e-3);
    EXPECT_LT(e.dv, 1e-3);
  }
}

TEST(DeltaRule, PackedSequencesMatchTheOracleAndDoNotLeak) {
  for (DeltaGate gate : kAllGates) {
    Case c{1, 100, 2, 6, 5, gate, true, 16};
    c.cu_seqlens = {0, 1, 40, 40, 77, 100};  // with an empty sequence
    recurrence::expect_packed_sequences_match_and_do_not_leak(c);
  }
}

// The token-by-token forward from the problem's initial state: out and the final state against the oracle.
void expect_recurrent_matches_oracle(const Case& c) { recurrence::expect_recurrent_matches_oracle(c); }

TEST(DeltaRule, RecurrentPathMatchesTheOracle) {
  for (DeltaGate gate : kAllGates)
    for (bool l2norm : {true, false})
      expect_recurrent_matches_oracle(
          {2, 77, 3, 9, 6, gate, l2norm, 16, -3.0f, 0.0f, 0.0f, 1.0f, Layout::bhnd, {}, 0.5f});
}

// The token-by-token forward at the extremes: gates in [−0.05, 0] over 700 tokens, −20 per token, gates in
// [−25, 0], no decay over 64K tokens; β near 2, unnormalised keys (‖k‖² β < 2, so the rule contracts), K = 9
// with V = 85 and packed sequences of 1, 3 and more tokens.
TEST(DeltaRule, RecurrentPathAtTheExtremes) {
  for (DeltaGate gate : {DeltaGate::token, DeltaGate::key}) {
    expect_recurrent_matches_oracle({2, 700, 2, 8, 8, gate, true, 64, -0.05f, 0.0f});
    expect_recurrent_matches_oracle({2, 130, 2, 8, 8, gate, true, 64, -20.0f, -20.0f});
    expect_recurrent_matches_oracle({1, 200, 2, 8, 8, gate, true, 64, -25.0f, 0.0f});
    expect_recurrent_matches_oracle({1, 1 << 16, 1, 4, 4, gate, true, 64, 0.0f, 0.0f});
    expect_recurrent_matches_oracle({1, 300, 2, 8, 8, gate, true, 64, -0.05f, 0.0f, 1.9f, 2.0f});
    expect_recurrent_matches_oracle(
        {1, 300, 2, 8, 8, gate, false, 64, -0.05f, 0.0f, 0.0f, 1.0f, Layout::bnhd, {}, 0.4f});
    expect_recurrent_matches_oracle({2, 97, 3, 9, 85, gate, true, 64, -0.1f, 0.0f, 0.0f, 1.0f, Layout::padded});
    expect_recurrent_matches_oracle(
        {1, 80, 2, 6, 5, gate, true, 16, -0.1f, 0.0f, 0.0f, 1.0f, Layout::bnhd, {0, 1, 4, 40, 80}});
  }
}

// The recurrence over blocks of heads on 1 to 3 threads (as DecayedAttention's test of the same name): bit for
// bit the single thread's result, and the oracle's.
TEST(DeltaRule, RecurrentPathOverHeadBlocksAndThreads) {
  for (const Case& c :
       {Case{1, 300, 5, 24, 40, DeltaGate::key, true, 16, -3.0f, 0.0f, 0.0f, 1.0f, Layout::bnhd},
        Case{2, 200, 3, 33, 20, DeltaGate::token, false, 16, -1.0f, 0.0f, 0.0f, 1.0f, Layout::bhnd},
        Case{1, 400, 4, 16, 48, DeltaGate::none, true, 16, -0.7f, 0.0f, 0.0f, 1.0f, Layout::bnhd, {0, 150, 400}}})
    recurrence::expect_recurrent_matches_oracle(c, true);
}

TEST(DeltaRule, ResultsDoNotDependOnTheThreadCount) {
  for (DeltaGate gate : kAllGates) {
    const Problem p = make_problem({2, 150, 3, 10, 12, gate, true, 32});
    expect_same_at_one_and_two_threads([&] { return run_fast(p); }, &Fast::out, &Fast::dq, &Fast::dbeta,
                                       &Fast::dinitial, &Fast::dg);
  }
}

TEST(DeltaRuleReference, GradientsMatchFiniteDifferences) {
  for (DeltaGate gate : kAllGates)
    for (bool l2norm : {false, true})
      expect_oracle_gradients_match_finite_differences({2, 9, 2, 3, 4, gate, l2norm, 4, -2.0f, 0.5f, 0.0f, 2.0f}, 7);
}

TEST(DeltaRuleStep, DecodesLikeTheChunkedForwardAndRoundTripsThroughTheStateFile) {
  for (DeltaGate gate : kAllGates) {
    const Case c{2, 40, 2, 8, 6, gate, true, 16};
    SCOPED_TRACE(describe(c));
    const Problem p = make_problem(c);
    Tensor32 want = make_tensor({c.B, c.T, c.H, c.V}, Layout::bnhd);
    delta_rule_forward(want.view, p.q.view, p.k.view, p.v.view, p.beta.view, p.gate(), p.options());
    RecurrentState state(c.B, c.H, c.K, c.V, delta_name(gate));
    expect_steps_match_the_forward(want.view, state, "delta.state", [&](TensorView out, auto at, RecurrentState& s) {
      delta_rule_step(out, at(p.q.view), at(p.k.view), at(p.v.view), at(p.beta.view), at(p.gate()), s, p.options());
    });
  }
  // A state of another recurrence is refused, by name.
  const Problem p = make_problem({1, 1, 2, 8, 6, DeltaGate::key, true, 16});
  RecurrentState other(1, 2, 8, 6, "gla");
  Tensor32 out = make_tensor({1, 1, 2, 6}, Layout::bnhd);
  expect_refused(
      [&] { delta_rule_step(out.view, p.q.view, p.k.view, p.v.view, p.beta.view, p.gate(), other, p.options()); },
      "'kda' state", "a 'gla' state in a KDA step");
}

// Each refusal names the argument.
TEST(DeltaRule, BadArgumentsAreRefusedByName) {
  const Problem p = make_problem({2, 10, 2, 4, 3, DeltaGate::key});
  Tensor32 out = make_tensor({2, 10, 2, 3}, Layout::bnhd);
  auto expect_error = [&](const DeltaRuleOptions& o, ConstTensorView beta, ConstTensorView g, const std::string& words,
                          std::span<const float> initial = {}) {
    try {
      delta_rule_forward(out.view, p.q.view, p.k.view, p.v.view, beta, g, o, initial);
      ADD_FAILURE() << "accepted; expected an error naming " << words;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  DeltaRuleOptions o = p.options();
  expect_error(o, p.beta.view, {}, "g");  // KDA without its gate tensor
  ConstTensorView narrow = p.g.view;
  narrow.extent[3] = 1;
  expect_error(o, p.beta.view, narrow, "g");
  expect_error(o, {}, p.g.view, "beta");
  ConstTensorView wide_beta = p.g.view;  // [B, T, H, K] where [B, T, H, 1] is expected
  expect_error(o, wide_beta, p.g.view, "beta.extent[3] (dim) is 4, expected 1 (one β per head and token)");
  o.gate = DeltaGate::token;  // the gated delta rule with KDA's [B, T, H, K] gate
  expect_error(o, p.beta.view, p.g.view,
               "g.extent[3] (dim) is 4, expected 1 (gated delta rule: one log decay per head and token)");
  o.gate = DeltaGate::none;
  expect_error(o, p.beta.view, p.g.view, "g is given");
  o = p.options();
  const int64_t cu[] = {0, 4, 10};
  o.cu_seqlens = cu;
  expect_error(o, p.beta.view, p.g.view, "cu_seqlens");  // batch 2 with packed sequences
  o = p.options();
  o.chunk_size = 0;
  expect_error(o, p.beta.view, p.g.view, "options.chunk_size");
  const std::vector<float> short_state(5);
  expect_error(p.options(), p.beta.view, p.g.view, "initial_state", short_state);
  try {
    delta_rule_forward(TensorView(const_cast<float*>(p.v.view.data), p.v.view.extent, p.v.view.stride), p.q.view,
                       p.k.view, p.v.view, p.beta.view, p.g.view, p.options());
    ADD_FAILURE() << "out = v accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("out"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace linattn::testing
