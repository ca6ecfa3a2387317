// causal_linear_attention_forward/backward: against the fp64 oracle with initial and final states,
// invariance to the chunk size, state chaining (two half passes == one pass), and the gradient of
// the initial state.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "linattn/linear_attention.hpp"
#include "linattn/reference.hpp"
#include "linear_support.hpp"
#include "support/tensors.hpp"

namespace linattn {
namespace {

using testing::Layout;
using testing::LinearCase;

// fp32 against fp64; measured worst case over this file ≈ 3e-6 (see linear_attention_test.cpp).
constexpr double kBound = 1e-5;

// A random state, as a chunk of earlier keys would leave it (z ≥ 0 so that den stays positive).
RecurrentState random_state(const LinearCase& c, int64_t M, const std::string& map, std::mt19937_64& rng) {
  RecurrentState s(c.B, c.H, M, c.E, map);
  std::uniform_real_distribution<float> S(-2.0f, 2.0f), z(0.5f, 4.0f);
  for (float& x : s.S()) x = S(rng);
  for (float& x : s.z()) x = z(rng);
  s.set_position(5);
  return s;
}

struct CausalCase {
  LinearCase c;
  const char* map;
  int64_t chunk;
  bool key_lengths, initial;
  Layout layout;
};

class CausalOracle : public ::testing::TestWithParam<CausalCase> {};

TEST_P(CausalOracle, StatesAndGradientsMatchTheOracle) {
  const CausalCase& o = GetParam();
  std::mt19937_64 rng(o.c.Nq * 31 + o.c.D * 7 + o.chunk);
  const bool identity = std::string(o.map) == "identity";  // positive inputs keep its den away from 0
  auto in = testing::random_inputs(o.c, o.layout, rng, identity ? 0.05f : -1.0f, 1.0f);
  std::vector<int64_t> lengths;
  if (o.key_lengths) lengths = testing::spread_key_lengths(o.c, rng);
  LinearAttentionOptions options;
  options.feature_map = feature_map_by_name(o.map);
  options.causal = true;
  options.chunk_size = o.chunk;
  options.key_lengths = lengths;
  // Without an initial state the operator starts from zero, and dinitial is the gradient there.
  const RecurrentState initial =
      o.initial ? random_state(o.c, o.c.D, o.map, rng) : RecurrentState(o.c.B, o.c.H, o.c.D, o.c.E, o.map);
  const RecurrentState* init = o.initial ? &initial : nullptr;

  auto out = testing::make_tensor({o.c.B, o.c.Nq, o.c.H, o.c.E}, o.layout);
  RecurrentState final_state;
  causal_linear_attention_forward(out.view, in.q.view, in.k.view, in.v.view, options, init, &final_state);
  const auto q = reference::to_double(in.q.view), k = reference::to_double(in.k.view),
             v = reference::to_double(in.v.view);
  const reference::State init64 = testing::to_double(initial);
  reference::State final64;
  const auto want = reference::linear_attention_forward(q, k, v, options, o.initial ? &init64 : nullptr, &final64);
  EXPECT_LE(testing::relative_error(out.view, want), kBound);
  EXPECT_LE(testing::state_error(final_state, final64), kBound);
  int64_t consumed = o.c.Nk;
  if (o.key_lengths) consumed = *std::max_element(lengths.begin(), lengths.end());
  EXPECT_EQ(final_state.position(), (o.initial ? 5 : 0) + consumed);
  EXPECT_EQ(final_state.feature_map(), o.map);

  auto dout = testing::random_tensor({o.c.B, o.c.Nq, o.c.H, o.c.E}, o.layout, rng);
  auto dq = testing::make_tensor(in.q.extent(), o.layout), dk = testing::make_tensor(in.k.extent(), o.layout),
       dv = testing::make_tensor(in.v.extent(), o.layout);
  RecurrentState dinitial;
  causal_linear_attention_backward(dq.view, dk.view, dv.view, dout.view, in.q.view, in.k.view, in.v.view, options, init,
                                   &dinitial);
  reference::State dinit64;
  const auto grads =
      reference::linear_attention_backward(reference::to_double(dout.view), q, k, v, options, &init64, &dinit64);
  EXPECT_LE(testing::relative_error(dq.view, grads.dq), kBound) << "dq";
  EXPECT_LE(testing::relative_error(dk.view, grads.dk), kBound) << "dk";
  EXPECT_LE(testing::relative_error(dv.view, grads.dv), kBound) << "dv";
  EXPECT_LE(testing::state_error(dinitial, dinit64), kBound) << "dinitial";
}

constexpr Layout bnhd = Layout::bnhd, bhnd = Layout::bhnd, padded = Layout::padded;

const CausalCase kCases[] = {
    {{1, 1, 1, 1, 16, 16}, "elu", 64, false, true, bnhd},
    {{3, 2, 2, 3, 59, 16}, "relu", 1, true, true, padded},
    {{1, 63, 63, 3, 16, 59}, "elu", 7, false, true, bhnd},
    {{3, 64, 64, 1, 64, 64}, "elu", 64, true, false, padded},
    {{1, 65, 65, 3, 128, 16}, "identity", 64, false, false, bnhd},
    {{3, 97, 97, 1, 16, 128}, "relu", 7, true, true, bhnd},
    {{1, 1000, 1000, 1, 64, 64}, "elu", 64, false, true, bnhd},
    {{1, 1000, 1000, 1, 59, 1}, "elu", 1000, false, false, padded},
};

std::string name_of(const ::testing::TestParamInfo<CausalCase>& info) {
  const CausalCase& o = info.param;
  std::string name = testing::case_name(o.c);
  name.append("_").append(o.map).append("_chunk").append(std::to_string(o.chunk));
  if (o.key_lengths) name.append("_lengths");
  if (o.initial) name.append("_initial");
  return name.append("_").append(testing::layout_name(o.layout));
}

INSTANTIATE_TEST_SUITE_P(Shapes, CausalOracle, ::testing::ValuesIn(kCases), name_of);

// The chunk size changes the order of the sums only: every chunking agrees with the oracle.
TEST(CausalLinearAttention, InvariantToChunkSize) {
  std::mt19937_64 rng(5);
  const LinearCase c{3, 97, 97, 3, 16, 24};
  auto in = testing::random_inputs(c, Layout::bhnd, rng);
  const std::vector<int64_t> lengths{97, 50, 0};
  LinearAttentionOptions options;
  options.key_lengths = lengths;
  options.causal = true;
  const auto want = reference::linear_attention_forward(
      reference::to_double(in.q.view), reference::to_double(in.k.view), reference::to_double(in.v.view), options);
  std::vector<float> first;
  for (int64_t chunk : {1, 7, 64, 97, 5000}) {
    options.chunk_size = chunk;
    auto out = testing::make_tensor({c.B, c.Nq, c.H, c.E}, Layout::bhnd);
    causal_linear_attention_forward(out.view, in.q.view, in.k.view, in.v.view, options);
    EXPECT_LE(testing::relative_error(out.view, want), kBound) << "chunk " << chunk;
    if (first.empty()) first = out.storage;
    EXPECT_LE(testing::relative_error(out.storage, std::vector<double>(first.begin(), first.end())), kBound);
  }
}

// At N = 1 the only key a query sees is its own, causal or not.
TEST(CausalLinearAttention, EqualsNonCausalForOneToken) {
  std::mt19937_64 rng(9);
  const LinearCase c{3, 1, 1, 3, 59, 16};
  auto in = testing::random_inputs(c, Layout::padded, rng);
  auto a = testing::make_tensor({c.B, 1, c.H, c.E}, Layout::padded),
       b = testing::make_tensor({c.B, 1, c.H, c.E}, Layout::padded);
  causal_linear_attention_forward(a.view, in.q.view, in.k.view, in.v.view);
  linear_attention_forward(b.view, in.q.view, in.k.view, in.v.view);
  EXPECT_LE(testing::relative_error(a.view, reference::to_double(b.view)), 1e-6);
}

// Running the first half, then the second half from its final state, gives the one-pass outputs,
// final state and (for the second half) gradients; dinitial of the second half is dL/d(middle state).
TEST(CausalLinearAttention, TwoHalvesEqualOnePass) {
  std::mt19937_64 rng(13);
  const LinearCase c{3, 130, 130, 3, 16, 20}, half{3, 65, 65, 3, 16, 20};
  auto in = testing::random_inputs(c, Layout::bnhd, rng);
  auto dout = testing::random_tensor({c.B, c.Nq, c.H, c.E}, Layout::bnhd, rng);
  LinearAttentionOptions options;
  options.chunk_size = 16;
  auto out = testing::make_tensor({c.B, c.Nq, c.H, c.E}, Layout::bnhd);
  RecurrentState whole;
  causal_linear_attention_forward(out.view, in.q.view, in.k.view, in.v.view, options, nullptr, &whole);
  auto dq = testing::make_tensor(in.q.extent(), Layout::bnhd), dk = testing::make_tensor(in.k.extent(), Layout::bnhd),
       dv = testing::make_tensor(in.v.extent(), Layout::bnhd);
  causal_linear_attention_backward(dq.view, dk.view, dv.view, dout.view, in.q.view, in.k.view, in.v.view, options);

  auto part = [](TensorView x, int64_t begin, int64_t count) {
    x.data += begin * x.stride[1];
    x.extent[1] = count;
    return x;
  };
  RecurrentState middle, end;
  auto out1 = testing::make_tensor({c.B, half.Nq, c.H, c.E}, Layout::bnhd);
  auto out2 = testing::make_tensor({c.B, half.Nq, c.H, c.E}, Layout::bnhd);
  causal_linear_attention_forward(out1.view, part(in.q.view, 0, 65), part(in.k.view, 0, 65), part(in.v.view, 0, 65),
                                  options, nullptr, &middle);
  EXPECT_EQ(middle.position(), 65);
  causal_linear_attention_forward(out2.view, part(in.q.view, 65, 65), part(in.k.view, 65, 65), part(in.v.view, 65, 65),
                                  options, &middle, &end);
  EXPECT_EQ(end.position(), 130);
  const auto whole_out = reference::to_double(out.view);
  reference::Tensor first({c.B, 65, c.H, c.E}), second({c.B, 65, c.H, c.E});
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t n = 0; n < 65; ++n)
      for (int64_t h = 0; h < c.H; ++h)
        for (int64_t e = 0; e < c.E; ++e) {
          first(b, n, h, e) = whole_out(b, n, h, e);
          second(b, n, h, e) = whole_out(b, n + 65, h, e);
        }
  EXPECT_LE(testing::relative_error(out1.view, first), kBound);
  EXPECT_LE(testing::relative_error(out2.view, second), kBound);
  EXPECT_LE(testing::state_error(end, testing::to_double(whole)), kBound);

