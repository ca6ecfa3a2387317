// Grouped value heads in the delta rule (DeltaNet, Gated DeltaNet, KDA): q, k [B, T, H, K] against
// v [B, T, HV, V] with HV a multiple of H, value head j reading q/k head j / (HV / H). The chunked forward
// and backward, the token-by-token forward and the decode step against the fp64 oracle, against the same
// call with q and k repeated to HV heads (the copy the grouping replaces: equal bit for bit, the
// gradients of q and k summed over each group), over thread counts, with packed sequences; the oracle
// against finite differences; and the refusals.
#include "support/grouped_heads.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "linattn/delta.hpp"
#include "linattn/error.hpp"
#include "linattn/limits.hpp"
#include "linattn/reference.hpp"
#include "linattn/threads.hpp"
#include "support/delta_problem.hpp"
#include "support/finite_difference.hpp"
#include "support/tensors.hpp"

namespace linattn::testing {
namespace {

using namespace delta;  // NOLINT: the shared problem's words (support/delta_problem.hpp)

// A case of HV = H · group value heads (chunks of 16; unnormalised keys drawn in ±0.4, so that β ≤ 1 contracts).
Case grouped(int64_t B, int64_t T, int64_t H, int64_t HV, int64_t K, int64_t V, DeltaGate gate, bool l2norm = true,
             std::vector<int64_t> cu_seqlens = {}, Layout layout = Layout::bnhd) {
  return {.B = B,
          .T = T,
          .H = H,
          .K = K,
          .V = V,
          .gate = gate,
          .l2norm = l2norm,
          .chunk = 16,
          .layout = layout,
          .cu_seqlens = std::move(cu_seqlens),
          .key_scale = l2norm ? 1.0f : 0.4f,
          .group = HV / H};
}

TEST(GroupedHeads, ChunkedMatchesOracleOverAwkwardShapes) {
  for (DeltaGate gate : kAllGates)
    for (int64_t T : {1, 63, 65, 97})
      for (int64_t group : {2, 3})
        expect_matches_oracle(
            grouped(2, T, 2, 2 * group, 7, 5, gate, T != 63, {}, T == 65 ? Layout::padded : Layout::bnhd));
}

TEST(GroupedHeads, PackedSequencesWithAnEmptyOneMatchTheOracle) {
  for (DeltaGate gate : kAllGates) {
    expect_matches_oracle(grouped(1, 70, 1, 3, 5, 7, gate, true, {0, 33, 33, 70}));
    // One token a sequence: the forward runs the token step from initial_state into final_state.
    expect_matches_oracle(grouped(1, 3, 1, 2, 5, 7, gate, true, {0, 1, 1, 2, 3}));
  }
}

// The grouped call does what the repeated call did, without the copy: out, the final state and every
// gradient of v, beta, g and the initial state bit for bit; dq and dk the repeated call's summed over
// each group in order.
void expect_equals_the_repeated_call(const Problem& p) {
  const Case& c = p.c;
  SCOPED_TRACE(describe(c));
  const Tensor32 q = repeat_heads(p.q.view, c.HV(), c.layout), k = repeat_heads(p.k.view, c.HV(), c.layout);
  expect_grouped_equals_repeated(run_fast(p, p.q.view, p.k.view), run_fast(p, q.view, k.view), c.H, &Fast::out,
                                 &Fast::final_state, &Fast::dv, &Fast::dbeta, &Fast::dg, &Fast::dinitial);
}

TEST(GroupedHeads, EqualsTheCallWithRepeatedQueriesAndKeys) {
  for (DeltaGate gate : kAllGates)
    for (bool l2norm : {true, false})
      expect_equals_the_repeated_call(make_problem(grouped(2, 45, 2, 6, 9, 6, gate, l2norm, {}, Layout::padded)));
}

// The grouped path at the recurrences' extremes, against the repeated call (which
// recurrence_extremes_test holds to the fp64 oracle there): log decays of −inf and −1e30 at some tokens,
// β near 2, a chunk size at its bound (kMaxDeltaChunkSize, longer than the sequences), packed sequences
// with an empty one.
TEST(GroupedHeads, ExtremesEqualTheRepeatedCall) {
  for (DeltaGate gate : {DeltaGate::token, DeltaGate::key})
    for (float reset : {-std::numeric_limits<float>::infinity(), -1e30f})
      for (int64_t chunk : {int64_t(16), limits::kMaxDeltaChunkSize}) {
        Case c = grouped(1, 97, 2, 4, 6, 5, gate, true, {0, 40, 40, 97});
        c.chunk = chunk;
        c.beta_lo = 1.9f, c.beta_hi = 1.99f;
        Problem p = make_problem(c);
        for (int64_t t : {0, 17, 40, 41, 96})
          for (int64_t h = 0; h < c.HV(); ++h)
            for (int64_t j = 0; j < gate_cols(c); ++j) p.g.view(0, t, h, j) = reset;
        SCOPED_TRACE("g " + std::to_string(reset));
        expect_equals_the_repeated_call(p);
      }
}

// A NaN in a later token's v reaches no earlier output of the grouped call.
TEST(GroupedHeads, NaNInALaterTokenLeavesEarlierOutputs) {
  constexpr int64_t kBad = 10;
  for (DeltaGate gate : kAllGates) {
    const Problem clean = make_problem(grouped(1, 65, 2, 6, 8, 8, gate));
    Problem bad = make_problem(clean.c);
    for (int64_t h = 0; h < clean.c.HV(); ++h) bad.v.view(0, kBad, h, 3) = std::numeric_limits<float>::quiet_NaN();
    const Fast before = run_fast(clean), after = run_fast(bad);
    for (int64_t t = 0; t < kBad; ++t)
      for (int64_t h = 0; h < clean.c.HV(); ++h)
        for (int64_t d = 0; d < clean.c.V; ++d) {
          ASSERT_TRUE(std::isfinite(after.out.view(0, t, h, d))) << "t " << t << " h " << h << " d " << d;
          EXPECT_NEAR(after.out.view(0, t, h, d), before.out.view(0, t, h, d), 1e-5f) << "t " << t;
        }
  }
}

// A group's value heads add into the same rows of dq and dk: the result must not move with the threads.
TEST(GroupedHeads, BackwardIsTheSameForAnyThreadCount) {
  const int threads = num_threads();
  for (DeltaGate gate : kAllGates) {
    const Problem p = make_problem(grouped(2, 80, 2, 6, 8, 8, gate));
    set_num_threads(1);
    const Fast one = run_fast(p, p.q.view, p.k.view);
    set_num_threads(2);
    const Fast two = run_fast(p, p.q.view, p.k.view);
    EXPECT_EQ(one.out.storage, two.out.storage);
    EXPECT_EQ(one.dq.storage, two.dq.storage);
    EXPECT_EQ(one.dk.storage, two.dk.storage);
    EXPECT_EQ(one.dinitial, two.dinitial);
  }
  set_num_threads(threads);
}

TEST(GroupedHeads, TokenByTokenMatchesOracleAndTheRepeatedCall) {
  for (DeltaGate gate : kAllGates)
    for (const Case& c : {grouped(2, 33, 2, 6, 7, 5, gate), grouped(1, 40, 1, 3, 5, 7, gate, false, {0, 17, 17, 40})}) {
      SCOPED_TRACE(describe(c));
      const Problem p = make_problem(c);
      const Oracle o = oracle(p);
      Tensor32 out = make_tensor({c.B, c.T, c.HV(), c.V}, c.layout), again = make_tensor(out.extent(), c.layout);
      std::vector<float> state = p.initial, repeated_state = p.initial;
      delta_rule_recurrent_forward(out.view, p.q.view, p.k.view, p.v.view, p.beta.view, p.gate(), state, p.options());
      EXPECT_LT(relative_error(out.view, o.forward.out), 2e-5);
      EXPECT_LT(relative_error(state, o.forward.final_state), 2e-5);
      const Tensor32 q = repeat_heads(p.q.view, c.HV(), c.layout), k = repeat_heads(p.k.view, c.HV(), c.layout);
      delta_rule_recurrent_forward(again.view, q.view, k.view, p.v.view, p.beta.view, p.gate(), repeated_state,
                                   p.options());
      EXPECT_EQ(dense(out.view), dense(again.view));
      EXPECT_EQ(state, repeated_state);
    }
}

// Decoding one token at a time with a RecurrentState of HV heads gives the token-by-token forward.
TEST(GroupedHeads, DecodeStepMatchesTheTokenByTokenForward) {
  for (DeltaGate gate : kAllGates) {
    const Case c = grouped(2, 12, 2, 4, 8, 6, gate);
    SCOPED_TRACE(describe(c));
    const Problem p = make_problem(c);
    Tensor32 want = make_tensor({c.B, c.T, c.HV(), c.V}, Layout::bnhd);
    std::vector<float> final_state(p.state_size(), 0.0f);
    delta_rule_recurrent_forward(want.view, p.q.view, p.k.view, p.v.view, p.beta.view, p.gate(), final_state,
                                 p.options());
    RecurrentState state(c.B, c.HV(), c.K, c.V, delta_name(gate));
    Tensor32 got = make_tensor({c.B, c.T, c.HV(), c.V}, Layout::bnhd);
    for (int64_t t = 0; t < c.T; ++t) {
      const auto at = [&](auto x) {
        x.data += t * x.stride[1], x.extent[1] = 1;
        return x;
      };
      delta_rule_step(at(got.view), at(ConstTensorView(p.q.view)), at(ConstTensorView(p.k.view)),
                      at(ConstTensorView(p.v.view)), at(ConstTensorView(p.beta.view)),
                      gate_cols(c) ? at(p.gate()) : ConstTensorView{}, state, p.options());
    }
    EXPECT_EQ(dense(got.view), dense(want.view));
    EXPECT_EQ(std::vector<float>(state.S().begin(), state.S().end()), final_state);
    EXPECT_EQ(state.position(), c.T);
  }
}

// The oracle's gradients of q and k, which sum over each group, are the derivatives of its forward.
TEST(GroupedHeadsReference, GradientsMatchFiniteDifferences) {
  for (DeltaGate gate : kAllGates)
    for (bool l2norm : {false, true}) {
      Case c = grouped(1, 7, 2, 6, 3, 2, gate, l2norm);
      c.chunk = 4, c.g_lo = -2.0f, c.g_hi = 0.5f, c.beta_hi = 2.0f;
      expect_oracle_gradients_match_finite_differences(c, 11);
    }
}

std::string forward_error(const Problem& p, ConstTensorView v, ConstTensorView beta, TensorView out) {
  try {
    delta_rule_forward(out, p.q.view, p.k.view, v, beta, p.gate(), p.options());
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(GroupedHeadsErrors, RefusedByNameWithBothExtents) {
  const Problem p = make_problem(grouped(1, 5, 2, 4, 3, 3, DeltaGate::token));
  Tensor32 out = make_tensor({1, 5, 4, 3}, Layout::bnhd);
  // v's heads not a multiple of q's: both extents named.
  Tensor32 v3 = make_tensor({1, 5, 3, 3}, Layout::bnhd), beta3 = make_tensor({1, 5, 3, 1}, Layout::bnhd);
  EXPECT_EQ(forward_error(p, v3.view, beta3.view, out.view),
            "linattn::delta_rule_forward: v.extent[2] (heads) is 3, expected a multiple of 2 (q's heads: grouped "
            "value heads, each q/k head serving HV / H of them)");
  // beta, g and out have v's heads.
  Tensor32 beta2 = make_tensor({1, 5, 2, 1}, Layout::bnhd);
  EXPECT_EQ(forward_error(p, p.v.view, beta2.view, out.view),
            "linattn::delta_rule_forward: beta.extent[2] (heads) is 2, expected 4 (v's heads)");
  Tensor32 out2 = make_tensor({1, 5, 2, 3}, Layout::bnhd);
  EXPECT_EQ(forward_error(p, p.v.view, p.beta.view, out2.view),
            "linattn::delta_rule_forward: out.extent[2] (heads) is 2, expected 4 (v's heads)");
  // A decoding state of q's heads.
  RecurrentState state(1, 2, 3, 3, delta_name(DeltaGate::token));
  const auto one = [](auto x) {
    x.extent[1] = 1;
    return x;
  };
  std::string what;
  try {
    Tensor32 o = make_tensor({1, 1, 4, 3}, Layout::bnhd);
    delta_rule_step(o.view, one(ConstTensorView(p.q.view)), one(ConstTensorView(p.k.view)),
                    one(ConstTensorView(p.v.view)), one(ConstTensorView(p.beta.view)), one(p.gate()), state,
                    p.options());
  } catch (const Error& e) {
    what = e.what();
  }
  EXPECT_EQ(what, "linattn::delta_rule_step: state.heads() is 2, expected 4 (v's heads)");
}

}  // namespace
}  // namespace linattn::testing
