// Linear attention with the FAVOR+ map, through the drivers, in all three modes, against the fp64
// oracle (reference::linear_attention_*, which calls the map's forward/backward_reference), and the
// causal guarantees: no future key changes a past output, and causal row i equals the non-causal
// output over keys 0..i with the same draws.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <utility>
#include <vector>

#include "linattn/linear_attention.hpp"
#include "linattn/favor.hpp"
#include "linattn/reference.hpp"
#include "linattn/threads.hpp"
#include "support/tensors.hpp"

namespace linattn {
namespace {

using testing::Layout;
using testing::make_tensor;
using testing::random_tensor;
using testing::relative_error;

struct Case {
  int64_t B, H, Nq, Nk, D, E, m;
  Layout layout;
  bool orthogonal, causal, key_lengths;
};

std::string describe(const Case& c) {
  std::ostringstream s;
  s << "B" << c.B << " H" << c.H << " Nq" << c.Nq << " Nk" << c.Nk << " D" << c.D << " E" << c.E << " m" << c.m << " "
    << testing::layout_name(c.layout) << " orthogonal " << c.orthogonal << " causal " << c.causal << " key_lengths "
    << c.key_lengths;
  return s.str();
}

// The row of ω with the largest norm, and |ω_row|²: x̂ = ω_row gives the largest exponent, |ω|²/2.
std::pair<int64_t, double> longest_omega_row(const FeatureMap& map, int64_t dim) {
  const auto omega = as_random_feature_map(map).omega();
  std::pair<int64_t, double> best{0, -1.0};
  for (int64_t i = 0; i < map.feature_dim(dim); ++i) {
    double s = 0;
    for (int64_t d = 0; d < dim; ++d) s += omega[size_t(i * dim + d)] * omega[size_t(i * dim + d)];
    if (s > best.second) best = {i, s};
  }
  return best;
}

TEST(FavorLinear, DriversMatchOracleForwardAndBackward) {
  const Case cases[] = {
      {1, 1, 1, 1, 1, 1, 0, Layout::bnhd, true, false, false},
      {1, 1, 1, 2, 1, 3, 4, Layout::bnhd, true, false, false},
      {3, 1, 63, 97, 16, 59, 0, Layout::bnhd, true, false, true},
      {1, 3, 65, 64, 59, 16, 37, Layout::bhnd, false, false, false},
      {2, 3, 97, 97, 64, 17, 0, Layout::padded, true, true, true},
      {1, 1, 64, 65, 128, 1, 0, Layout::bhnd, true, true, false},
      {3, 1, 2, 1000, 16, 16, 24, Layout::padded, true, false, false},
      {1, 1, 1000, 1000, 16, 8, 64, Layout::bnhd, false, true, false},
  };
  std::mt19937_64 rng(1);
  for (const Case& c : cases) {
    SCOPED_TRACE(describe(c));
    LinearAttentionOptions o;
    o.feature_map = favor_feature_map(c.D, {.n_features = c.m, .seed = 42, .orthogonal = c.orthogonal});
    o.causal = c.causal;
    std::vector<int64_t> lengths;
    for (int64_t b = 0; b < c.B; ++b) lengths.push_back(1 + int64_t(rng() % uint64_t(c.Nk)));
    if (c.key_lengths) o.key_lengths = lengths;
    auto q = random_tensor({c.B, c.Nq, c.H, c.D}, c.layout, rng),
         k = random_tensor({c.B, c.Nk, c.H, c.D}, c.layout, rng);
    auto v = random_tensor({c.B, c.Nk, c.H, c.E}, c.layout, rng),
         dout = random_tensor({c.B, c.Nq, c.H, c.E}, c.layout, rng);
    auto out = make_tensor({c.B, c.Nq, c.H, c.E}, c.layout);
    linear_attention_forward(out.view, q.view, k.view, v.view, o);
    const auto q64 = reference::to_double(q.view), k64 = reference::to_double(k.view),
               v64 = reference::to_double(v.view);
    EXPECT_LT(relative_error(out.view, reference::linear_attention_forward(q64, k64, v64, o)), 1e-5);

    auto dq = make_tensor(q.extent(), c.layout), dk = make_tensor(k.extent(), c.layout),
         dv = make_tensor(v.extent(), c.layout);
    linear_attention_backward(dq.view, dk.view, dv.view, dout.view, q.view, k.view, v.view, o);
    const auto g = reference::linear_attention_backward(reference::to_double(dout.view), q64, k64, v64, o);
    EXPECT_LT(relative_error(dv.view, g.dv), 2e-5);
    // With one key the output is v·s/(s + eps): dq and dk are O(eps) and all rounding; skip them.
    if (c.Nk > 1) {
      EXPECT_LT(relative_error(dq.view, g.dq), 2e-5);
      EXPECT_LT(relative_error(dk.view, g.dk), 2e-5);
    }
  }
}

// Inputs that trip the stabiliser: queries and keys on the longest ω direction, where the exponent
// is |ω|²/2 > 30, so the query shift is active and the key cap binds; drivers against the oracle,
// non-causal and causal, forward and backward.
TEST(FavorLinear, StabiliserActiveMatchesOracle) {
  std::mt19937_64 rng(6);
  const int64_t B = 1, H = 2, N = 70, D = 64, E = 8;
  const auto map = favor_feature_map(D, {.seed = 3});
  const auto omega = as_random_feature_map(*map).omega();
  const auto [longest, norm2] = longest_omega_row(*map, D);
  ASSERT_GT(norm2 / 2, kFavorKeyCap + 5);
  auto q = random_tensor({B, N, H, D}, Layout::bnhd, rng), k = random_tensor({B, N, H, D}, Layout::bnhd, rng);
  auto v = random_tensor({B, N, H, E}, Layout::bnhd, rng), dout = random_tensor({B, N, H, E}, Layout::bnhd, rng);
  for (int64_t n = 0; n < N; n += 5)
    for (int64_t d = 0; d < D; ++d) {
      q.view(0, n, 0, d) = float(omega[size_t(longest * D + d)] * std::pow(double(D), 0.25));
      k.view(0, n + 2, 1, d) = float(omega[size_t(longest * D + d)] * std::pow(double(D), 0.25));
    }
  for (bool causal : {false, true}) {
    LinearAttentionOptions o;
    o.feature_map = map;
    o.causal = causal;
    std::vector<float> out(size_t(B * N * H * E)), dq(size_t(B * N * H * D)), dk(dq.size()), dv(out.size());
    linear_attention_forward(bnhd(out.data(), B, N, H, E), q.view, k.view, v.view, o);
    linear_attention_backward(bnhd(dq.data(), B, N, H, D), bnhd(dk.data(), B, N, H, D), bnhd(dv.data(), B, N, H, E),
                              dout.view, q.view, k.view, v.view, o);
    const auto q64 = reference::to_double(q.view), k64 = reference::to_double(k.view),
               v64 = reference::to_double(v.view);
    EXPECT_LT(relative_error(bnhd<const float>(out.data(), B, N, H, E),
                             reference::linear_attention_forward(q64, k64, v64, o)),
              1e-5)
        << causal;
    const auto g = reference::linear_attention_backward(reference::to_double(dout.view), q64, k64, v64, o);
    EXPECT_LT(relative_error(bnhd<const float>(dq.data(), B, N, H, D), g.dq), 1e-4) << causal;
    EXPECT_LT(relative_error(bnhd<const float>(dk.data(), B, N, H, D), g.dk), 1e-4) << causal;
    EXPECT_LT(relative_error(bnhd<const float>(dv.data(), B, N, H, E), g.dv), 1e-4) << causal;
    EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](float x) { return std::isfinite(x); }));
  }
}