  // Second half's gradients, and dL/d(middle) against the oracle run from the same middle state.
  auto dq2 = testing::make_tensor({c.B, 65, c.H, c.D}, Layout::bnhd);
  auto dk2 = testing::make_tensor({c.B, 65, c.H, c.D}, Layout::bnhd);
  auto dv2 = testing::make_tensor({c.B, 65, c.H, c.E}, Layout::bnhd);
  RecurrentState dmiddle;
  causal_linear_attention_backward(dq2.view, dk2.view, dv2.view, part(dout.view, 65, 65), part(in.q.view, 65, 65),
                                   part(in.k.view, 65, 65), part(in.v.view, 65, 65), options, &middle, &dmiddle);
  const auto grad_q = reference::to_double(part(dq.view, 65, 65)), grad_k = reference::to_double(part(dk.view, 65, 65)),
             grad_v = reference::to_double(part(dv.view, 65, 65));
  EXPECT_LE(testing::relative_error(dq2.view, grad_q), kBound);
  EXPECT_LE(testing::relative_error(dk2.view, grad_k), kBound);
  EXPECT_LE(testing::relative_error(dv2.view, grad_v), kBound);
  const reference::State middle64 = testing::to_double(middle);
  reference::State dmiddle64;
  LinearAttentionOptions causal = options;
  causal.causal = true;
  reference::linear_attention_backward(reference::to_double(part(dout.view, 65, 65)),
                                       reference::to_double(part(in.q.view, 65, 65)),
                                       reference::to_double(part(in.k.view, 65, 65)),
                                       reference::to_double(part(in.v.view, 65, 65)), causal, &middle64, &dmiddle64);
  EXPECT_LE(testing::state_error(dmiddle, dmiddle64), kBound);
}

// final_state may be the initial state itself: the pass continues it in place.
TEST(CausalLinearAttention, FinalStateMayBeTheInitialState) {
  std::mt19937_64 rng(17);
  const LinearCase c{1, 40, 40, 3, 16, 16};
  auto in = testing::random_inputs(c, Layout::bnhd, rng);
  RecurrentState state = random_state(c, c.D, "elu", rng), copy = state, separate;
  auto a = testing::make_tensor({c.B, c.Nq, c.H, c.E}, Layout::bnhd);
  auto b = testing::make_tensor({c.B, c.Nq, c.H, c.E}, Layout::bnhd);
  causal_linear_attention_forward(a.view, in.q.view, in.k.view, in.v.view, {}, &copy, &separate);
  causal_linear_attention_forward(b.view, in.q.view, in.k.view, in.v.view, {}, &state, &state);
  EXPECT_EQ(a.storage, b.storage);
  EXPECT_EQ(std::vector<float>(state.S().begin(), state.S().end()),
            std::vector<float>(separate.S().begin(), separate.S().end()));
  EXPECT_EQ(state.position(), 45);
}

}  // namespace
}  // namespace linattn
