// Query groups in the decayed family (ONNX's LinearAttention, opset 27, in [B, T, H, D] words): q [B, T, R·H, K]
// over k [B, T, H, K] and v [B, T, H, V], query head i reading the state of k/v head i / R; g, g_gamma and the
// states per k/v head, out [B, T, R·H, V]. The chunked forward, the token-by-token forward and the decode step
// against the fp64 oracle, against the call with k, v, g (and the states) repeated per query head (equal bit for
// bit: out, and every query head's final state its k/v head's), over thread counts, with packed sequences; the
// same for the delta rule (DeltaNet, Gated DeltaNet, KDA, with and without l2norm); the decayed family's chunked
// backward against the oracle and the sum of one pass per query head; the fp64 oracles' backwards against finite
// differences; and the refusals: the delta rule's backward, the DPLR delta rule, both groupings at once, out, g
// and the states of the wrong heads.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "linattn/decay.hpp"
#include "linattn/delta.hpp"
#include "linattn/dplr.hpp"
#include "linattn/error.hpp"
#include "linattn/half_attention.hpp"
#include "linattn/recurrent_state.hpp"
#include "linattn/reference.hpp"
#include "ops/recurrence/recurrence_checks.hpp"
#include "support/decay_problem.hpp"
#include "support/decode_steps.hpp"
#include "support/delta_problem.hpp"
#include "support/grouped_heads.hpp"
#include "support/recurrence_threads.hpp"
#include "support/tensors.hpp"

