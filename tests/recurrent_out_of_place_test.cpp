// The token-by-token forwards out of place (delta_rule_recurrent_forward and decayed_recurrent_forward from a
// read-only initial_state into final_state): bit for bit the call in place on a copy of the initial state, the
// fp64 oracle's out and final state, the initial state left as it was (every byte compared), grouped value heads,
// packed sequences with an empty one, no initial state (zeros), and the arguments refused by name.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "linattn/decay.hpp"
#include "linattn/delta.hpp"
#include "linattn/error.hpp"
#include "linattn/reference.hpp"
#include "support/delta_problem.hpp"
#include "support/tensors.hpp"

namespace linattn::testing {
namespace {

// The two calls' results: out and the final state.
struct Run {
  Tensor32 out;
  std::vector<float> state;
};

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// call(out, state_or_final, initial) once in place (initial empty, the state a copy of `initial`) and once out of
// place; both against each other bit for bit, the initial state unchanged, and against the oracle's out and final.
template <class Call>
void expect_out_of_place_matches(std::array<int64_t, 4> out_extent, Layout layout, const std::vector<float>& initial,
                                 const reference::DecayedOutput& want, double tolerance, Call&& call) {
  Run in_place{make_tensor(out_extent, layout), initial};
  call(in_place.out.view, std::span<const float>{}, std::span<float>(in_place.state));
  const std::vector<float> before = initial;
  // Not zeroed: every element must be written by the call (NaN marks one that is not).
  Run out_of_place{make_tensor(out_extent, layout), std::vector<float>(initial.size(), std::nanf(""))};
  call(out_of_place.out.view, std::span<const float>(initial), std::span<float>(out_of_place.state));
  EXPECT_TRUE(same_bits(initial, before)) << "the initial state was written";
  EXPECT_TRUE(same_bits(out_of_place.state, in_place.state)) << "final state differs from the call in place";
  EXPECT_EQ(relative_error(out_of_place.out.view, reference::to_double(in_place.out.view)), 0.0);
  EXPECT_LT(relative_error(out_of_place.out.view, want.out), tolerance);
  EXPECT_LT(relative_error(out_of_place.state, want.final_state), tolerance);
}

// Delta rule cases: every gate, T 1 (a decode step) and longer, grouped value heads, odd head dims, strides that
// differ from the extents, packed sequences with an empty one.
std::vector<delta::Case> delta_cases() {
  using delta::Case;
  std::vector<Case> cases;
  for (DeltaGate gate : delta::kAllGates) {
    cases.push_back({1, 1, 2, 16, 8, gate, true, 64, -0.7f, 0.0f, 0.0f, 1.0f, Layout::bnhd, {}, 1.0f, 2});
    cases.push_back({2, 1, 3, 9, 13, gate, true, 64, -0.7f, 0.0f, 0.0f, 1.0f, Layout::padded});
    cases.push_back({1, 63, 2, 7, 5, gate, false, 64, -0.7f, 0.0f, 0.0f, 1.0f, Layout::bhnd, {}, 0.5f, 3});
    cases.push_back(
        {1, 65, 2, 8, 8, gate, true, 64, -0.7f, 0.0f, 0.0f, 1.0f, Layout::bnhd, {0, 1, 1, 30, 65}, 1.0f, 2});
  }
  return cases;
}

TEST(RecurrentOutOfPlace, DeltaRuleEqualsTheCallInPlaceAndTheOracle) {
  for (const delta::Case& c : delta_cases()) {
    SCOPED_TRACE(delta::describe(c));
    const delta::Problem p = delta::make_problem(c);
    const std::vector<double> initial = delta::widen(p.initial);
    reference::Tensor g;
    if (delta::gate_cols(c) > 0) g = reference::to_double(p.g.view);
    const reference::DecayedOutput want = reference::delta_rule_forward(
        reference::to_double(p.q.view), reference::to_double(p.k.view), reference::to_double(p.v.view),
        reference::to_double(p.beta.view), delta::gate_cols(c) > 0 ? &g : nullptr, p.options(), &initial);
    expect_out_of_place_matches({c.B, c.T, c.HV(), c.V}, c.layout, p.initial, want, 1e-5,
                                [&](TensorView out, std::span<const float> from, std::span<float> to) {
                                  if (from.empty())
                                    delta_rule_recurrent_forward(out, p.q.view, p.k.view, p.v.view, p.beta.view,
                                                                 p.gate(), to, p.options());
                                  else
                                    delta_rule_recurrent_forward(out, p.q.view, p.k.view, p.v.view, p.beta.view,
                                                                 p.gate(), from, to, p.options());
                                });
  }
}

// The decayed family: a gate per key (GLA), per token (simple GLA) and none (linear); T 1 and a sequence long
// enough for the blocked scan (which starts from a copy), packed sequences with an empty one.
TEST(RecurrentOutOfPlace, DecayedEqualsTheCallInPlaceAndTheOracle) {
  struct DecayCase {
    Decay decay;
    int64_t B, T, H, K, V;
    Layout layout;
    std::vector<int64_t> cu_seqlens;
  };
  for (const DecayCase& c : {DecayCase{Decay::key, 2, 1, 3, 9, 13, Layout::padded, {}},
                             DecayCase{Decay::token, 1, 1, 4, 16, 8, Layout::bnhd, {}},
                             DecayCase{Decay::none, 1, 1, 2, 5, 7, Layout::bhnd, {}},
                             DecayCase{Decay::key, 1, 97, 2, 7, 5, Layout::bnhd, {0, 3, 3, 50, 97}},
                             DecayCase{Decay::token, 2, 63, 2, 8, 8, Layout::bhnd, {}}}) {
    SCOPED_TRACE(decay_name(c.decay) + " T" + std::to_string(c.T) + " " + layout_name(c.layout));
    std::mt19937_64 rng(3);
    const Tensor32 q = random_tensor({c.B, c.T, c.H, c.K}, c.layout, rng),
                   k = random_tensor({c.B, c.T, c.H, c.K}, c.layout, rng),
                   v = random_tensor({c.B, c.T, c.H, c.V}, c.layout, rng);
    const int64_t cols = c.decay == Decay::key ? c.K : 1;
    Tensor32 g;
    if (c.decay != Decay::none) g = random_tensor({c.B, c.T, c.H, cols}, c.layout, rng, -0.7f, 0.0f);
    const ConstTensorView gv = c.decay != Decay::none ? ConstTensorView(g.view) : ConstTensorView{};
    DecayedAttentionOptions options;
    options.decay = c.decay, options.cu_seqlens = c.cu_seqlens;
    const int64_t N = c.cu_seqlens.empty() ? c.B : int64_t(c.cu_seqlens.size()) - 1;
    std::vector<float> initial(size_t(N * c.H * c.K * c.V));
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (float& x : initial) x = u(rng);
    const std::vector<double> initial64(initial.begin(), initial.end());
    reference::Tensor g64;
    if (c.decay != Decay::none) g64 = reference::to_double(g.view);
    const reference::DecayedOutput want = reference::decayed_attention_forward(
        reference::to_double(q.view), reference::to_double(k.view), reference::to_double(v.view),
        c.decay != Decay::none ? &g64 : nullptr, options, &initial64);
    expect_out_of_place_matches({c.B, c.T, c.H, c.V}, c.layout, initial, want, 1e-5,
                                [&](TensorView out, std::span<const float> from, std::span<float> to) {
                                  if (from.empty())
                                    decayed_recurrent_forward(out, q.view, k.view, v.view, gv, to, options);
                                  else
                                    decayed_recurrent_forward(out, q.view, k.view, v.view, gv, from, to, options);
                                });
  }
}

// No initial state: the final state is the one a zero state in place ends with, whatever final_state held.
TEST(RecurrentOutOfPlace, NoInitialStateStartsFromZeros) {
  const delta::Problem p = delta::make_problem({1, 3, 2, 8, 8, DeltaGate::token, true, 64});
  Tensor32 out_zero = make_tensor({1, 3, 2, 8}, Layout::bnhd), out = make_tensor({1, 3, 2, 8}, Layout::bnhd);
  std::vector<float> zero(p.state_size(), 0.0f), fin(p.state_size(), std::nanf(""));
  delta_rule_recurrent_forward(out_zero.view, p.q.view, p.k.view, p.v.view, p.beta.view, p.gate(), zero, p.options());
  delta_rule_recurrent_forward(out.view, p.q.view, p.k.view, p.v.view, p.beta.view, p.gate(), {}, fin, p.options());
  EXPECT_TRUE(same_bits(fin, zero));
  EXPECT_EQ(relative_error(out.view, reference::to_double(out_zero.view)), 0.0);
}

void expect_refused(const std::function<void()>& call, const std::string& words) {
  try {
    call();
    ADD_FAILURE() << "not refused: " << words;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
  }
}

TEST(RecurrentOutOfPlace, BadStatesAreRefusedByName) {
  const delta::Problem p = delta::make_problem({1, 2, 2, 8, 8, DeltaGate::token, true, 64});
  Tensor32 out = make_tensor({1, 2, 2, 8}, Layout::bnhd);
  std::vector<float> fin(p.state_size()), short_initial(p.state_size() - 1), both(2 * p.state_size());
  const auto run = [&](std::span<const float> from, std::span<float> to) {
    delta_rule_recurrent_forward(out.view, p.q.view, p.k.view, p.v.view, p.beta.view, p.gate(), from, to, p.options());
  };
  expect_refused([&] { run(short_initial, fin); }, "initial_state");
  expect_refused([&] { run(p.initial, {}); }, "final_state is empty");
  expect_refused([&] { run(p.initial, std::span<float>(fin).first(fin.size() - 1)); }, "final_state");
  // The final state overlapping the initial one would read what the step has just written.
  const std::span<float> all(both);
  expect_refused([&] { run(all.subspan(4, p.state_size()), all.first(p.state_size())); }, "initial_state");
  DecayedAttentionOptions options;
  options.decay = Decay::token;
  expect_refused(
      [&] {
        decayed_recurrent_forward(out.view, p.q.view, p.k.view, p.v.view, p.beta.view, short_initial, fin, options);
      },
      "initial_state");
}

}  // namespace
}  // namespace linattn::testing