// normalize = false (out = φ(q)ᵀS, the plain kernel estimate) with FAVOR+, and random Fourier
// features (whose signed features need it), through the drivers against the oracle.
TEST(FavorLinear, UnnormalisedMapsMatchOracle) {
  std::mt19937_64 rng(7);
  const int64_t B = 2, H = 1, N = 67, D = 16, E = 5;
  auto q = random_tensor({B, N, H, D}, Layout::padded, rng), k = random_tensor({B, N, H, D}, Layout::padded, rng);
  auto v = random_tensor({B, N, H, E}, Layout::padded, rng), dout = random_tensor({B, N, H, E}, Layout::padded, rng);
  const auto q64 = reference::to_double(q.view), k64 = reference::to_double(k.view), v64 = reference::to_double(v.view);
  for (const FeatureMapPtr& map : {favor_feature_map(D, {.seed = 8}), random_fourier_feature_map(D, 48, 8)}) {
    for (bool causal : {false, true}) {
      SCOPED_TRACE(map->name() + (causal ? " causal" : " non-causal"));
      LinearAttentionOptions o;
      o.feature_map = map;
      o.normalize = false;
      o.causal = causal;
      auto out = make_tensor({B, N, H, E}, Layout::bnhd);
      linear_attention_forward(out.view, q.view, k.view, v.view, o);
      EXPECT_LT(relative_error(out.view, reference::linear_attention_forward(q64, k64, v64, o)), 1e-5);
      auto dq = make_tensor(q.extent(), Layout::bnhd), dk = make_tensor(k.extent(), Layout::bnhd),
           dv = make_tensor(v.extent(), Layout::bnhd);
      linear_attention_backward(dq.view, dk.view, dv.view, dout.view, q.view, k.view, v.view, o);
      const auto g = reference::linear_attention_backward(reference::to_double(dout.view), q64, k64, v64, o);
      EXPECT_LT(relative_error(dq.view, g.dq), 2e-5);
      EXPECT_LT(relative_error(dk.view, g.dk), 2e-5);
      EXPECT_LT(relative_error(dv.view, g.dv), 2e-5);
    }
  }
}

