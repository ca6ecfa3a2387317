// The drivers with a feature map that is not one of the built-in elementwise maps: M = 2D ≠ D (and not
// a multiple of the tile padding), and different features for queries and keys, so that a driver
// that assumed M = D, took a fast elementwise path, or passed the wrong FeatureRole would disagree
// with the oracle.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "linattn/linear_attention.hpp"
#include "linattn/reference.hpp"
#include "linear_support.hpp"
#include "support/tensors.hpp"

namespace linattn {
namespace {

using testing::Layout;
using testing::LinearCase;

constexpr double kBound = 1e-5;  // as in linear_attention_test.cpp

// φ(x) = [e(x), s·e(−x)] with e = elu + 1, s = 1 for keys and 2 for queries.
class MirrorMap final : public FeatureMap {
 public:
  std::string name() const override { return "mirror"; }
  int64_t feature_dim(int64_t dim) const override { return 2 * dim; }
  void forward(float* phi, const float* x, int64_t rows, int64_t dim, FeatureRole role) const override {
    apply(phi, x, rows, dim, role);
  }
  void backward(float* dx, const float* dphi, const float* x, int64_t rows, int64_t dim,
                FeatureRole role) const override {
    apply_backward(dx, dphi, x, rows, dim, role);
  }
  void forward_reference(double* phi, const double* x, int64_t rows, int64_t dim, FeatureRole role) const override {
    apply(phi, x, rows, dim, role);
  }
  void backward_reference(double* dx, const double* dphi, const double* x, int64_t rows, int64_t dim,
                          FeatureRole role) const override {
    apply_backward(dx, dphi, x, rows, dim, role);
  }

 private:
  template <class T>
  static T e(T x) {
    return x > 0 ? x + 1 : std::exp(x);
  }
  template <class T>
  static T de(T x) {
    return x > 0 ? 1 : std::exp(x);
  }
  static double scale(FeatureRole role) { return role == FeatureRole::query ? 2.0 : 1.0; }
  template <class T>
  static void apply(T* phi, const T* x, int64_t rows, int64_t dim, FeatureRole role) {
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t d = 0; d < dim; ++d) {
        phi[r * 2 * dim + d] = e(x[r * dim + d]);
        phi[r * 2 * dim + dim + d] = T(scale(role)) * e(-x[r * dim + d]);
      }
  }
  template <class T>
  static void apply_backward(T* dx, const T* dphi, const T* x, int64_t rows, int64_t dim, FeatureRole role) {
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t d = 0; d < dim; ++d) {
        const T xv = x[r * dim + d];
        dx[r * dim + d] = dphi[r * 2 * dim + d] * de(xv) - T(scale(role)) * dphi[r * 2 * dim + dim + d] * de(-xv);
      }
  }
};

struct MapCase {
  LinearCase c;
  bool causal, key_lengths;
  Layout layout;
};

class CustomMap : public ::testing::TestWithParam<MapCase> {};

TEST_P(CustomMap, MatchesTheOracle) {
  const MapCase& o = GetParam();
  std::mt19937_64 rng(o.c.Nq * 13 + o.c.D);
  auto in = testing::random_inputs(o.c, o.layout, rng);
  std::vector<int64_t> lengths;
  if (o.key_lengths) lengths = testing::spread_key_lengths(o.c, rng);
  LinearAttentionOptions options;
  options.feature_map = std::make_shared<MirrorMap>();
  options.causal = o.causal;
  options.key_lengths = lengths;
  options.chunk_size = 16;
  testing::expect_matches_oracle(in, options, o.layout, rng, kBound, kBound);
}

const MapCase kCases[] = {
    {{3, 63, 97, 1, 59, 16}, false, true, Layout::padded},
    {{1, 97, 97, 3, 16, 59}, true, false, Layout::bnhd},
    {{3, 65, 65, 1, 8, 64}, true, true, Layout::bhnd},
    {{1, 40, 100, 3, 3, 5}, true, false, Layout::padded},  // causal cross-attention with a prefix
};

INSTANTIATE_TEST_SUITE_P(Shapes, CustomMap, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<MapCase>& param) {
                           std::string name = testing::case_name(param.param.c);
                           if (param.param.causal) name.append("_causal");
                           if (param.param.key_lengths) name.append("_lengths");
                           return name.append("_").append(testing::layout_name(param.param.layout));
                         });

// Steps with the custom map reproduce the causal pass, and its state has M = 2D features.
TEST(CustomMap, RecurrentStepsMatchTheCausalPass) {
  std::mt19937_64 rng(77);
  const LinearCase c{2, 30, 30, 3, 7, 9};
  auto in = testing::random_inputs(c, Layout::bnhd, rng);
  LinearAttentionOptions options;
  options.feature_map = std::make_shared<MirrorMap>();
  auto whole = testing::make_tensor({c.B, c.Nq, c.H, c.E}, Layout::bnhd);
  auto steps = testing::make_tensor({c.B, c.Nq, c.H, c.E}, Layout::bnhd);
  RecurrentState final_state;
  causal_linear_attention_forward(whole.view, in.q.view, in.k.view, in.v.view, options, nullptr, &final_state);
  EXPECT_EQ(final_state.feature_dim(), 2 * c.D);
  EXPECT_EQ(final_state.feature_map(), "mirror");
  RecurrentState state(c.B, c.H, 2 * c.D, c.E, "mirror");
  auto token = [](TensorView x, int64_t n) {
    x.data += n * x.stride[1];
    x.extent[1] = 1;
    return x;
  };
  for (int64_t n = 0; n < c.Nq; ++n)
    recurrent_step(token(steps.view, n), token(in.q.view, n), token(in.k.view, n), token(in.v.view, n), state, options);
  EXPECT_LE(testing::relative_error(steps.view, reference::to_double(whole.view)), kBound);
  EXPECT_LE(testing::state_error(state, testing::to_double(final_state)), kBound);
}

}  // namespace
}  // namespace linattn
