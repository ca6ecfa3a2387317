// The fp64 oracle's backward against central finite differences of its own forward, in fp64:
// L = Σ dout ⊙ forward(q, k, v), dL/dx ≈ (L(x + h) − L(x − h)) / 2h for every input element.
#include <gtest/gtest.h>

#include <functional>
#include <random>

#include "linattn/reference.hpp"
#include "operator_table.hpp"
#include "support/finite_difference.hpp"
#include "support/table_case.hpp"
#include "support/tensors.hpp"

namespace linattn {
namespace {

using reference::Tensor;

Tensor random_double(std::array<int64_t, 4> extent, std::mt19937_64& rng, double lo = -1, double hi = 1) {
  Tensor t(extent);
  std::uniform_real_distribution<double> dist(lo, hi);
  for (double& x : t.data) x = dist(rng);
  return t;
}

// Inputs bounded away from 0, so that relu's kink is never within h of a sample.
Tensor random_away_from_zero(std::array<int64_t, 4> extent, std::mt19937_64& rng) {
  Tensor t = random_double(extent, rng, 0.1, 1.0);
  std::bernoulli_distribution sign(0.5);
  for (double& x : t.data) x = sign(rng) ? x : -x;
  return t;
}

double inner(const Tensor& a, const Tensor& b) {
  double sum = 0;
  for (size_t i = 0; i < a.data.size(); ++i) sum += a.data[i] * b.data[i];
  return sum;
}

// Central differences (step 1e-6) are accurate to O(h²) plus roundoff ~1e-16/h: about 1e-9
// relative here.
constexpr double kFiniteDifferenceBound = 1e-6;

// max |grad − numeric| / max |numeric| over every element of x.
double fd_error(Tensor& x, const Tensor& grad, const std::function<double()>& loss) {
  return testing::finite_difference_relative_error(x.data, grad.data, loss);
}

struct Case {
  int64_t B, Nq, Nk, H, D, E;
};

class SoftmaxReferenceGradient : public ::testing::TestWithParam<std::tuple<Case, bool, bool>> {};

TEST_P(SoftmaxReferenceGradient, MatchesFiniteDifferences) {
  const auto& [c, causal_param, padded_keys] = GetParam();
  const bool causal = causal_param;  // a plain variable: clang 14 cannot capture a structured binding
  std::mt19937_64 rng(7);
  Tensor q = random_double({c.B, c.Nq, c.H, c.D}, rng), k = random_double({c.B, c.Nk, c.H, c.D}, rng),
         v = random_double({c.B, c.Nk, c.H, c.E}, rng), dout = random_double({c.B, c.Nq, c.H, c.E}, rng);
  std::vector<int64_t> lengths;
  for (int64_t b = 0; b < c.B; ++b) lengths.push_back(padded_keys ? std::max<int64_t>(1, c.Nk - 1 - b) : c.Nk);
  SoftmaxAttentionOptions options;
  options.causal = causal;
  options.key_lengths = lengths;
  options.scale = 0.7f;
  const auto loss = [&] { return inner(dout, reference::softmax_attention_forward(q, k, v, options)); };
  const reference::Gradients g = reference::softmax_attention_backward(dout, q, k, v, options);
  EXPECT_LT(fd_error(q, g.dq, loss), kFiniteDifferenceBound);
  EXPECT_LT(fd_error(k, g.dk, loss), kFiniteDifferenceBound);
  EXPECT_LT(fd_error(v, g.dv, loss), kFiniteDifferenceBound);
}

INSTANTIATE_TEST_SUITE_P(Shapes, SoftmaxReferenceGradient,
                         ::testing::Combine(::testing::Values(Case{1, 1, 1, 1, 1, 1}, Case{2, 5, 5, 2, 3, 4},
                                                              Case{1, 3, 7, 1, 5, 2}, Case{2, 7, 3, 1, 4, 4}),
                                            ::testing::Bool(), ::testing::Bool()));

class LinearReferenceGradient : public ::testing::TestWithParam<std::tuple<Case, bool, const char*, bool>> {};

TEST_P(LinearReferenceGradient, MatchesFiniteDifferences) {
  const auto& [c, causal_param, map_name, normalize_param] = GetParam();
  // Plain variables: clang 14 cannot capture a structured binding in a lambda.
  const bool causal = causal_param, normalize = normalize_param;
  std::mt19937_64 rng(11);
  Tensor q = random_away_from_zero({c.B, c.Nq, c.H, c.D}, rng), k = random_away_from_zero({c.B, c.Nk, c.H, c.D}, rng),
         v = random_double({c.B, c.Nk, c.H, c.E}, rng), dout = random_double({c.B, c.Nq, c.H, c.E}, rng);
  std::vector<int64_t> lengths;
  for (int64_t b = 0; b < c.B; ++b) lengths.push_back(std::max<int64_t>(1, c.Nk - b));
  LinearAttentionOptions options;
  options.feature_map = feature_map_by_name(map_name);
  options.causal = causal;
  options.normalize = normalize;
  options.key_lengths = lengths;
  options.eps = 0.5f;  // large, so that a denominator near zero cannot make the check ill-conditioned
  const int64_t M = options.feature_map->feature_dim(c.D);
  // Causal passes also start from a random positive initial state, to check dS0 and dz0.
  reference::State initial{c.B, c.H, M, c.E, {}, {}};
  Tensor S0 = random_double({1, c.B * c.H, M, c.E}, rng), z0 = random_double({1, c.B * c.H, M, 1}, rng, 0.5, 1.0);
  const auto state = [&] {
    initial.S = S0.data;
    initial.z = z0.data;
    return causal ? &initial : nullptr;
  };
  const auto loss = [&] { return inner(dout, reference::linear_attention_forward(q, k, v, options, state())); };
  reference::State dinitial;
  const reference::Gradients g = reference::linear_attention_backward(dout, q, k, v, options, state(), &dinitial);
  EXPECT_LT(fd_error(q, g.dq, loss), kFiniteDifferenceBound);
  EXPECT_LT(fd_error(k, g.dk, loss), kFiniteDifferenceBound);
  EXPECT_LT(fd_error(v, g.dv, loss), kFiniteDifferenceBound);
  if (causal) {
    EXPECT_LT(testing::finite_difference_relative_error(S0.data, dinitial.S, loss), kFiniteDifferenceBound);
    EXPECT_LT(testing::finite_difference_relative_error(z0.data, dinitial.z, loss), kFiniteDifferenceBound);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, LinearReferenceGradient,
    ::testing::Combine(::testing::Values(Case{1, 1, 1, 1, 1, 1}, Case{2, 5, 5, 2, 3, 4}, Case{1, 6, 6, 1, 5, 2}),
                       ::testing::Bool(), ::testing::Values("elu", "relu", "identity"), ::testing::Bool()));

TEST(LinearReferenceGradient, CrossAttentionNonCausalAndCausal) {
  for (const bool causal : {false, true}) {
    std::mt19937_64 rng(3);
    Tensor q = random_away_from_zero({1, 4, 1, 3}, rng), k = random_away_from_zero({1, 7, 1, 3}, rng),
           v = random_double({1, 7, 1, 2}, rng), dout = random_double({1, 4, 1, 2}, rng);
    LinearAttentionOptions options;
    options.causal = causal;
    const auto loss = [&] { return inner(dout, reference::linear_attention_forward(q, k, v, options)); };
    const reference::Gradients g = reference::linear_attention_backward(dout, q, k, v, options);
    EXPECT_LT(fd_error(q, g.dq, loss), kFiniteDifferenceBound);
    EXPECT_LT(fd_error(k, g.dk, loss), kFiniteDifferenceBound);
    EXPECT_LT(fd_error(v, g.dv, loss), kFiniteDifferenceBound);
  }
}

// Every operator of the table with a backward, at its gradient cases: its oracle's backward against
// central differences of its oracle's forward (q, k, v, Linformer's E and F, the decayed rows' gate
// g), then its fast backward against that oracle.
class TableGradient : public ::testing::TestWithParam<const table::Operator*> {};

TEST_P(TableGradient, OracleMatchesFiniteDifferencesAndFastBackwardMatchesOracle) {
  const table::Operator& op = *GetParam();
  const std::vector<table::TestCase> cases = op.gradient_cases();
  ASSERT_FALSE(cases.empty()) << op.name << " declares no gradient case";
  std::mt19937_64 rng(13);
  for (const table::TestCase& c : cases) {
    const auto run = testing::make_run(op, c, rng);
    SCOPED_TRACE(testing::describe(c, *run));
    table::OracleInputs in = run->oracle_inputs();
    const auto loss = [&] { return inner(in.dout, op.oracle_forward(in, run->options).out); };
    const table::OracleBackward g = op.oracle_backward(in, run->options);
    EXPECT_LT(fd_error(in.q, g.dq, loss), kFiniteDifferenceBound);
    EXPECT_LT(fd_error(in.k, g.dk, loss), kFiniteDifferenceBound);
    EXPECT_LT(fd_error(in.v, g.dv, loss), kFiniteDifferenceBound);
    if (op.has_projections) {
      EXPECT_LT(testing::finite_difference_relative_error(in.E, g.dE, loss), kFiniteDifferenceBound);
      EXPECT_LT(testing::finite_difference_relative_error(in.F, g.dF, loss), kFiniteDifferenceBound);
    }
    const bool gated = op.gate_dim(run->sizes) > 0;
    if (gated) {
      EXPECT_LT(fd_error(in.g, g.dg, loss), kFiniteDifferenceBound);
    }
    op.forward(run->operands(), run->options);  // out and lse, which some backwards read
    op.backward(run->operands(), run->options);
    EXPECT_LE(testing::relative_error(run->dq.view, g.dq), op.bound);
    EXPECT_LE(testing::relative_error(run->dk.view, g.dk), op.bound);
    EXPECT_LE(testing::relative_error(run->dv.view, g.dv), op.bound);
    if (op.has_projections) {
      EXPECT_LE(testing::relative_error(run->dE, g.dE), op.bound);
      EXPECT_LE(testing::relative_error(run->dF, g.dF), op.bound);
    }
    if (gated) {
      EXPECT_LE(testing::relative_error(run->dg.view, g.dg), op.bound);
    }
  }
}

std::vector<const table::Operator*> operators_with_backward() {
  std::vector<const table::Operator*> ops;
  for (const table::Operator& op : table::operators())
    if (op.has_backward) ops.push_back(&op);
  return ops;
}

INSTANTIATE_TEST_SUITE_P(Table, TableGradient, ::testing::ValuesIn(operators_with_backward()),
                         [](const auto& p) { return std::string(p.param->name); });

// The oracles agree with each other where the math says they must: linear attention with φ = exp
// is not available, but causal softmax at N = 1 is the value itself, and a fully masked row is 0.
TEST(ReferenceSemantics, SoftmaxFullyMaskedRowIsZeroWithMinusInfinityLse) {
  std::mt19937_64 rng(5);
  Tensor q = random_double({1, 3, 1, 2}, rng), k = random_double({1, 2, 1, 2}, rng),
         v = random_double({1, 2, 1, 2}, rng);
  SoftmaxAttentionOptions options;
  options.causal = true;  // Nq = 3 > Nk = 2: query 0 sees j ≤ 0 + (2 − 3) = −1, i.e. nothing
  std::vector<double> lse;
  const Tensor out = reference::softmax_attention_forward(q, k, v, options, &lse);
  EXPECT_EQ(out(0, 0, 0, 0), 0.0);
  EXPECT_TRUE(std::isinf(lse[0]) && lse[0] < 0);
  EXPECT_NEAR(out(0, 1, 0, 1), v(0, 0, 0, 1), 1e-15);  // query 1 sees key 0 only
}

}  // namespace
}  // namespace linattn