// Token by token through recurrent_step equals the causal oracle, and the carried state equals the
// oracle's final state.
TEST(FavorLinear, RecurrentStepsMatchCausalOracle) {
  std::mt19937_64 rng(2);
  const int64_t B = 2, H = 3, N = 19, D = 16, E = 9;
  LinearAttentionOptions o;
  o.feature_map = favor_feature_map(D, {.seed = 5});
  const int64_t M = o.feature_map->feature_dim(D);
  auto q = random_tensor({B, N, H, D}, Layout::bnhd, rng), k = random_tensor({B, N, H, D}, Layout::bnhd, rng),
       v = random_tensor({B, N, H, E}, Layout::bnhd, rng);
  RecurrentState state(B, H, M, E, o.feature_map->name());
  std::vector<float> out(size_t(B * N * H * E));
  const auto out_view = bnhd(out.data(), B, N, H, E);
  for (int64_t t = 0; t < N; ++t) {
    const auto at = [&](auto view) {
      view.data += view.offset(0, t, 0, 0);
      view.extent[1] = 1;
      return view;
    };
    recurrent_step(at(out_view), at(ConstTensorView(q.view)), at(ConstTensorView(k.view)), at(ConstTensorView(v.view)),
                   state, o);
  }
  LinearAttentionOptions causal = o;
  causal.causal = true;
  reference::State final_state;
  const auto want = reference::linear_attention_forward(reference::to_double(q.view), reference::to_double(k.view),
                                                        reference::to_double(v.view), causal, nullptr, &final_state);
  EXPECT_LT(relative_error(out_view, want), 1e-5);
  EXPECT_LT(relative_error(std::vector<float>(state.S().begin(), state.S().end()), final_state.S), 1e-5);
  EXPECT_LT(relative_error(std::vector<float>(state.z().begin(), state.z().end()), final_state.z), 1e-5);
}

// Perturb key j (and its value) hugely: causal outputs i < j stay bitwise the same, later ones move.
// The perturbed key sits on the longest ω direction (x̂ = ω, exponent |ω|²/2 > 30), so the key cap
// binds: the stabiliser itself is exercised.
TEST(FavorLinear, NoFutureKeyChangesAPastOutput) {
  std::mt19937_64 rng(3);
  const int64_t B = 1, H = 2, N = 150, D = 64, E = 8;
  LinearAttentionOptions o;
  o.feature_map = favor_feature_map(D, {.seed = 9});
  o.causal = true;
  const auto omega = as_random_feature_map(*o.feature_map).omega();
  const auto [longest, norm2] = longest_omega_row(*o.feature_map, D);
  ASSERT_GT(norm2 / 2, kFavorKeyCap);
  auto q = random_tensor({B, N, H, D}, Layout::bnhd, rng), k = random_tensor({B, N, H, D}, Layout::bnhd, rng),
       v = random_tensor({B, N, H, E}, Layout::bnhd, rng);
  std::vector<float> before(size_t(B * N * H * E)), after(before.size());
  causal_linear_attention_forward(bnhd(before.data(), B, N, H, E), q.view, k.view, v.view, o);
  for (int64_t j : {1, 64, 100, 149}) {
    auto k2 = k, v2 = v;
    k2.view.data = k2.storage.data();
    v2.view.data = v2.storage.data();
    for (int64_t d = 0; d < D; ++d) {
      k2.view(0, j, 1, d) = float(omega[size_t(longest * D + d)] * std::pow(double(D), 0.25));
    }
    for (int64_t e = 0; e < E; ++e) v2.view(0, j, 1, e) = 1e4f;
    causal_linear_attention_forward(bnhd(after.data(), B, N, H, E), q.view, k2.view, v2.view, o);
    for (int64_t i = 0; i < N; ++i)
      for (int64_t e = 0; e < E; ++e) {
        const size_t at = size_t((i * H + 1) * E + e);
        if (i < j) {
          ASSERT_EQ(before[at], after[at]) << "key " << j << " changed output " << i;
        } else if (e == 0) {
          EXPECT_NE(before[at], after[at]) << "key " << j << " did not reach output " << i;
        }
      }
  }
}

