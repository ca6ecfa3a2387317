// Random Fourier features: an unbiased, converging estimate of the Gaussian kernel
// exp(−|x − y|²/(2√D)); fp32 against the fp64 oracle; the oracle's gradient against finite
// differences; reproducible draws; errors.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "linattn/error.hpp"
#include "linattn/favor.hpp"
#include "support/finite_difference.hpp"
#include "support/temp_dir.hpp"
#include "support/tensors.hpp"

namespace linattn {
namespace {

using testing::random_vector;

double gaussian_kernel(const std::vector<double>& x, const std::vector<double>& y) {
  double d2 = 0;
  for (size_t i = 0; i < x.size(); ++i) d2 += (x[i] - y[i]) * (x[i] - y[i]);
  return std::exp(-d2 / (2 * std::sqrt(double(x.size()))));
}

double estimate(const FeatureMap& map, const std::vector<double>& x, const std::vector<double>& y) {
  const auto dim = int64_t(x.size());
  const int64_t m = map.feature_dim(dim);
  std::vector<double> px(static_cast<size_t>(m)), py(static_cast<size_t>(m));
  map.forward_reference(px.data(), x.data(), 1, dim, FeatureRole::query);
  map.forward_reference(py.data(), y.data(), 1, dim, FeatureRole::key);
  double s = 0;
  for (int64_t i = 0; i < m; ++i) s += px[i] * py[i];
  return s;
}

TEST(RandomFourier, EstimatorIsUnbiasedForTheGaussianKernel) {
  std::mt19937_64 rng(1);
  const int64_t dim = 8, seeds = 3000;
  for (int pair = 0; pair < 3; ++pair) {
    const auto x = random_vector(dim, rng), y = random_vector(dim, rng);
    const double want = gaussian_kernel(x, y);
    double sum = 0, sum_sq = 0;
    for (int64_t s = 0; s < seeds; ++s) {
      const double e = estimate(*random_fourier_feature_map(dim, 8, uint64_t(s)), x, y);
      sum += e;
      sum_sq += e * e;
    }
    const double mean = sum / double(seeds);
    const double bound = 4 * std::sqrt((sum_sq / double(seeds) - mean * mean) / double(seeds - 1));
    EXPECT_LT(std::abs(mean - want), bound) << "mean " << mean << ", kernel " << want << ", 4 s.e. " << bound;
    EXPECT_LT(bound, 0.03);  // additive error: a wrong bandwidth (σ² = D, say) moves the kernel by > 0.1
  }
}

TEST(RandomFourier, ErrorShrinksAsFeaturesGrow) {
  std::mt19937_64 rng(2);
  const int64_t dim = 16;
  double previous = 1e300;
  for (int64_t m : {16, 256, 4096}) {
    double mse = 0;
    for (int s = 0; s < 20; ++s) {
      const auto map = random_fourier_feature_map(dim, m, uint64_t(100 + s));
      for (int p = 0; p < 5; ++p) {
        const auto x = random_vector(dim, rng), y = random_vector(dim, rng);
        const double err = estimate(*map, x, y) - gaussian_kernel(x, y);
        mse += err * err / 100;
      }
    }
    // Variance ∝ 1/m: 16× more features, well under half the error.
    EXPECT_LT(mse, 0.25 * previous) << "m " << m;
    previous = mse;
  }
  EXPECT_LT(std::sqrt(previous), 0.03);  // m = 4096: the kernel to about ±0.02
}

TEST(RandomFourier, Fp32MatchesOracleAndOracleMatchesFiniteDifferences) {
  std::mt19937_64 rng(3);
  for (int64_t dim : {1, 16, 59, 128}) {
    const auto map = random_fourier_feature_map(dim, 2 * dim + 6, uint64_t(dim));
    const int64_t m = map->feature_dim(dim), rows = 5;
    ASSERT_EQ(m, 2 * dim + 6);
    auto xd = random_vector(rows * dim, rng, -2, 2);
    const auto dphid = random_vector(rows * m, rng);
    const std::vector<float> x(xd.begin(), xd.end()), dphi(dphid.begin(), dphid.end());
    xd.assign(x.begin(), x.end());
    const std::vector<double> dphi64(dphi.begin(), dphi.end());
    std::vector<float> phi(static_cast<size_t>(rows * m)), dx(static_cast<size_t>(rows * dim));
    std::vector<double> phi_ref(phi.size()), dx_ref(dx.size());
    map->forward(phi.data(), x.data(), rows, dim, FeatureRole::key);
    map->forward_reference(phi_ref.data(), xd.data(), rows, dim, FeatureRole::key);
    map->backward(dx.data(), dphi.data(), x.data(), rows, dim, FeatureRole::query);
    map->backward_reference(dx_ref.data(), dphi64.data(), xd.data(), rows, dim, FeatureRole::query);
    double fe = 0, be = 0, bm = 0;
    for (size_t i = 0; i < phi.size(); ++i) fe = std::max(fe, std::abs(phi[i] - phi_ref[i]));
    for (size_t i = 0; i < dx.size(); ++i) {
      be = std::max(be, std::abs(dx[i] - dx_ref[i]));
      bm = std::max(bm, std::abs(dx_ref[i]));
    }
    EXPECT_LT(fe, 1e-5 * std::sqrt(2.0 / double(m)) * 10) << dim;
    EXPECT_LT(be, 1e-5 * bm) << dim;

    // Central differences of Σ dphi ∘ φ(x) in fp64.
    const auto loss = [&] {
      map->forward_reference(phi_ref.data(), xd.data(), rows, dim, FeatureRole::key);
      double s = 0;
      for (size_t j = 0; j < phi_ref.size(); ++j) s += phi_ref[j] * dphi64[j];
      return s;
    };
    const double err = testing::finite_difference_error(xd, dx_ref, loss).first;
    EXPECT_LT(err, 1e-7 * std::max(bm, 1.0)) << dim;
  }
}

TEST(RandomFourier, DrawsFollowTheSeed) {
  const auto a = random_fourier_feature_map(16, 64, 5), b = random_fourier_feature_map(16, 64, 5);
  const auto& ra = as_random_feature_map(*a);
  EXPECT_EQ(a->name(), "random_fourier(d=16,m=64,seed=5)");
  ASSERT_EQ(ra.omega().size(), 32u * 16u);  // m/2 frequencies
  const auto ob = as_random_feature_map(*b).omega();
  EXPECT_TRUE(std::equal(ra.omega().begin(), ra.omega().end(), ob.begin()));
  const auto c = ra.redraw(6);
  EXPECT_EQ(c->name(), "random_fourier(d=16,m=64,seed=6)");
  EXPECT_EQ(c->feature_dim(16), 64);
  const auto oc = as_random_feature_map(*c).omega();
  EXPECT_FALSE(std::equal(ra.omega().begin(), ra.omega().end(), oc.begin()));
  // i.i.d. N(0, 1) entries: sample mean ≈ 0 and variance ≈ 1 over 512 entries.
  double mean = 0, var = 0;
  for (double w : ra.omega()) mean += w / 512;
  for (double w : ra.omega()) var += (w - mean) * (w - mean) / 511;
  EXPECT_NEAR(mean, 0.0, 0.2);
  EXPECT_NEAR(var, 1.0, 0.2);
}

using testing::error_of;

TEST(RandomFourier, BadArgumentsThrowNamingThem) {
  EXPECT_NE(error_of([] { random_fourier_feature_map(4, 7, 0); }).find("n_features is 7, expected an even number"),
            std::string::npos);
  EXPECT_NE(error_of([] { random_fourier_feature_map(4, 0, 0); }).find("n_features is 0"), std::string::npos);
  EXPECT_NE(error_of([] { random_fourier_feature_map(0, 8, 0); }).find("dim is 0, expected ≥ 1"), std::string::npos);
  EXPECT_NE(error_of([] { random_fourier_feature_map(int64_t(1) << 40, int64_t(1) << 40, 0); }).find("overflows int64"),
            std::string::npos);
  const auto map = random_fourier_feature_map(4, 8, 0);
  EXPECT_NE(error_of([&] { map->feature_dim(5); }).find("head dim is 5, expected 4"), std::string::npos);
}

}  // namespace
}  // namespace linattn