namespace linattn::testing {
namespace {

using namespace decay;  // NOLINT: the shared problem's words (support/decay_problem.hpp)

constexpr DeltaGate kDeltaGates[] = {DeltaGate::none, DeltaGate::token, DeltaGate::key};

// A problem of R query heads a k/v head: the decayed family's problem over the H k/v heads (its k, v, g,
// g_gamma and states), and q of R·H heads in its place.
struct Grouped {
  Problem kv;
  Tensor32 q;  // [B, T, R·H, K]
  int64_t R;
  int64_t HQ() const { return kv.c.H * R; }
  std::array<int64_t, 4> out_extent() const { return {kv.c.B, kv.c.T, HQ(), kv.c.V}; }
};

Case make_case(int64_t B, int64_t T, int64_t H, int64_t K, int64_t V, Decay decay, std::vector<int64_t> cu_seqlens = {},
               Layout layout = Layout::bnhd) {
  return Case{B, T, H, K, V, decay, 16, -0.7f, 0.0f, layout, std::move(cu_seqlens)};
}

Grouped make_grouped(const Case& c, int64_t R, uint64_t seed = 3) {
  std::mt19937_64 rng(seed + 100);
  return {make_problem(c, seed), random_tensor({c.B, c.T, c.H * R, c.K}, c.layout, rng), R};
}

std::string describe(const Grouped& g) { return describe(g.kv.c) + " R" + std::to_string(g.R); }

reference::DecayedOutput oracle_forward(const Grouped& g) {
  const Problem& p = g.kv;
  const reference::Tensor q = reference::to_double(g.q.view), k = reference::to_double(p.k.view),
                          v = reference::to_double(p.v.view);
  reference::Tensor gate;
  if (gate_cols(p.c) > 0) gate = reference::to_double(p.g.view);
  const std::vector<double> initial = widen(p.initial);
  return reference::decayed_attention_forward(q, k, v, gate_cols(p.c) > 0 ? &gate : nullptr, p.options(), &initial);
}

struct Result {
  Tensor32 out;
  std::vector<float> final_state;
};

// The chunked forward of the grouped problem.
Result chunked(const Grouped& g) {
  const Problem& p = g.kv;
  Result r{make_tensor(g.out_extent(), p.c.layout), std::vector<float>(p.state_size())};
  decayed_attention_forward(r.out.view, g.q.view, p.k.view, p.v.view, p.gate(), p.options(), p.initial, r.final_state);
  return r;
}

// The token-by-token forward, in place on a copy of the initial state.
Result token_by_token(const Grouped& g) {
  const Problem& p = g.kv;
  Result r{make_tensor(g.out_extent(), p.c.layout), p.initial};
  decayed_recurrent_forward(r.out.view, g.q.view, p.k.view, p.v.view, p.gate(), r.final_state, p.options());
  return r;
}

// States [N, H, K, V] (KV = K · V) with each head's repeated R times: [N, R·H, K, V], head i head i / R's.
std::vector<float> repeat_states(const std::vector<float>& states, int64_t N, int64_t H, int64_t R, int64_t KV) {
  std::vector<float> out;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t i = 0; i < H * R; ++i) {
      const auto from = states.begin() + (n * H + i / R) * KV;
      out.insert(out.end(), from, from + KV);
    }
  return out;
}

// The same problem as an ungrouped one: k, v, g, g_gamma and the initial states repeated per query head (the
// copies that query groups replace).
struct Repeated {
  Tensor32 k, v, g;
  std::vector<float> g_gamma, initial;
  DecayedAttentionOptions options;
  ConstTensorView gate() const { return g.storage.empty() ? ConstTensorView{} : ConstTensorView(g.view); }
};
Repeated repeat(const Grouped& g) {
  const Problem& p = g.kv;
  const Case& c = p.c;
  Repeated r{repeat_heads(p.k.view, g.HQ(), c.layout), repeat_heads(p.v.view, g.HQ(), c.layout), {}, {}, {}, {}};
  if (gate_cols(c) > 0) r.g = repeat_heads(p.g.view, g.HQ(), c.layout);
  for (int64_t i = 0; i < g.HQ() && !p.g_gamma.empty(); ++i) r.g_gamma.push_back(p.g_gamma[size_t(i / g.R)]);
  r.initial = repeat_states(p.initial, sequences(c), c.H, g.R, c.K * c.V);
  r.options = p.options();
  r.options.g_gamma = r.g_gamma;
  return r;
}

// Every query head's final state of the repeated call is its k/v head's of the grouped call, bit for bit.
void expect_states_repeat(const std::vector<float>& grouped, const std::vector<float>& repeated, int64_t N, int64_t H,
                          int64_t R, int64_t KV) {
  EXPECT_EQ(repeat_states(grouped, N, H, R, KV), repeated);
}
void expect_states_repeat(const Grouped& g, const std::vector<float>& grouped, const std::vector<float>& repeated) {
  const Case& c = g.kv.c;
  expect_states_repeat(grouped, repeated, sequences(c), c.H, g.R, c.K * c.V);
}

// The decays whose repeated call is the same problem: retention's decay is set by the head's index, so that
// the repeated call decays query head i as head i rather than as its k/v head i / R (the oracle checks it).
bool repeatable(Decay d) { return d != Decay::retention; }

void expect_matches_oracle(const Grouped& g) {
  SCOPED_TRACE(describe(g));
  const reference::DecayedOutput o = oracle_forward(g);
  for (const Result& r : {chunked(g), token_by_token(g)}) {
    EXPECT_TRUE(all_finite(r.out.view));
    EXPECT_LT(relative_error(r.out.view, o.out), 2e-4) << "out";
    EXPECT_LT(relative_error(r.final_state, o.final_state), 2e-4) << "final_state";
  }
}

TEST(QueryGroups, ForwardsMatchTheOracleOverAwkwardShapes) {
  for (Decay d : kAllDecays)
    for (int64_t T : {1, 63, 65, 97})
      for (int64_t R : {2, 3})
        expect_matches_oracle(make_grouped(make_case(2, T, 2, 7, 5, d, {},
                                                     T == 65   ? Layout::padded
                                                     : T == 97 ? Layout::bhnd
                                                               : Layout::bnhd),
                                           R));
}

TEST(QueryGroups, PackedSequencesWithAnEmptyOneMatchTheOracle) {
  for (Decay d : kAllDecays) {
    expect_matches_oracle(make_grouped(make_case(1, 70, 2, 7, 5, d, {0, 33, 33, 70}), 2));
    expect_matches_oracle(make_grouped(make_case(1, 3, 1, 7, 5, d, {0, 1, 1, 2, 3}), 3));  // one token a sequence
  }
}

// A strong decay (GLA's chunks end early where a column's decay spans too much) against the oracle.
TEST(QueryGroups, StrongDecaysMatchTheOracle) {
  for (Decay d : {Decay::token, Decay::key}) {
    Case c = make_case(1, 130, 2, 8, 8, d);
    c.g_lo = -25.0f;
    expect_matches_oracle(make_grouped(c, 3));
  }
}

// The grouped call gives what the call with k, v, g and the states repeated per query head gives: out bit for
// bit, and every query head's final state its k/v head's: chunked, token by token and as a decode step.
TEST(QueryGroups, EqualsTheCallWithRepeatedKeysValuesAndGates) {
  for (Decay d : kAllDecays) {
    if (!repeatable(d)) continue;
    for (const Grouped& g : {make_grouped(make_case(2, 45, 2, 9, 6, d, {}, Layout::padded), 2),
                             make_grouped(make_case(1, 97, 2, 7, 5, d, {0, 40, 40, 97}), 3)}) {
      SCOPED_TRACE(describe(g));
      const Case& c = g.kv.c;
      const Repeated r = repeat(g);
      Tensor32 out = make_tensor(g.out_extent(), c.layout);
      std::vector<float> state(r.initial.size());
      decayed_attention_forward(out.view, g.q.view, r.k.view, r.v.view, r.gate(), r.options, r.initial, state);
      const Result grouped = chunked(g);
      EXPECT_EQ(dense(grouped.out), dense(out)) << "chunked out";
      expect_states_repeat(g, grouped.final_state, state);

      // Token by token: over blocks of tokens (T ≥ 4), and as a decode step (one update a token).
      state = r.initial;
      decayed_recurrent_forward(out.view, g.q.view, r.k.view, r.v.view, r.gate(), state, r.options);
      const Result tokens = token_by_token(g);
      EXPECT_EQ(dense(tokens.out), dense(out)) << "token-by-token out";
      expect_states_repeat(g, tokens.final_state, state);
      if (!c.cu_seqlens.empty()) continue;  // a decoding state holds one sequence a batch row
      RecurrentState decode(c.B, g.HQ(), c.K, c.V, decay_name(d)), grouped_decode(c.B, c.H, c.K, c.V, decay_name(d));
      std::copy(r.initial.begin(), r.initial.end(), decode.S().begin());
      std::copy(g.kv.initial.begin(), g.kv.initial.end(), grouped_decode.S().begin());
      Tensor32 steps = make_tensor(g.out_extent(), c.layout);
      decayed_step(out.view, g.q.view, r.k.view, r.v.view, r.gate(), decode, r.options);
      decayed_step(steps.view, g.q.view, g.kv.k.view, g.kv.v.view, g.kv.gate(), grouped_decode, g.kv.options());
      EXPECT_EQ(dense(steps), dense(out)) << "decode step out";
      expect_states_repeat(g, std::vector<float>(grouped_decode.S().begin(), grouped_decode.S().end()),
                           std::vector<float>(decode.S().begin(), decode.S().end()));
    }
  }
}

// x in bf16 (rounded to nearest even): its storage, and a view of it in x's layout.
struct Bf16 {
  std::vector<bf16> storage;
  View4<bf16> view;
  explicit Bf16(const Tensor32& x) : storage(x.storage.size()) {
    convert(std::span<bf16>(storage), std::span<const float>(x.storage));
    if (!storage.empty()) view = {storage.data(), x.view.extent, x.view.stride};  // else empty: no gate
  }
};

// bf16 rows read in place (widened a token or a block at a time, each query head's at its own head): what the
// bf16 call with k, v and g repeated gives, bit for bit, token by token (T 3) and over blocks of tokens (T 40);
// and the chunked bf16 forward (through widened copies) likewise.
TEST(QueryGroups, Bf16EqualsTheRepeatedCall) {
  for (Decay d : {Decay::head, Decay::token, Decay::key})
    for (int64_t T : {3, 40}) {
      const Grouped g = make_grouped(make_case(2, T, 2, 7, 5, d, {}, Layout::padded), 3);
      SCOPED_TRACE(describe(g));
      const Case& c = g.kv.c;
      const Repeated r = repeat(g);
      const bool gated = gate_cols(c) > 0;
      const Bf16 q(g.q), k(g.kv.k), v(g.kv.v), k_repeated(r.k), v_repeated(r.v);
      const Bf16 gate = gated ? Bf16(g.kv.g) : Bf16(Tensor32{}), gate_repeated = gated ? Bf16(r.g) : Bf16(Tensor32{});
      Bf16 out(make_tensor(g.out_extent(), c.layout)), again(make_tensor(g.out_extent(), c.layout));
      std::vector<float> state = g.kv.initial, repeated_state = r.initial;
      decayed_recurrent_forward(out.view, q.view, k.view, v.view, View4<const bf16>(gate.view), state, g.kv.options());
      decayed_recurrent_forward(again.view, q.view, k_repeated.view, v_repeated.view,
                                View4<const bf16>(gate_repeated.view), repeated_state, r.options);
      EXPECT_EQ(0, std::memcmp(out.storage.data(), again.storage.data(), out.storage.size() * sizeof(bf16)));
      expect_states_repeat(g, state, repeated_state);
      decayed_attention_forward(out.view, q.view, k.view, v.view, View4<const bf16>(gate.view), g.kv.options(),
                                g.kv.initial, state);
      decayed_attention_forward(again.view, q.view, k_repeated.view, v_repeated.view,
                                View4<const bf16>(gate_repeated.view), r.options, r.initial, repeated_state);
      EXPECT_EQ(0, std::memcmp(out.storage.data(), again.storage.data(), out.storage.size() * sizeof(bf16)))
          << "chunked";
      expect_states_repeat(g, state, repeated_state);
    }
}

// One sequence, so that its k/v heads are shared out over the threads: bit for bit at one thread and two.
TEST(QueryGroups, ChunkedIsTheSameForAnyThreadCount) {
  for (Decay d : {Decay::retention, Decay::token, Decay::key}) {
    const Grouped g = make_grouped(make_case(1, 300, 3, 16, 16, d), 2);
    SCOPED_TRACE(describe(g));
    expect_same_at_one_and_two_threads([&] { return chunked(g); }, &Result::out, &Result::final_state);
  }
}

// A call large enough for threads splits a sequence's k/v heads into blocks by the thread count: bit for bit
// the single thread's result, and the oracle's.
TEST(QueryGroups, TokenByTokenOverHeadBlocksAndThreads) {
  for (Decay d : {Decay::head, Decay::key}) {
    const Grouped g = make_grouped(make_case(1, 300, 4, 24, 40, d), 2);
    SCOPED_TRACE(describe(g));
    const reference::DecayedOutput o = oracle_forward(g);
    const Problem& p = g.kv;
    expect_recurrence_over_threads(
        g.out_extent(), p.c.layout, p.initial, o.out, o.final_state, [&](TensorView out, std::vector<float>& state) {
          decayed_recurrent_forward(out, g.q.view, p.k.view, p.v.view, p.gate(), state, p.options());
        });
  }
}

// Decoding one token at a time with a RecurrentState of the k/v heads gives the chunked forward; so does a
// bf16 state, within its rounding.
TEST(QueryGroups, DecodeStepMatchesTheForward) {
  for (Decay d : kAllDecays) {
    const Grouped g = make_grouped(make_case(2, 24, 2, 8, 6, d), 3);
    const Problem& p = g.kv;
    const Case& c = p.c;
    SCOPED_TRACE(describe(g));
    std::vector<float> final_state(p.state_size());
    Tensor32 want = make_tensor(g.out_extent(), Layout::bnhd);
    decayed_attention_forward(want.view, g.q.view, p.k.view, p.v.view, p.gate(), p.options(), {}, final_state);
    RecurrentState state(c.B, c.H, c.K, c.V, decay_name(d));
    expect_steps_match_the_forward(
        want.view, state, "query_groups.state", [&](TensorView out, auto at, RecurrentState& s) {
          decayed_step(out, at(g.q.view), at(p.k.view), at(p.v.view), at(p.gate()), s, p.options());
        });
    EXPECT_LT(relative_error(std::vector<float>(state.S().begin(), state.S().end()), widen(final_state)), 2e-5);

    RecurrentState half(c.B, c.H, c.K, c.V, decay_name(d), DType::bf16);
    Tensor32 out = make_tensor(g.out_extent(), Layout::bnhd);
    decayed_step(out.view, g.q.view, p.k.view, p.v.view, p.gate(), half, p.options());
    EXPECT_LT(relative_error(out.view, reference::to_double(want.view)), 2e-2) << "bf16 state";
  }
}

// A problem's q and dout replaced by ones of R·H heads (query groups), drawn from `seed`.
template <class Problem>
Problem with_query_groups(Problem p, int64_t R, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const auto [B, T, H, K] = p.k.extent();
  p.q = random_tensor({B, T, R * H, K}, p.c.layout, rng);
  p.dout = random_tensor({B, T, R * H, p.v.extent()[3]}, p.c.layout, rng);
  return p;
}

// The oracle's backward with query groups (each read-out's share of dS and its own dq; the C++ backwards refuse
// them) is the derivative of its forward: every gradient against central differences.
TEST(QueryGroupsReference, GradientsMatchFiniteDifferences) {
  for (Decay d : kAllDecays) {
    Case c = make_case(2, 9, 2, 3, 4, d);
    c.chunk = 4, c.g_lo = -2.0f, c.g_hi = 0.5f;
    SCOPED_TRACE(describe(c));
    expect_oracle_gradients_match_finite_differences(with_query_groups(make_problem(c, 7), 3, 8));
  }
  for (DeltaGate gate : kDeltaGates)
    for (bool l2norm : {false, true}) {
      delta::Case c{2, 9, 2, 3, 4, gate, l2norm, 4};
      c.key_scale = l2norm ? 1.0f : 0.5f;
      SCOPED_TRACE(delta::describe(c));
      delta::expect_oracle_gradients_match_finite_differences(with_query_groups(delta::make_problem(c, 9), 2, 10));
    }
}

// The chunked backward of a problem whose q and dout have R·H heads (with_query_groups).
struct Backward {
  Tensor32 dq, dk, dv, dg;
  std::vector<float> dinitial;
};
Backward chunked_backward(const Problem& p, ConstTensorView q, ConstTensorView dout, std::span<const float> dfinal) {
  const Case& c = p.c;
  const bool gated = gate_cols(c) > 0;
  Backward r{make_tensor(q.extent, c.layout), make_tensor(p.k.extent(), c.layout), make_tensor(p.v.extent(), c.layout),
             gated ? make_tensor(p.g.extent(), c.layout) : Tensor32{}, std::vector<float>(p.state_size())};
  decayed_attention_backward(r.dq.view, r.dk.view, r.dv.view, gated ? r.dg.view : TensorView{}, r.dinitial, dout,
                             dfinal, q, p.k.view, p.v.view, p.gate(), p.options(), p.initial);
  return r;
}
Backward chunked_backward(const Problem& p) { return chunked_backward(p, p.q.view, p.dout.view, p.dfinal); }

void expect_backward_matches_oracle(const Problem& p) {
  SCOPED_TRACE(describe(p.c) + " q of " + std::to_string(p.q.extent()[2]) + " heads");
  const reference::DecayedGradients o = oracle(p).backward;
  const Backward b = chunked_backward(p);
  EXPECT_LT(relative_error(b.dq.view, o.dq), 2e-4) << "dq";
  EXPECT_LT(relative_error(b.dk.view, o.dk), 2e-4) << "dk";
  EXPECT_LT(relative_error(b.dv.view, o.dv), 2e-4) << "dv";
  EXPECT_LT(relative_error(b.dinitial, o.dinitial_state), 2e-4) << "dinitial_state";
  if (gate_cols(p.c) > 0) {
    EXPECT_LT(relative_error(b.dg.view, o.dg), 2e-4) << "dg";
  }
}

// The decayed family's chunked backward takes query groups natively (each chunk's R read-outs add their shares,
// the state's sweeps once): against the oracle over awkward shapes and packed sequences with an empty one.
TEST(QueryGroupsBackward, MatchesTheOracle) {
  for (Decay d : kAllDecays) {
    for (int64_t T : {1, 63, 65, 97})
      for (int64_t R : {2, 3})
        expect_backward_matches_oracle(with_query_groups(
            make_problem(make_case(2, T, 2, 7, 5, d, {}, T == 65 ? Layout::padded : Layout::bnhd), 3), R, 4));
    expect_backward_matches_oracle(
        with_query_groups(make_problem(make_case(1, 70, 2, 7, 5, d, {0, 33, 33, 70})), 2, 5));
  }
  for (Decay d : {Decay::token, Decay::key}) {  // strong decays: chunks that end early
    Case c = make_case(1, 130, 2, 8, 8, d);
    c.g_lo = -25.0f;
    expect_backward_matches_oracle(with_query_groups(make_problem(c), 3, 6));
  }
}

// The sum of R ungrouped backwards, one per query head r of the groups (q[:, :, r::R], dout[:, :, r::R], views;
// dfinal_state in the first alone): dq theirs, dk, dv, dg and dinitial_state their sums (within rounding); the
// same at one thread and two, bit for bit.
TEST(QueryGroupsBackward, IsTheSumOfOnePassPerQueryHead) {
  for (Decay d : kAllDecays) {
    const int64_t R = 3;
    const Problem p = with_query_groups(make_problem(make_case(2, 50, 2, 6, 5, d, {}, Layout::padded), 7), R, 8);
    SCOPED_TRACE(describe(p.c));
    const Backward grouped = chunked_backward(p);
    std::vector<double> dk(dense(p.k).size()), dv(dense(p.v).size()), dg(gate_cols(p.c) > 0 ? dense(p.g).size() : 0),
        dinitial(p.state_size());
    const auto add = [](std::vector<double>& sum, const std::vector<float>& x) {
      for (size_t i = 0; i < x.size(); ++i) sum[i] += x[i];
    };
    for (int64_t r = 0; r < R; ++r) {
      const Backward one = chunked_backward(p, detail::query_view(ConstTensorView(p.q.view), R, r),
                                            detail::query_view(ConstTensorView(p.dout.view), R, r),
                                            r == 0 ? std::span<const float>(p.dfinal) : std::span<const float>());
      const std::vector<float> dq = dense(one.dq);
      EXPECT_LT(relative_error(dense(detail::query_view(ConstTensorView(grouped.dq.view), R, r)),
                               std::vector<double>(dq.begin(), dq.end())),
                1e-5)
          << "dq of query head " << r;
      add(dk, dense(one.dk)), add(dv, dense(one.dv)), add(dinitial, one.dinitial);
      if (!dg.empty()) add(dg, dense(one.dg));
    }
    EXPECT_LT(relative_error(dense(grouped.dk), dk), 1e-5) << "dk";
    EXPECT_LT(relative_error(dense(grouped.dv), dv), 1e-5) << "dv";
    EXPECT_LT(relative_error(grouped.dinitial, dinitial), 1e-5) << "dinitial_state";
    if (!dg.empty()) {
      EXPECT_LT(relative_error(dense(grouped.dg), dg), 1e-5) << "dg";
    }
  }
  for (Decay d : {Decay::retention, Decay::token, Decay::key}) {  // one sequence: its heads over the threads
    const Problem p = with_query_groups(make_problem(make_case(1, 300, 3, 16, 16, d), 7), 2, 8);
    SCOPED_TRACE(describe(p.c));
    expect_same_at_one_and_two_threads([&] { return chunked_backward(p); }, &Backward::dq, &Backward::dk, &Backward::dv,
                                       &Backward::dg, &Backward::dinitial);
  }
}

TEST(QueryGroupsErrors, RefusedByName) {
  const Grouped g = make_grouped(make_case(1, 5, 2, 3, 3, Decay::token), 2);
  const Problem& p = g.kv;
  Tensor32 out = make_tensor(g.out_extent(), Layout::bnhd);
  const std::string op = "linattn::decayed_attention_forward: ";
  // out of k's heads (q's four expected).
  Tensor32 out2 = make_tensor({1, 5, 2, 3}, Layout::bnhd);
  expect_refused([&] { decayed_attention_forward(out2.view, g.q.view, p.k.view, p.v.view, p.gate(), p.options()); },
                 op + "out.extent[2] (heads) is 2, expected 4 (q's heads)", "out of k's heads");
  // g of q's heads (one gate a k/v head expected).
  Tensor32 g4 = make_tensor({1, 5, 4, 1}, Layout::bnhd);
  expect_refused([&] { decayed_attention_forward(out.view, g.q.view, p.k.view, p.v.view, g4.view, p.options()); },
                 op + "g.extent[2] (heads) is 4, expected 2 (k's and v's heads)", "g of q's heads");
  // Both groupings at once: v of more heads than k while q has more too.
  Tensor32 v4 = make_tensor({1, 5, 4, 3}, Layout::bnhd);
  expect_refused([&] { decayed_attention_forward(out.view, g.q.view, p.k.view, v4.view, g4.view, p.options()); },
                 op + "v.extent[2] (heads) is 4, expected k's 2 heads: q's 4 heads group over k's (query groups)",
                 "query groups with grouped value heads");
  // q's heads no multiple of k's.
  std::mt19937_64 rng(5);
  const Tensor32 q3 = random_tensor({1, 5, 3, 3}, Layout::bnhd, rng);
  Tensor32 out3 = make_tensor({1, 5, 3, 3}, Layout::bnhd);
  expect_refused([&] { decayed_attention_forward(out3.view, q3.view, p.k.view, p.v.view, p.gate(), p.options()); },
                 op + "q.extent[2] (heads) is 3, expected a multiple of k's 2 heads (query groups",
                 "q of 3 heads over k of 2");
  // The state: one a k/v head.
  std::vector<float> big(size_t(4 * 3 * 3));
  expect_refused(
      [&] { decayed_attention_forward(out.view, g.q.view, p.k.view, p.v.view, p.gate(), p.options(), {}, big); },
      op + "final_state has 36 elements, expected 18 ([N, H, K, V] = [1, 2, 3, 3], H k's and v's heads",
      "a final state per query head");
  RecurrentState state(1, 4, 3, 3, decay_name(Decay::token));
  expect_refused([&] { decayed_step(out.view, g.q.view, p.k.view, p.v.view, p.gate(), state, p.options()); },
                 "linattn::decayed_step: state.heads() is 4, expected 2", "a decoding state per query head");
}

// The DPLR delta rule takes query groups as R calls: refused with the words that say so.
TEST(QueryGroupsErrors, OtherFamiliesRefuse) {
  const Grouped g = make_grouped(make_case(1, 5, 2, 3, 3, Decay::token), 2);
  const Problem& p = g.kv;
  Tensor32 out = make_tensor(g.out_extent(), Layout::bnhd);
  std::mt19937_64 rng(7);
  const Tensor32 a = random_tensor(p.k.extent(), Layout::bnhd, rng), b = random_tensor(p.k.extent(), Layout::bnhd, rng),
                 gk = random_tensor(p.k.extent(), Layout::bnhd, rng, -1.0f, 0.0f);
  std::vector<float> state(p.state_size());
  expect_refused(
      [&] {
        dplr_delta_rule_recurrent_forward(out.view, g.q.view, p.k.view, p.v.view, a.view, b.view, gk.view, state);
      },
      "linattn::dplr_delta_rule_recurrent_forward: q.extent[2] (heads) is 4, expected k's 2 heads: query heads grouped "
      "over the key/value heads (ONNX LinearAttention's 2 query heads a k/v head) are native only in the forwards of "
      "the decayed family and the delta rule",
      "the DPLR delta rule with query groups");
}

// The delta rule (DeltaNet, Gated DeltaNet, KDA): its problem over the k/v heads and q of R·H heads.
struct DeltaGrouped {
  delta::Problem kv;
  Tensor32 q;  // [B, T, R·H, K]
  int64_t R;
  int64_t HQ() const { return kv.c.H * R; }
  std::array<int64_t, 4> out_extent() const { return {kv.c.B, kv.c.T, HQ(), kv.c.V}; }
};

DeltaGrouped make_delta(int64_t B, int64_t T, int64_t H, int64_t K, int64_t V, DeltaGate gate, int64_t R,
                        std::vector<int64_t> cu_seqlens = {}, bool l2norm = true, Layout layout = Layout::bnhd) {
  delta::Case c{B, T, H, K, V, gate, l2norm, 16};
  c.layout = layout, c.cu_seqlens = std::move(cu_seqlens);
  std::mt19937_64 rng(uint64_t(T + R));
  return {delta::make_problem(c, 5), random_tensor({B, T, H * R, K}, layout, rng), R};
}

std::string describe(const DeltaGrouped& g) { return delta::describe(g.kv.c) + " R" + std::to_string(g.R); }

reference::DecayedOutput oracle_forward(const DeltaGrouped& g) {
  const delta::Problem& p = g.kv;
  reference::Tensor gate;
  if (delta::gate_cols(p.c) > 0) gate = reference::to_double(p.g.view);
  const std::vector<double> initial = delta::widen(p.initial);
  return reference::delta_rule_forward(reference::to_double(g.q.view), reference::to_double(p.k.view),
                                       reference::to_double(p.v.view), reference::to_double(p.beta.view),
                                       delta::gate_cols(p.c) > 0 ? &gate : nullptr, p.options(), &initial);
}

// k, v, β, g and the initial state of a call: the problem's, or the repeated call's.
struct DeltaInputs {
  ConstTensorView k, v, beta, g;
  std::vector<float> initial;
};
DeltaInputs own_inputs(const DeltaGrouped& g) {
  return {g.kv.k.view, g.kv.v.view, g.kv.beta.view, g.kv.gate(), g.kv.initial};
}
// The chunked forward (tokens: the token-by-token forward, in place) of the problem's q over `in`.
Result run_delta(const DeltaGrouped& g, const DeltaInputs& in, bool tokens) {
  const delta::Case& c = g.kv.c;
  Result r{make_tensor(g.out_extent(), c.layout), in.initial};
  if (tokens)
    delta_rule_recurrent_forward(r.out.view, g.q.view, in.k, in.v, in.beta, in.g, r.final_state, g.kv.options());
  else
    delta_rule_forward(r.out.view, g.q.view, in.k, in.v, in.beta, in.g, g.kv.options(), in.initial, r.final_state);
  return r;
}

void expect_matches_oracle(const DeltaGrouped& g) {
  SCOPED_TRACE(describe(g));
  const reference::DecayedOutput o = oracle_forward(g);
  for (bool tokens : {false, true}) {
    const Result r = run_delta(g, own_inputs(g), tokens);
    EXPECT_TRUE(all_finite(r.out.view));
    EXPECT_LT(relative_error(r.out.view, o.out), 2e-4) << (tokens ? "token by token" : "chunked");
    EXPECT_LT(relative_error(r.final_state, o.final_state), 2e-4) << (tokens ? "token by token" : "chunked");
  }
}

TEST(QueryGroupsDelta, ForwardsMatchTheOracleOverAwkwardShapes) {
  for (DeltaGate gate : kDeltaGates)
    for (int64_t T : {1, 63, 65, 97})
      for (int64_t R : {2, 3})
        expect_matches_oracle(make_delta(2, T, 2, 7, 5, gate, R, {}, R == 2,
                                         T == 65   ? Layout::padded
                                         : T == 97 ? Layout::bhnd
                                                   : Layout::bnhd));
}

TEST(QueryGroupsDelta, PackedSequencesWithAnEmptyOneMatchTheOracle) {
  for (DeltaGate gate : kDeltaGates) {
    expect_matches_oracle(make_delta(1, 70, 2, 7, 5, gate, 2, {0, 33, 33, 70}));
    expect_matches_oracle(make_delta(1, 3, 1, 7, 5, gate, 3, {0, 1, 1, 2, 3}));
  }
}

// The grouped call against the call with k, v, β, g and the states repeated per query head: out bit for bit
// and every query head's final state its k/v head's, chunked and token by token.
TEST(QueryGroupsDelta, EqualsTheCallWithRepeatedKeysValuesAndGates) {
  for (DeltaGate gate : kDeltaGates)
    for (const DeltaGrouped& g : {make_delta(2, 45, 2, 9, 6, gate, 2, {}, true, Layout::padded),
                                  make_delta(1, 97, 2, 7, 5, gate, 3, {0, 40, 40, 97}, false)}) {
      SCOPED_TRACE(describe(g));
      const delta::Case& c = g.kv.c;
      const bool gated = delta::gate_cols(c) > 0;
      const Tensor32 k = repeat_heads(g.kv.k.view, g.HQ(), c.layout), v = repeat_heads(g.kv.v.view, g.HQ(), c.layout),
                     beta = repeat_heads(g.kv.beta.view, g.HQ(), c.layout),
                     gates = gated ? repeat_heads(g.kv.g.view, g.HQ(), c.layout) : Tensor32{};
      const DeltaInputs repeated{k.view, v.view, beta.view, gated ? ConstTensorView(gates.view) : ConstTensorView{},
                                 repeat_states(g.kv.initial, delta::sequences(c), c.H, g.R, c.K * c.V)};
      for (bool tokens : {false, true}) {
        const Result grouped = run_delta(g, own_inputs(g), tokens), again = run_delta(g, repeated, tokens);
        EXPECT_EQ(dense(grouped.out), dense(again.out)) << (tokens ? "token by token" : "chunked");
        expect_states_repeat(grouped.final_state, again.final_state, delta::sequences(c), c.H, g.R, c.K * c.V);
      }
    }
}

// Bit for bit at one thread and two (chunked) and over 1, 2, 3 threads (token by token, heads split in blocks);
// decoding one token at a time with a RecurrentState of the k/v heads gives the chunked forward.
TEST(QueryGroupsDelta, SameForAnyThreadCountAndDecodeSteps) {
  for (DeltaGate gate : {DeltaGate::token, DeltaGate::key}) {
    const DeltaGrouped g = make_delta(1, 300, 4, 24, 40, gate, 2);
    SCOPED_TRACE(describe(g));
    expect_same_at_one_and_two_threads([&] { return run_delta(g, own_inputs(g), false); }, &Result::out,
                                       &Result::final_state);
    const reference::DecayedOutput o = oracle_forward(g);
    const delta::Problem& p = g.kv;
    expect_recurrence_over_threads(
        g.out_extent(), p.c.layout, p.initial, o.out, o.final_state, [&](TensorView out, std::vector<float>& state) {
          delta_rule_recurrent_forward(out, g.q.view, p.k.view, p.v.view, p.beta.view, p.gate(), state, p.options());
        });
  }
  for (DeltaGate gate : kDeltaGates) {
    const DeltaGrouped g = make_delta(2, 24, 2, 8, 6, gate, 3);
    const delta::Problem& p = g.kv;
    SCOPED_TRACE(describe(g));
    Tensor32 want = make_tensor(g.out_extent(), Layout::bnhd);
    delta_rule_forward(want.view, g.q.view, p.k.view, p.v.view, p.beta.view, p.gate(), p.options());
    RecurrentState state(p.c.B, p.c.H, p.c.K, p.c.V, delta_name(gate));
    expect_steps_match_the_forward(
        want.view, state, "query_groups_delta.state", [&](TensorView out, auto at, RecurrentState& s) {
          delta_rule_step(out, at(g.q.view), at(p.k.view), at(p.v.view), at(p.beta.view), at(p.gate()), s, p.options());
        });
  }
}

TEST(QueryGroupsDeltaErrors, BackwardRefuses) {
  const DeltaGrouped g = make_delta(1, 5, 2, 3, 3, DeltaGate::token, 2);
  const delta::Problem& p = g.kv;
  Tensor32 dq = make_tensor(g.q.extent(), Layout::bnhd), dk = make_tensor(p.k.extent(), Layout::bnhd),
           dv = make_tensor(p.v.extent(), Layout::bnhd), dbeta = make_tensor(p.beta.extent(), Layout::bnhd),
           dg = make_tensor(p.g.extent(), Layout::bnhd), dout = make_tensor(g.out_extent(), Layout::bnhd);
  expect_refused(
      [&] {
        delta_rule_backward(dq.view, dk.view, dv.view, dbeta.view, dg.view, {}, dout.view, {}, g.q.view, p.k.view,
                            p.v.view, p.beta.view, p.gate(), p.options());
      },
      "linattn::delta_rule_backward: q has 4 heads over k's and v's 2 (query groups), which this backward does not "
      "take natively",
      "the delta rule's backward of query groups");
}

}  // namespace
}  // namespace linattn::testing