// Same seed in both modes: causal output row i equals the non-causal output of query i over keys
// 0..i, within fp32 tolerance.
TEST(FavorLinear, CausalRowEqualsNonCausalOverItsPrefix) {
  std::mt19937_64 rng(4);
  const int64_t B = 2, H = 1, N = 130, D = 16, E = 5;
  LinearAttentionOptions o;
  o.feature_map = favor_feature_map(D, {.seed = 77});
  auto q = random_tensor({B, N, H, D}, Layout::bhnd, rng), k = random_tensor({B, N, H, D}, Layout::bhnd, rng),
       v = random_tensor({B, N, H, E}, Layout::bhnd, rng);
  std::vector<float> causal_out(size_t(B * N * H * E));
  causal_linear_attention_forward(bnhd(causal_out.data(), B, N, H, E), q.view, k.view, v.view, o);
  for (int64_t i : {0, 1, 63, 64, 65, 129}) {
    auto prefix = [&](ConstTensorView x, int64_t first, int64_t count) {
      x.data += x.offset(0, first, 0, 0);
      x.extent[1] = count;
      return x;
    };
    std::vector<float> row(size_t(B * H * E));
    linear_attention_forward(bnhd(row.data(), B, 1, H, E), prefix(q.view, i, 1), prefix(k.view, 0, i + 1),
                             prefix(v.view, 0, i + 1), o);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t e = 0; e < E; ++e) {
        const float want = row[size_t(b * E + e)], got = causal_out[size_t((b * N + i) * E + e)];
        EXPECT_NEAR(got, want, 1e-5f * std::max(1.0f, std::abs(want))) << "row " << i;
      }
  }
}

// Bitwise the same for 1 and 2 threads, causal and non-causal, forward and backward.
TEST(FavorLinear, DeterministicAcrossThreadCounts) {
  std::mt19937_64 rng(5);
  const int64_t B = 2, H = 3, N = 200, D = 16, E = 8;
  auto q = random_tensor({B, N, H, D}, Layout::bnhd, rng), k = random_tensor({B, N, H, D}, Layout::bnhd, rng),
       v = random_tensor({B, N, H, E}, Layout::bnhd, rng), dout = random_tensor({B, N, H, E}, Layout::bnhd, rng);
  for (bool causal : {false, true}) {
    LinearAttentionOptions o;
    o.feature_map = favor_feature_map(D, {.seed = 1});
    o.causal = causal;
    std::vector<float> results[2];
    for (int threads : {1, 2}) {
      set_num_threads(threads);
      std::vector<float> out(size_t(B * N * H * E)), dq(size_t(B * N * H * D)), dk(dq.size()), dv(out.size());
      linear_attention_forward(bnhd(out.data(), B, N, H, E), q.view, k.view, v.view, o);
      linear_attention_backward(bnhd(dq.data(), B, N, H, D), bnhd(dk.data(), B, N, H, D), bnhd(dv.data(), B, N, H, E),
                                dout.view, q.view, k.view, v.view, o);
      auto& r = results[threads - 1];
      for (const auto* part : {&out, &dq, &dk, &dv}) r.insert(r.end(), part->begin(), part->end());
    }
    set_num_threads(0);
    EXPECT_EQ(results[0], results[1]) << "causal " << causal;
  }
}

}  // namespace
}  // namespace linattn
