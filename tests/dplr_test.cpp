// The DPLR delta rule (RWKV-7): the fp64 oracle against central finite differences and against the delta
// rule's and the decayed family's oracles where the recurrence reduces to them; the fp32 token-by-token
// forward and backward against the oracle over awkward shapes, packed sequences with an empty one, initial
// states, log decays near 0 and very negative, transitions with eigenvalues outside [0, 1], thread counts;
// and the argument checks.
#include "linattn/dplr.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "linattn/error.hpp"
#include "linattn/reference.hpp"
#include "linattn/threads.hpp"
#include "support/dplr_problem.hpp"
#include "support/every_target.hpp"
#include "support/finite_difference.hpp"
#include "support/recurrence_threads.hpp"
#include "support/temp_dir.hpp"
#include "support/tensors.hpp"

namespace linattn::testing {
namespace {

using namespace dplr;  // NOLINT: the shared problem's words

struct Oracle {
  reference::DecayedOutput forward;
  reference::DplrGradients backward;
};
Oracle oracle(const Problem& p) {
  const Doubles x(p);
  const std::vector<double>* init = p.c.states ? &x.initial : nullptr;
  return {oracle_forward(p), reference::dplr_delta_rule_backward(x.dout, p.c.states ? &x.dfinal : nullptr, x.q, x.k,
                                                                 x.v, x.a, x.b, x.gk, p.options(), init)};
}

struct Fast {
  Tensor32 out, dq, dk, dv, da, db, dgk;
  std::vector<float> state, dinitial;
};
Fast run_fast(const Problem& p) {
  const Case& c = p.c;
  const std::array<int64_t, 4> keys{c.B, c.T, c.H, c.K}, values{c.B, c.T, c.H, c.V};
  Fast f{make_tensor(values, c.layout),     make_tensor(keys, c.layout),
         make_tensor(keys, c.layout),       make_tensor(values, c.layout),
         make_tensor(keys, c.layout),       make_tensor(keys, c.layout),
         make_tensor(keys, c.layout),       p.initial,
         std::vector<float>(p.state_size())};
  if (!c.states) f.state.assign(p.state_size(), 0.0f);
  dplr_delta_rule_recurrent_forward(f.out.view, p.q.view, p.k.view, p.v.view, p.a.view, p.b.view, p.gk.view, f.state,
                                    p.options());
  dplr_delta_rule_recurrent_backward(f.dq.view, f.dk.view, f.dv.view, f.da.view, f.db.view, f.dgk.view,
                                     c.states ? std::span<float>(f.dinitial) : std::span<float>(), p.dout.view,
                                     p.dfinal, p.q.view, p.k.view, p.v.view, p.a.view, p.b.view, p.gk.view, p.options(),
                                     p.initial);
  return f;
}

// The fp32 path against the oracle: every output and gradient within `tol` of its magnitude.
void expect_matches_oracle(const Case& c, double tol = 2e-5) {
  SCOPED_TRACE(describe(c));
  const Problem p = make_problem(c);
  const Oracle o = oracle(p);
  const Fast f = run_fast(p);
  EXPECT_TRUE(all_finite(f.out.view));
  EXPECT_LT(relative_error(f.out.view, o.forward.out), tol) << "out";
  EXPECT_LT(relative_error(f.state, o.forward.final_state), tol) << "final_state";
  EXPECT_LT(relative_error(f.dq.view, o.backward.dq), tol) << "dq";
  EXPECT_LT(relative_error(f.dk.view, o.backward.dk), tol) << "dk";
  EXPECT_LT(relative_error(f.dv.view, o.backward.dv), tol) << "dv";
  EXPECT_LT(relative_error(f.da.view, o.backward.da), tol) << "da";
  EXPECT_LT(relative_error(f.db.view, o.backward.db), tol) << "db";
  EXPECT_LT(relative_error(f.dgk.view, o.backward.dgk), tol) << "dgk";
  if (c.states) {
    EXPECT_LT(relative_error(f.dinitial, o.backward.dinitial_state), tol) << "dinitial_state";
  }
}

TEST(DplrDeltaRule, MatchesOracleOverAwkwardShapes) {
  for (int64_t T : {1, 63, 65, 97})
    for (bool states : {true, false}) {
      const Layout layout = T == 65 ? Layout::padded : T == 97 ? Layout::bhnd : Layout::bnhd;
      expect_matches_oracle({2, T, 2, 7, 5, -0.7f, 0.0f, AB::uniform, 0.5f, layout, {}, states});
    }
}

TEST(DplrDeltaRule, MatchesOracleForWideHeadsAndEveryLayout) {
  for (Layout layout : kAllLayouts) expect_matches_oracle({1, 70, 3, 33, 24, -0.3f, 0.0f, AB::delta, 1.0f, layout});
}

// Value heads wide enough for the token kernel's panels of four vector columns (64 columns with AVX-512's
// 16 lanes, two panels of 32 with AVX2's 8), then a single vector column and three scalar ones; K odd, so
// the first sweep's odd-row chain ends one row short; more tokens than a run (16) with a ragged last run.
// Under every Highway target this CPU runs (the rest of the suite runs only the best one).
TEST(DplrDeltaRule, MatchesOracleOverWholePanelsAndTheirTailsUnderEveryTarget) {
  for_each_simd_target([] {
    expect_matches_oracle({2, 37, 2, 9, 83, -0.7f, 0.0f, AB::delta, 1.5f});
    expect_matches_oracle({1, 20, 1, 64, 64, -0.3f, 0.0f, AB::uniform, 0.1f, Layout::padded});
  });
}

// Packed sequences, one of them empty (its final state is its initial state, its dinitial its dfinal), and
// each with its own state.
TEST(DplrDeltaRule, PackedSequencesWithAnEmptyOne) {
  expect_matches_oracle({1, 97, 2, 9, 6, -0.7f, 0.0f, AB::uniform, 0.5f, Layout::bnhd, {0, 30, 30, 31, 97}});
  expect_matches_oracle({1, 40, 3, 5, 7, -0.7f, 0.0f, AB::delta, 1.5f, Layout::padded, {0, 0, 40}});
}

// Log decays near 0 (the state keeps nearly everything) and very negative (e^{−30}: it forgets at once; and
// e^{−1e4} = 0).
TEST(DplrDeltaRule, LogDecaysNearZeroAndVeryNegative) {
  expect_matches_oracle({2, 65, 2, 8, 8, -1e-4f, 0.0f, AB::delta, 1.0f});
  expect_matches_oracle({2, 65, 2, 8, 8, -30.0f, -20.0f, AB::uniform, 0.5f});
  expect_matches_oracle({1, 33, 2, 8, 8, -1e4f, 0.0f, AB::delta, 0.5f});
}

// The delta rule's transition with β up to 1.9 (an eigenvalue near −0.9: the state flips along κ each token),
// and a transition with an eigenvalue near w + 0.3 > 1 (the state grows about 1.3× a token: 65 tokens is a
// growth of 10⁷, which fp32 follows to its relative rounding).
TEST(DplrDeltaRule, EigenvaluesOutsideZeroOne) {
  expect_matches_oracle({2, 97, 2, 16, 16, -0.05f, 0.0f, AB::delta, 1.9f});
  const Case grow{1, 65, 2, 16, 8, -0.01f, 0.0f, AB::grow, 0.3f};
  expect_matches_oracle(grow, 2e-4);
  const Problem p = make_problem(grow);
  EXPECT_GT(max_magnitude(oracle(p).forward.final_state), 1e6 * max_magnitude(widen(p.initial)));  // it grew
}

// A call large enough to split its heads over threads gives the oracle's result, bit for bit the one
// thread's.
TEST(DplrDeltaRule, ThreadCountsGiveTheSameResult) {
  const Problem p = make_problem({2, 130, 4, 16, 16, -0.5f, 0.0f, AB::delta, 1.0f});
  const Oracle o = oracle(p);
  expect_recurrence_over_threads({2, 130, 4, 16}, Layout::bnhd, p.initial, o.forward.out, o.forward.final_state,
                                 [&](TensorView out, std::vector<float>& state) {
                                   dplr_delta_rule_recurrent_forward(out, p.q.view, p.k.view, p.v.view, p.a.view,
                                                                     p.b.view, p.gk.view, state, p.options());
                                 });
}

// The backward over 1, 2 and 3 threads (a call large enough to split its heads): every gradient bit for bit
// the one thread's, and the oracle's.
TEST(DplrDeltaRule, BackwardOverThreadCountsGivesTheSameResult) {
  const Problem p = make_problem({2, 130, 4, 16, 16, -0.5f, 0.0f, AB::delta, 1.0f});
  const int threads = num_threads();
  std::vector<std::vector<float>> first;
  for (int n : {1, 2, 3}) {
    SCOPED_TRACE(n);
    set_num_threads(n);
    const Fast f = run_fast(p);
    std::vector<std::vector<float>> got{f.dinitial};
    for (const Tensor32* g : {&f.dq, &f.dk, &f.dv, &f.da, &f.db, &f.dgk}) got.push_back(g->storage);
    if (first.empty()) {
      first = got;
      expect_matches_oracle(p.c);
    } else {
      for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], first[i]) << "gradient " << i;
    }
  }
  set_num_threads(threads);
}

