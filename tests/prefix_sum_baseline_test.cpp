// The benchmark's comparison kernel (bench/baseline/prefix_sum_causal.hpp) computes causal linear
// attention and its backward: checked against the fp64 oracle like any operator, so that the speed
// ratios in docs/performance.md compare like with like.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <tuple>

#include "../bench/baseline/prefix_sum_causal.hpp"
#include "linattn/reference.hpp"
#include "linattn/threads.hpp"
#include "support/tensors.hpp"

namespace linattn {
namespace {

using testing::Layout;
using testing::random_tensor;
using testing::relative_error;

// fp32 sums over up to N tokens of positive terms, against fp64: a few ulps times log-ish growth.
constexpr double kForwardBound = 1e-5;
// The backward subtracts nearly equal terms (the normaliser's two paths), so it keeps fewer digits.
constexpr double kBackwardBound = 5e-5;

// max |got − want| over the scale of the largest gradient. dq and dk alone can be O(eps) by
// cancellation (at N = 1, out = v·(φq·φk)/(φq·φk + eps) hardly depends on q), where their own scale
// would measure fp32 rounding of terms of size |dv| against a value of size eps.
double gradient_error(ConstTensorView got, const reference::Tensor& want, double scale) {
  double worst = 0;
  for (int64_t b = 0; b < got.extent[0]; ++b)
    for (int64_t n = 0; n < got.extent[1]; ++n)
      for (int64_t h = 0; h < got.extent[2]; ++h)
        for (int64_t d = 0; d < got.extent[3]; ++d)
          worst = std::max(worst, std::abs(double(got(b, n, h, d)) - want(b, n, h, d)));
  return worst / scale;
}

double max_abs(const reference::Tensor& t) {
  double m = 0;
  for (double x : t.data) m = std::max(m, std::abs(x));
  return m;
}

struct Shape {
  int64_t B, H, N, D, E;
  const char* map;
};

class PrefixSumBaseline : public ::testing::TestWithParam<Shape> {};

TEST_P(PrefixSumBaseline, MatchesTheOracle) {
  const Shape s = GetParam();
  std::mt19937_64 rng(s.N * 131 + s.D * 7 + s.E);
  const FeatureMapPtr phi = feature_map_by_name(s.map);
  // [B, H, N, D] contiguous storage, viewed as [B, N, H, D] for the oracle.
  auto q = random_tensor({s.B, s.N, s.H, s.D}, Layout::bhnd, rng);
  auto k = random_tensor({s.B, s.N, s.H, s.D}, Layout::bhnd, rng);
  auto v = random_tensor({s.B, s.N, s.H, s.E}, Layout::bhnd, rng);
  auto dout = random_tensor({s.B, s.N, s.H, s.E}, Layout::bhnd, rng);
  auto out = testing::make_tensor({s.B, s.N, s.H, s.E}, Layout::bhnd);
  auto dq = testing::make_tensor(q.extent(), Layout::bhnd);
  auto dk = testing::make_tensor(k.extent(), Layout::bhnd);
  auto dv = testing::make_tensor(v.extent(), Layout::bhnd);
  const float eps = 1e-6f;

  baseline::prefix_sum_causal_forward(out.storage.data(), q.storage.data(), k.storage.data(), v.storage.data(), s.B,
                                      s.H, s.N, s.D, s.E, *phi, eps);
  baseline::prefix_sum_causal_backward(dq.storage.data(), dk.storage.data(), dv.storage.data(), dout.storage.data(),
                                       q.storage.data(), k.storage.data(), v.storage.data(), s.B, s.H, s.N, s.D, s.E,
                                       *phi, eps);

  LinearAttentionOptions options;
  options.feature_map = phi;
  options.eps = eps;
  options.causal = true;
  const auto q64 = reference::to_double(q.view), k64 = reference::to_double(k.view), v64 = reference::to_double(v.view),
             dout64 = reference::to_double(dout.view);
  const reference::Tensor want = reference::linear_attention_forward(q64, k64, v64, options);
  const reference::Gradients grads = reference::linear_attention_backward(dout64, q64, k64, v64, options);
  EXPECT_LE(relative_error(out.view, want), kForwardBound);
  const double scale = std::max({max_abs(grads.dq), max_abs(grads.dk), max_abs(grads.dv)});
  EXPECT_LE(gradient_error(dq.view, grads.dq, scale), kBackwardBound);
  EXPECT_LE(gradient_error(dk.view, grads.dk, scale), kBackwardBound);
  EXPECT_LE(gradient_error(dv.view, grads.dv, scale), kBackwardBound);
}

// Around the feature block (64 tokens) and the vector widths, E ≠ D, B and H of 1 and 3.
INSTANTIATE_TEST_SUITE_P(Shapes, PrefixSumBaseline,
                         ::testing::Values(Shape{1, 1, 1, 1, 1, "elu"}, Shape{1, 3, 2, 16, 59, "elu"},
                                           Shape{3, 1, 63, 59, 16, "relu"}, Shape{1, 1, 64, 64, 64, "elu"},
                                           Shape{3, 3, 65, 64, 128, "elu"}, Shape{1, 3, 97, 128, 64, "relu"},
                                           Shape{1, 1, 1000, 64, 64, "elu"}, Shape{1, 2, 130, 16, 32, "elu"}));

TEST(PrefixSumBaseline, BitwiseIdenticalForOneAndTwoThreads) {
  const int64_t B = 2, H = 3, N = 130, D = 64, E = 64;
  std::mt19937_64 rng(5);
  auto q = random_tensor({B, N, H, D}, Layout::bhnd, rng), k = random_tensor({B, N, H, D}, Layout::bhnd, rng);
  auto v = random_tensor({B, N, H, E}, Layout::bhnd, rng), g = random_tensor({B, N, H, E}, Layout::bhnd, rng);
  auto run = [&](int threads) {
    set_num_threads(threads);
    std::vector<float> out(B * H * N * E), dq(B * H * N * D), dk(B * H * N * D), dv(B * H * N * E);
    const FeatureMapPtr phi = elu_feature_map();
    baseline::prefix_sum_causal_forward(out.data(), q.storage.data(), k.storage.data(), v.storage.data(), B, H, N, D, E,
                                        *phi, 1e-6f);
    baseline::prefix_sum_causal_backward(dq.data(), dk.data(), dv.data(), g.storage.data(), q.storage.data(),
                                         k.storage.data(), v.storage.data(), B, H, N, D, E, *phi, 1e-6f);
    set_num_threads(0);
    return std::make_tuple(out, dq, dk, dv);
  };
  EXPECT_EQ(run(1), run(2));
}

}  // namespace
}  // namespace linattn
