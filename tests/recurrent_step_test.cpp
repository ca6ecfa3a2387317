// recurrent_step: stepping token by token reproduces the causal pass (and the oracle), continues a
// prefilled state, and honours a padded token.
#include <gtest/gtest.h>

#include <random>

#include "linattn/linear_attention.hpp"
#include "linattn/reference.hpp"
#include "linear_support.hpp"
#include "support/tensors.hpp"

namespace linattn {
namespace {

using testing::Layout;
using testing::LinearCase;

// fp32 against fp64 over up to 200 tokens; measured ≤ 1e-6.
constexpr double kBound = 1e-5;

TensorView token(TensorView x, int64_t n) {
  x.data += n * x.stride[1];
  x.extent[1] = 1;
  return x;
}

struct StepCase {
  LinearCase c;
  const char* map;
  bool normalize;
  Layout layout;
};

class RecurrentSteps : public ::testing::TestWithParam<StepCase> {};

// Prefill the first half with the causal pass, then step through the rest: every output and the
// final state match the one-pass oracle.
TEST_P(RecurrentSteps, PrefillThenStepsMatchTheCausalPass) {
  const StepCase& o = GetParam();
  const LinearCase& c = o.c;
  std::mt19937_64 rng(c.Nq + c.D + c.E);
  auto in = testing::random_inputs(c, o.layout, rng);
  LinearAttentionOptions options;
  options.feature_map = feature_map_by_name(o.map);
  options.normalize = o.normalize;
  options.causal = true;
  const int64_t prefill = c.Nq / 2;
  auto out = testing::make_tensor({c.B, c.Nq, c.H, c.E}, o.layout);
  RecurrentState state(c.B, c.H, c.D, c.E, o.map);
  if (prefill > 0) {
    auto part = [&](TensorView x) {
      x.extent[1] = prefill;
      return x;
    };
    causal_linear_attention_forward(part(out.view), part(in.q.view), part(in.k.view), part(in.v.view), options, nullptr,
                                    &state);
  }
  EXPECT_EQ(state.position(), prefill);
  for (int64_t n = prefill; n < c.Nq; ++n)
    recurrent_step(token(out.view, n), token(in.q.view, n), token(in.k.view, n), token(in.v.view, n), state, options);
  EXPECT_EQ(state.position(), c.Nq);
  reference::State final64;
  const auto want =
      reference::linear_attention_forward(reference::to_double(in.q.view), reference::to_double(in.k.view),
                                          reference::to_double(in.v.view), options, nullptr, &final64);
  EXPECT_LE(testing::relative_error(out.view, want), kBound);
  EXPECT_LE(testing::state_error(state, final64), kBound);
}

const StepCase kCases[] = {
    {{1, 1, 1, 1, 1, 1}, "elu", true, Layout::bnhd},
    {{3, 2, 2, 3, 16, 59}, "relu", true, Layout::padded},
    {{1, 65, 65, 3, 59, 16}, "elu", false, Layout::bhnd},
    {{3, 97, 97, 1, 64, 64}, "elu", true, Layout::padded},
    {{1, 200, 200, 3, 128, 16}, "identity", false, Layout::bnhd},
};

std::string name_of(const ::testing::TestParamInfo<StepCase>& info) {
  std::string name = testing::case_name(info.param.c);
  name.append("_").append(info.param.map);
  if (!info.param.normalize) name.append("_unnormalized");
  return name.append("_").append(testing::layout_name(info.param.layout));
}

INSTANTIATE_TEST_SUITE_P(Shapes, RecurrentSteps, ::testing::ValuesIn(kCases), name_of);

// key_lengths[b] == 0 marks batch b's token as padding: its state stays as it was, and its output
// reads the state with its query.
TEST(RecurrentStep, PaddedTokenLeavesTheStateAlone) {
  std::mt19937_64 rng(21);
  const LinearCase c{2, 1, 1, 3, 16, 16};
  auto in = testing::random_inputs(c, Layout::bnhd, rng);
  RecurrentState state(c.B, c.H, c.D, c.E, "elu");
  auto out = testing::make_tensor({c.B, 1, c.H, c.E}, Layout::bnhd);
  recurrent_step(out.view, in.q.view, in.k.view, in.v.view, state);  // both batches take a token
  const RecurrentState before = state;
  const std::vector<int64_t> lengths{1, 0};
  LinearAttentionOptions options;
  options.key_lengths = lengths;
  auto again = testing::random_inputs(c, Layout::bnhd, rng);
  recurrent_step(out.view, again.q.view, again.k.view, again.v.view, state, options);
  const int64_t per_batch = c.H * c.D * c.E;
  EXPECT_NE(std::vector<float>(state.S().begin(), state.S().begin() + per_batch),
            std::vector<float>(before.S().begin(), before.S().begin() + per_batch));
  EXPECT_EQ(std::vector<float>(state.S().begin() + per_batch, state.S().end()),
            std::vector<float>(before.S().begin() + per_batch, before.S().end()));
  EXPECT_EQ(std::vector<float>(state.z().begin() + c.H * c.D, state.z().end()),
            std::vector<float>(before.z().begin() + c.H * c.D, before.z().end()));
  EXPECT_EQ(state.position(), 2);
}

}  // namespace
}  // namespace linattn