// Decoding token by token on a RecurrentState gives the oracle's outputs, through a state file halfway; the
// position advances; a state of another recurrence, a bf16 state and cu_seqlens are refused by name.
TEST(DplrDeltaRule, StepDecodesLikeTheOracleAndRoundTripsThroughTheStateFile) {
  const Case c{2, 40, 2, 8, 6, -0.5f, 0.0f, AB::delta, 1.5f, Layout::padded, {}, false};
  const Problem p = make_problem(c);
  const Oracle o = oracle(p);
  RecurrentState state(c.B, c.H, c.K, c.V, kDplrName);
  TempDir dir;
  for (int64_t t = 0; t < c.T; ++t) {
    const auto at = [&](ConstTensorView x) {
      ConstTensorView s = x;
      s.data = x.data + t * x.stride[1], s.extent[1] = 1;
      return s;
    };
    Tensor32 out = make_tensor({c.B, 1, c.H, c.V}, Layout::bnhd);
    dplr_delta_rule_step(out.view, at(p.q.view), at(p.k.view), at(p.v.view), at(p.a.view), at(p.b.view), at(p.gk.view),
                         state);
    reference::Tensor want({c.B, 1, c.H, c.V});
    for (int64_t bi = 0; bi < c.B; ++bi)
      for (int64_t h = 0; h < c.H; ++h)
        for (int64_t d = 0; d < c.V; ++d) want(bi, 0, h, d) = o.forward.out(bi, t, h, d);
    EXPECT_LT(relative_error(out.view, want), 2e-5) << "token " << t;
    if (t == 20) {  // halfway, the state goes to a file and comes back
      state.save(dir.path() / "dplr.state");
      state = RecurrentState::load(dir.path() / "dplr.state");
    }
  }
  EXPECT_EQ(state.position(), c.T);
  EXPECT_LT(relative_error(std::vector<float>(state.S().begin(), state.S().end()), o.forward.final_state), 2e-5);

  const Problem one = make_problem({1, 1, 2, 8, 6});
  Tensor32 out = make_tensor({1, 1, 2, 6}, Layout::bnhd);
  const auto expect_refused = [&](RecurrentState& s, const DplrOptions& options, const std::string& words) {
    try {
      dplr_delta_rule_step(out.view, one.q.view, one.k.view, one.v.view, one.a.view, one.b.view, one.gk.view, s,
                           options);
      ADD_FAILURE() << "accepted; expected an error naming " << words;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  RecurrentState gla(1, 2, 8, 6, "gla"), half(1, 2, 8, 6, kDplrName, DType::bf16), fine(1, 2, 8, 6, kDplrName);
  expect_refused(gla, {}, "'dplr_delta_rule' state");
  expect_refused(half, {}, "state.dtype() is bf16, expected f32");
  const std::vector<int64_t> offsets{0, 1};
  DplrOptions packed;
  packed.cu_seqlens = offsets;
  expect_refused(fine, packed, "cu_seqlens");
  EXPECT_EQ(fine.position(), 0);
}

// With a = b = 0 the recurrence is GLA's (decayed attention with a log decay per key dimension); with
// b = k, a = −β w ⊙ k, k' = β k it is KDA's delta rule. The oracle agrees with both families' oracles.
TEST(DplrDeltaRule, OracleReducesToTheDecayedAndDeltaFamilies) {
  const Case c{2, 20, 2, 5, 4};
  const Problem p = make_problem(c);
  using reference::to_double;
  const reference::Tensor q = to_double(p.q.view), k = to_double(p.k.view), v = to_double(p.v.view),
                          gk = to_double(p.gk.view);
  const std::vector<double> initial = widen(p.initial);
  reference::Tensor zero(k.extent);
  const reference::DecayedOutput dplr = reference::dplr_delta_rule_forward(q, k, v, zero, zero, gk, {}, &initial);
  DecayedAttentionOptions gla;
  gla.decay = Decay::key;
  const reference::DecayedOutput decayed = reference::decayed_attention_forward(q, k, v, &gk, gla, &initial);
  EXPECT_LT(relative_error(dplr.out, decayed.out), 1e-12);

  reference::Tensor beta({c.B, c.T, c.H, 1}), a(k.extent), kb(k.extent);
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (double& x : beta.data) x = u(rng);
  for (int64_t bi = 0; bi < c.B; ++bi)
    for (int64_t t = 0; t < c.T; ++t)
      for (int64_t h = 0; h < c.H; ++h)
        for (int64_t d = 0; d < c.K; ++d) {
          a(bi, t, h, d) = -beta(bi, t, h, 0) * std::exp(gk(bi, t, h, d)) * k(bi, t, h, d);
          kb(bi, t, h, d) = beta(bi, t, h, 0) * k(bi, t, h, d);
        }
  const reference::DecayedOutput generalized = reference::dplr_delta_rule_forward(q, kb, v, a, k, gk, {}, &initial);
  DeltaRuleOptions kda;
  kda.gate = DeltaGate::key;
  const reference::DecayedOutput delta = reference::delta_rule_forward(q, k, v, beta, &gk, kda, &initial);
  EXPECT_LT(relative_error(generalized.out, delta.out), 1e-12);
  EXPECT_LT(max_difference(generalized.final_state, delta.final_state), 1e-12);
}

// The oracle's backward against central differences of L = Σ dout ⊙ out + Σ dfinal ⊙ final_state, for every
// input and the initial state, over packed sequences with an empty one and a growing transition.
TEST(DplrDeltaRule, OracleGradientsMatchFiniteDifferences) {
  for (const Case& c : {Case{1, 9, 2, 3, 2, -1.0f, 0.0f, AB::uniform, 0.8f, Layout::bnhd, {0, 4, 4, 9}},
                        Case{2, 6, 1, 4, 3, -0.1f, 0.0f, AB::grow, 0.5f}}) {
    SCOPED_TRACE(describe(c));
    const Problem p = make_problem(c, 7);
    using reference::to_double;
    reference::Tensor x[] = {to_double(p.q.view), to_double(p.k.view), to_double(p.v.view),
                             to_double(p.a.view), to_double(p.b.view), to_double(p.gk.view)};
    const reference::Tensor dout = to_double(p.dout.view);
    std::vector<double> initial = widen(p.initial);
    const std::vector<double> dfinal = widen(p.dfinal);
    const auto loss = [&] {
      const reference::DecayedOutput f =
          reference::dplr_delta_rule_forward(x[0], x[1], x[2], x[3], x[4], x[5], p.options(), &initial);
      double sum = 0;
      for (size_t i = 0; i < f.out.data.size(); ++i) sum += dout.data[i] * f.out.data[i];
      for (size_t i = 0; i < f.final_state.size(); ++i) sum += dfinal[i] * f.final_state[i];
      return sum;
    };
    const reference::DplrGradients g =
        reference::dplr_delta_rule_backward(dout, &dfinal, x[0], x[1], x[2], x[3], x[4], x[5], p.options(), &initial);
    const reference::Tensor* grads[] = {&g.dq, &g.dk, &g.dv, &g.da, &g.db, &g.dgk};
    const char* names[] = {"q", "k", "v", "a", "b", "gk"};
    for (int i = 0; i < 6; ++i)
      EXPECT_LT(finite_difference_relative_error(x[i].data, grads[i]->data, loss), 1e-6) << names[i];
    EXPECT_LT(finite_difference_relative_error(initial, g.dinitial_state, loss), 1e-6) << "initial_state";
  }
}

TEST(DplrDeltaRule, RefusesBadArgumentsByName) {
  const Case c{1, 8, 2, 4, 3};
  Problem p = make_problem(c);
  Fast f = run_fast(p);
  const auto expect_error = [](const auto& call, const std::string& words) {
    try {
      call();
      ADD_FAILURE() << "no error; expected one naming " << words;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  Tensor32 narrow = make_tensor({1, 8, 2, 3}, Layout::bnhd);
  const auto forward = [&](ConstTensorView a, ConstTensorView gk, std::span<float> state, TensorView out) {
    return [=, &p] {
      dplr_delta_rule_recurrent_forward(out, p.q.view, p.k.view, p.v.view, a, p.b.view, gk, state, p.options());
    };
  };
  expect_error(forward(narrow.view, p.gk.view, f.state, f.out.view), "a.extent[3] (dim) is 3, expected 4 (k's dim)");
  expect_error(forward(p.a.view, narrow.view, f.state, f.out.view), "gk.extent[3] (dim) is 3");
  expect_error(forward(p.a.view, p.gk.view, {}, f.out.view), "state is empty");
  std::vector<float> short_state(f.state.size() - 1);
  expect_error(forward(p.a.view, p.gk.view, short_state, f.out.view), "state has 23 elements, expected 24");
  // out written over an input.
  expect_error(
      [&] {
        dplr_delta_rule_recurrent_forward(p.v.view, p.q.view, p.k.view, p.v.view, p.a.view, p.b.view, p.gk.view,
                                          f.state, p.options());
      },
      "out overlaps v");
  // cu_seqlens with B > 1, and a backward whose dgk has the wrong shape.
  const std::vector<int64_t> offsets{0, 8};
  DplrOptions packed;
  packed.cu_seqlens = offsets;
  const Problem two = make_problem({2, 8, 2, 4, 3});
  std::vector<float> state(size_t(2 * 2 * 4 * 3));
  Tensor32 out = make_tensor({2, 8, 2, 3}, Layout::bnhd);
  expect_error(
      [&] {
        dplr_delta_rule_recurrent_forward(out.view, two.q.view, two.k.view, two.v.view, two.a.view, two.b.view,
                                          two.gk.view, state, packed);
      },
      "q's batch is 2 with cu_seqlens");
  expect_error(
      [&] {
        dplr_delta_rule_recurrent_backward(f.dq.view, f.dk.view, f.dv.view, f.da.view, f.db.view, narrow.view, {},
                                           p.dout.view, {}, p.q.view, p.k.view, p.v.view, p.a.view, p.b.view, p.gk.view,
                                           p.options());
      },
      "dgk.extent[3] (dim) is 3");
}

}  // namespace
}  // namespace linattn::testing
