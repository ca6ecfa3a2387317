// The decayed family (RetNet, lightning attention, simple GLA, GLA): the chunked forward and backward
// and the token-by-token path against the fp64 oracle, the oracle against finite differences, packed
// sequences, the numeric extremes of the issue and the argument checks.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "linattn/decay.hpp"
#include "linattn/error.hpp"
#include "linattn/reference.hpp"
#include "linattn/threads.hpp"
#include "support/decay_problem.hpp"
#include "support/decode_steps.hpp"
#include "support/finite_difference.hpp"
#include "support/packed.hpp"
#include "support/recurrence_threads.hpp"
#include "support/tensors.hpp"

namespace linattn::testing {
namespace {

using namespace decay;  // NOLINT: the shared problem's words (support/decay_problem.hpp)

TEST(DecayedAttention, MatchesOracleOverAwkwardShapes) {
  for (Decay d : kAllDecays)
    for (int64_t T : {1, 63, 65, 97})
      expect_matches_oracle({2, T, 2, 7, 5, d, 32, -0.7f, 0.0f, T == 65 ? Layout::padded : Layout::bnhd});
}

TEST(DecayedAttention, MatchesOracleForWideHeadsAndEveryLayout) {
  for (Decay d : kAllDecays)
    for (Layout layout : kAllLayouts) expect_matches_oracle({1, 70, 3, 16, 24, d, 64, -0.7f, 0.0f, layout});
}

TEST(DecayedAttention, AnyChunkSizeGivesTheSameResult) {
  for (Decay d : {Decay::token, Decay::key})
    for (int64_t C : {1, 5, 16, 17, 100}) expect_matches_oracle({1, 90, 2, 9, 11, d, C});
}

// The extremes: −20 per token (the chunk's factors would be e^{±640} if formed from its
// start), and no decay at all.
TEST(DecayedAttention, StrongDecayStaysFiniteAndAccurate) {
  for (Decay d : {Decay::token, Decay::key}) expect_matches_oracle({2, 130, 2, 8, 8, d, 64, -20.0f, -20.0f});
  // Mixed: most tokens keep, some forget at once.
  for (Decay d : {Decay::token, Decay::key}) expect_matches_oracle({1, 200, 2, 8, 8, d, 64, -25.0f, 0.0f});
}

TEST(DecayedAttention, NoDecayOverALongSequence) {
  for (Decay d : {Decay::none, Decay::token, Decay::key}) {
    const Case c{1, 1 << 16, 1, 4, 4, d, 64, 0.0f, 0.0f};
    SCOPED_TRACE(describe(c));
    const Problem p = make_problem(c);
    const Oracle o = oracle(p);
    const Fast f = run_fast(p);
    EXPECT_TRUE(all_finite(f.out.view));
    EXPECT_LT(relative_error(f.out.view, o.forward.out), 1e-4);
    EXPECT_LT(relative_error(f.dk.view, o.backward.dk), 1e-4);
    if (gate_cols(c) > 0) {
      EXPECT_LT(relative_error(f.dg.view, o.backward.dg), 1e-4);
    }
  }
}

TEST(DecayedAttention, PackedSequencesMatchTheOracleAndDoNotLeak) {
  for (Decay d : kAllDecays) {
    Case c{1, 100, 2, 6, 5, d, 16};
    c.cu_seqlens = {0, 1, 40, 40, 77, 100};  // with an empty sequence
    recurrence::expect_packed_sequences_match_and_do_not_leak(c);
  }
}

// The token-by-token forward from the problem's initial state: out and the final state against the oracle.
void expect_recurrent_matches_oracle(const Case& c) { recurrence::expect_recurrent_matches_oracle(c); }

TEST(DecayedAttention, RecurrentPathMatchesTheChunkedOne) {
  for (Decay d : kAllDecays) expect_recurrent_matches_oracle({2, 77, 3, 9, 6, d, 16, -3.0f, 0.0f, Layout::bhnd});
}

// The token-by-token forward over blocks of tokens (recurrent_blocks.hpp) at the extremes: −20 per
// token (blocks of two tokens: a third would make the decays span 40, over kScanMaxLogSpan), most tokens
// keeping and some forgetting at once (blocks cut short, some tokens whose decay alone spans more than 20),
// no decay over 64K tokens (blocks of full length, their factors all ones); odd extents (K = 9: a tile of one
// key row; V = 85: tiles of 4 and 2 vectors and a padded lane tail); packed sequences of 0, 1, 3 and more
// tokens.
TEST(DecayedAttention, RecurrentPathAtTheExtremes) {
  std::vector<Case> cases;
  for (Decay d : {Decay::token, Decay::key})
    cases.push_back({2, 130, 2, 8, 8, d, 64, -20.0f, -20.0f}), cases.push_back({1, 200, 2, 8, 8, d, 64, -25.0f, 0.0f});
  for (Decay d : {Decay::none, Decay::token, Decay::key}) cases.push_back({1, 1 << 16, 1, 4, 4, d, 64, 0.0f, 0.0f});
  for (Decay d : kAllDecays) {
    cases.push_back({2, 97, 3, 9, 85, d, 64, -0.7f, 0.0f, Layout::padded});
    Case packed{1, 80, 2, 6, 5, d, 16};
    packed.cu_seqlens = {0, 1, 1, 4, 40, 80};
    cases.push_back(packed);
  }
  for (const Case& c : cases) expect_recurrent_matches_oracle(c);
}

// A call large enough for threads (tokens × K × V over the heads ≥ 2^18) splits each sequence's heads into
// blocks, one per task: 5 heads of one sequence give 1 to 5 blocks of up to 2 heads (and an empty last block
// skipped) by the thread count; two sequences with cu_seqlens, others. Bit for bit the single thread's result,
// and the oracle's.
TEST(DecayedAttention, RecurrentPathOverHeadBlocksAndThreads) {
  for (const Case& c : {Case{1, 300, 5, 24, 40, Decay::key, 16, -3.0f, 0.0f, Layout::bnhd},
                        Case{2, 200, 3, 33, 20, Decay::retention, 16, -1.0f, 0.0f, Layout::bhnd},
                        Case{1, 400, 4, 16, 48, Decay::token, 16, -2.0f, 0.0f, Layout::bnhd, {0, 150, 400}}})
    recurrence::expect_recurrent_matches_oracle(c, true);
}

TEST(DecayedAttention, ResultsDoNotDependOnTheThreadCount) {
  for (Decay d : {Decay::retention, Decay::key}) {
    const Problem p = make_problem({2, 150, 3, 10, 12, d, 32});
    expect_same_at_one_and_two_threads([&] { return run_fast(p); }, &Fast::out, &Fast::dq, &Fast::dinitial, &Fast::dg);
  }
}

// The oracle's backward is the derivative of its forward: loss = Σ out·dout + Σ final·dfinal.
TEST(DecayedAttentionReference, GradientsMatchFiniteDifferences) {
  for (Decay d : kAllDecays) {
    Case c{1, 9, 2, 3, 4, d, 4, -2.0f, 0.5f};
    c.B = 2;
    expect_oracle_gradients_match_finite_differences(c, 7);
  }
}

TEST(DecayedStep, DecodesLikeTheChunkedForwardAndRoundTripsThroughTheStateFile) {
  const Case c{2, 40, 2, 8, 6, Decay::key, 16};
  const Problem p = make_problem(c);
  Tensor32 want = make_tensor({c.B, c.T, c.H, c.V}, Layout::bnhd);
  decayed_attention_forward(want.view, p.q.view, p.k.view, p.v.view, p.gate(), p.options());
  RecurrentState state(c.B, c.H, c.K, c.V, decay_name(c.decay));
  expect_steps_match_the_forward(want.view, state, "gla.state", [&](TensorView out, auto at, RecurrentState& s) {
    decayed_step(out, at(p.q.view), at(p.k.view), at(p.v.view), at(p.g.view), s, p.options());
  });
  // A state of another recurrence is refused, by name.
  RecurrentState other(c.B, c.H, c.K, c.V, "elu");
  Tensor32 out = make_tensor({c.B, 1, c.H, c.V}, Layout::bnhd);
  auto first = [](ConstTensorView x) {
    x.extent[1] = 1;
    return x;
  };
  expect_refused(
      [&] {
        decayed_step(out.view, first(p.q.view), first(p.k.view), first(p.v.view), first(p.g.view), other, p.options());
      },
      "'gla' state", "an 'elu' state in a GLA step");
}

// Each refusal names the argument.
TEST(DecayedAttention, BadArgumentsAreRefusedByName) {
  const Problem p = make_problem({2, 10, 2, 4, 3, Decay::key});
  Tensor32 out = make_tensor({2, 10, 2, 3}, Layout::bnhd);
  auto expect_error = [&](const DecayedAttentionOptions& o, ConstTensorView g, const std::string& words,
                          std::span<const float> initial = {}) {
    try {
      decayed_attention_forward(out.view, p.q.view, p.k.view, p.v.view, g, o, initial);
      ADD_FAILURE() << "accepted; expected an error naming " << words;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  DecayedAttentionOptions o = p.options();
  expect_error(o, {}, "g");  // GLA without its gate tensor
  ConstTensorView narrow = p.g.view;
  narrow.extent[3] = 1;
  expect_error(o, narrow, "g");
  o.decay = Decay::token;  // simple GLA with GLA's [B, T, H, K] gate
  expect_error(o, p.g.view, "g.extent[3] (dim) is 4, expected 1 (simple GLA: one log decay per head and token)");
  o.decay = Decay::retention;
  expect_error(o, p.g.view, "g is given");
  o.decay = Decay::head;
  expect_error(o, {}, "options.g_gamma");
  o = p.options();
  const int64_t cu[] = {0, 4, 10};
  o.cu_seqlens = cu;
  expect_error(o, p.g.view, "cu_seqlens");  // batch 2 with packed sequences
  o = p.options();
  o.chunk_size = 0;
  expect_error(o, p.g.view, "options.chunk_size");
  const std::vector<float> short_state(5);
  expect_error(p.options(), p.g.view, "initial_state", short_state);
  // An output inside an input.
  try {
    decayed_attention_forward(TensorView(const_cast<float*>(p.v.view.data), p.v.view.extent, p.v.view.stride), p.q.view,
                              p.k.view, p.v.view, p.g.view, p.options());
    ADD_FAILURE() << "out = v accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("out"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace linattn::testing
