// The DPLR delta rule's (RWKV-7) chunked forward, dplr_delta_rule_forward: against the fp64 oracle and the
// token-by-token forward over awkward shapes (T 1, 63, 65, 97, 200; K 7, V 5 and K = V = 64), RWKV-7's
// inputs (a = −κ, b = κ ⊙ sigmoid(·), log decays in [−5, −0.01], near 0 and very negative), packed
// sequences with an empty one, initial states, chunk sizes, eigenvalues outside [0, 1], every SIMD target
// and thread counts; and its argument checks.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "linattn/dplr.hpp"
#include "linattn/error.hpp"
#include "linattn/limits.hpp"
#include "support/dplr_problem.hpp"
#include "support/every_target.hpp"
#include "support/recurrence_threads.hpp"
#include "support/tensors.hpp"

namespace linattn::testing {
namespace {

using namespace dplr;  // NOLINT: the shared problem's words

struct Forward {
  Tensor32 out;
  std::vector<float> state;
};

// The chunked forward (chunked) or the token-by-token one of p, from p's initial state (or zeros).
Forward run_forward(const Problem& p, bool chunked) {
  const Case& c = p.c;
  Forward f{make_tensor({c.B, c.T, c.H, c.V}, c.layout), p.initial};
  if (!c.states) f.state.assign(p.state_size(), 0.0f);
  const auto call = chunked ? dplr_delta_rule_forward : dplr_delta_rule_recurrent_forward;
  call(f.out.view, p.q.view, p.k.view, p.v.view, p.a.view, p.b.view, p.gk.view, f.state, p.options());
  return f;
}

// The chunked forward within `tol` of the oracle (relative to the largest magnitude of each result), and
// within `tol` of the token-by-token forward.
void expect_matches(const Case& c, double tol = 2e-5) {
  SCOPED_TRACE(describe(c));
  const Problem p = make_problem(c);
  const reference::DecayedOutput o = oracle_forward(p);
  const Forward chunked = run_forward(p, true), tokens = run_forward(p, false);
  EXPECT_TRUE(all_finite(chunked.out.view));
  EXPECT_LT(relative_error(chunked.out.view, o.out), tol) << "out";
  EXPECT_LT(relative_error(chunked.state, o.final_state), tol) << "final_state";
  EXPECT_LT(relative_error(chunked.out.view, reference::to_double(tokens.out.view)), tol) << "out against tokens";
  EXPECT_LT(relative_error(chunked.state, widen(tokens.state)), tol) << "final_state against tokens";
}

// RWKV-7's inputs: a = −κ, b = κ ⊙ sigmoid(·), log decays in [−5, −0.01] (a chunk of 64 is cut to about 24
// tokens by the span policy), with and without states, over T that end a chunk early, exactly and late.
TEST(DplrChunk, MatchesOracleOverAwkwardShapes) {
  for (int64_t T : {1, 63, 65, 97, 200})
    for (bool states : {true, false}) {
      const Layout layout = T == 65 ? Layout::padded : T == 97 ? Layout::bhnd : Layout::bnhd;
      expect_matches({2, T, 2, 7, 5, -5.0f, -0.01f, AB::rwkv7, 1.0f, layout, {}, states});
    }
}

// K = V = 64 (whole vectors), with RWKV-7's own range of log decays (−e^{−1/2} sigmoid(·) ∈ [−0.61, 0]: whole
// chunks of 64) and the wider [−5, −0.01].
TEST(DplrChunk, MatchesOracleForWideHeads) {
  for (int64_t T : {63, 65, 200}) {
    expect_matches({1, T, 2, 64, 64, -0.61f, 0.0f, AB::rwkv7, 1.0f});
    expect_matches({1, T, 1, 64, 64, -5.0f, -0.01f, AB::rwkv7, 1.0f, Layout::padded});
  }
  expect_matches({1, 97, 2, 33, 24, -0.3f, 0.0f, AB::uniform, 0.5f, Layout::bhnd});
}

// Chunks of 1 (the recurrence itself), 16, 64, longer than the sequence and at the bound
// (kMaxDplrChunkSize): the same result up to rounding.
TEST(DplrChunk, ChunkSizesAgree) {
  for (int64_t chunk : {int64_t(1), int64_t(16), int64_t(37), int64_t(64), int64_t(300), limits::kMaxDplrChunkSize}) {
    Case c{2, 130, 2, 9, 11, -0.61f, 0.0f, AB::rwkv7, 1.0f};
    c.chunk = chunk;
    expect_matches(c);
  }
}

// Packed sequences, one of them empty (its final state is its initial state), each with its own state.
TEST(DplrChunk, PackedSequencesWithAnEmptyOne) {
  expect_matches({1, 200, 2, 9, 6, -0.61f, 0.0f, AB::rwkv7, 1.0f, Layout::bnhd, {0, 70, 70, 71, 200}});
  expect_matches({1, 97, 3, 64, 64, -5.0f, -0.01f, AB::rwkv7, 1.0f, Layout::padded, {0, 0, 97}});
}

// Extreme gates, each case with the tolerance it holds to:
// - log decays near 0 (the state keeps nearly everything: whole chunks), very negative (e^{−30}: two tokens a
//   chunk by the span policy, the state forgets at once) and in [−1e4, 0] (e^{g} = 0 nearly everywhere:
//   floored, a reset each token, a chunk of one);
// - the delta rule's transition with a learning rate of 1.9 (an eigenvalue near −0.9: the state flips along κ
//   each token), a transition with an eigenvalue near w + 0.3 > 1 (the state grows about 1.3× a token: 10⁷
//   over 65 tokens), and one near 1 − 3 = −2 (the state doubles and flips along κ each token: 10¹⁹ over 64
//   tokens), which the chunked form follows as the token path does; the last within 1.3e-5 where the token
//   path is within 1.5e-6 (docs/rwkv7.md, "Numerics": the inverse's entries grow as the state does).
TEST(DplrChunk, ExtremeGatesAndEigenvaluesOutsideZeroOne) {
  const std::pair<Case, double> cases[] = {
      {{2, 130, 2, 16, 16, -1e-4f, 0.0f, AB::rwkv7, 1.0f}, 2e-5},
      {{2, 65, 2, 8, 8, -30.0f, -20.0f, AB::rwkv7, 1.0f}, 2e-5},
      {{1, 65, 2, 8, 8, -1e4f, 0.0f, AB::rwkv7, 1.0f}, 2e-5},
      {{2, 130, 2, 16, 16, -0.05f, 0.0f, AB::delta, 1.9f}, 2e-5},
      {{1, 65, 2, 16, 8, -0.01f, 0.0f, AB::grow, 0.3f}, 2e-5},
      {{1, 64, 2, 16, 8, -0.01f, 0.0f, AB::grow, -3.0f}, 5e-5},
  };
  for (const auto& [c, tol] : cases) expect_matches(c, tol);
}

// Under every Highway target this CPU runs: whole vectors (K = V = 64) and tails (K 9, V 83).
TEST(DplrChunk, MatchesOracleUnderEveryTarget) {
  for_each_simd_target([] {
    expect_matches({1, 70, 2, 9, 83, -0.61f, 0.0f, AB::rwkv7, 1.0f});
    expect_matches({1, 70, 1, 64, 64, -5.0f, -0.01f, AB::rwkv7, 1.0f, Layout::padded});
  });
}

// 1, 2 and 3 threads: the oracle's result, bit for bit the one thread's.
TEST(DplrChunk, ThreadCountsGiveTheSameResult) {
  const Problem p = make_problem({2, 130, 4, 16, 16, -0.61f, 0.0f, AB::rwkv7, 1.0f});
  const reference::DecayedOutput o = oracle_forward(p);
  expect_recurrence_over_threads(
      {2, 130, 4, 16}, Layout::bnhd, p.initial, o.out, o.final_state, [&](TensorView out, std::vector<float>& state) {
        dplr_delta_rule_forward(out, p.q.view, p.k.view, p.v.view, p.a.view, p.b.view, p.gk.view, state, p.options());
      });
}

// A NaN reaches exactly what depends on it, as in the oracle: one in v (sequence 1, head 0, mid-chunk) spoils
// that value column from its token on; one in gk (sequence 0, head 1) spoils that head from its token on.
// The NaNs of the outputs and final states stand where the oracle's do, every other value agrees with it,
// and the heads without a NaN are whole: chunked, and token by token (whose w = exp(gk), a vector exp over
// K = 16, passes the NaN on).
TEST(DplrChunk, NanReachesWhatDependsOnItAsInTheOracle) {
  Problem p = make_problem({1, 150, 2, 16, 16, -0.61f, 0.0f, AB::rwkv7, 1.0f, Layout::bnhd, {0, 70, 150}});
  p.v.view(0, 100, 0, 3) = std::nanf("");
  p.gk.view(0, 20, 1, 5) = std::nanf("");
  const reference::DecayedOutput o = oracle_forward(p);
  for (bool chunked_path : {true, false}) {
    SCOPED_TRACE(chunked_path ? "chunked" : "token by token");
    const Forward run = run_forward(p, chunked_path);
    int64_t nans = 0;
    const auto expect_alike = [&](float got, double want, const std::string& where) {
      EXPECT_EQ(std::isnan(got), std::isnan(want)) << where;
      if (std::isnan(want)) return void(++nans);
      EXPECT_NEAR(got, want, 2e-5 * (1.0 + std::abs(want))) << where;
    };
    for (int64_t t = 0; t < 150; ++t)
      for (int64_t h = 0; h < 2; ++h)
        for (int64_t d = 0; d < 16; ++d) {
          const float got = run.out.view(0, t, h, d);
          expect_alike(got, o.out(0, t, h, d), "out token " + std::to_string(t) + " head " + std::to_string(h));
          if ((t < 70 && h == 0) || (t >= 70 && h == 1) || t < 20 || (t >= 70 && t < 100)) {
            EXPECT_TRUE(std::isfinite(got)) << "token " << t << " head " << h;
          }
        }
    for (size_t i = 0; i < run.state.size(); ++i)
      expect_alike(run.state[i], o.final_state[i], "state " + std::to_string(i));
    EXPECT_GT(nans, 0);
  }
}

TEST(DplrChunk, RefusesBadArgumentsByName) {
  Problem p = make_problem({1, 8, 2, 4, 3});
  Forward f = run_forward(p, true);
  const auto expect_error = [&](const DplrOptions& options, TensorView out, std::span<float> state,
                                const std::string& words) {
    try {
      dplr_delta_rule_forward(out, p.q.view, p.k.view, p.v.view, p.a.view, p.b.view, p.gk.view, state, options);
      ADD_FAILURE() << "no error; expected one naming " << words;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("dplr_delta_rule_forward"), std::string::npos) << e.what();
    }
  };
  DplrOptions zero = p.options(), huge = p.options();
  zero.chunk_size = 0, huge.chunk_size = limits::kMaxDplrChunkSize + 1;
  expect_error(zero, f.out.view, f.state, "options.chunk_size");
  expect_error(huge, f.out.view, f.state, "options.chunk_size");
  expect_error(p.options(), f.out.view, {}, "state is empty");
  TensorView over_v = f.out.view;
  over_v.data = p.v.view.data;  // out written over an input
  expect_error(p.options(), over_v, f.state, "out overlaps v");
}

}  // namespace
}  // namespace linattn::testing
