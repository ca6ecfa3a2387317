// The FAVOR+ feature map on its own: its draws, its statistics as a softmax-kernel estimator, its
// stabiliser, its fp32 path against the fp64 oracle and the oracle's gradient against finite
// differences, and its errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <span>
#include <utility>
#include <vector>

#include "linattn/error.hpp"
#include "linattn/favor.hpp"
#include "support/finite_difference.hpp"
#include "support/temp_dir.hpp"
#include "support/tensors.hpp"

namespace linattn {
namespace {

constexpr FeatureRole kRoles[] = {FeatureRole::query, FeatureRole::key};

using testing::random_vector;

double dot(const double* a, const double* b, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

// The map's product φ(q)ᵀφ(k), in fp64.
double product(const FeatureMap& map, const std::vector<double>& q, const std::vector<double>& k) {
  const auto dim = int64_t(q.size());
  const int64_t m = map.feature_dim(dim);
  std::vector<double> pq(static_cast<size_t>(m)), pk(static_cast<size_t>(m));
  map.forward_reference(pq.data(), q.data(), 1, dim, FeatureRole::query);
  map.forward_reference(pk.data(), k.data(), 1, dim, FeatureRole::key);
  return dot(pq.data(), pk.data(), m);
}

// a* = maxᵢ aᵢ(q) = maxᵢ ωᵢᵀq̂ − |q̂|²/2, computed here from ω.
double top_exponent(const FeatureMap& map, const std::vector<double>& q) {
  const auto dim = int64_t(q.size());
  const auto omega = as_random_feature_map(map).omega();
  const double s = std::pow(double(dim), -0.25);
  double q2 = 0, top = -std::numeric_limits<double>::infinity();
  for (int64_t d = 0; d < dim; ++d) q2 += q[d] * s * q[d] * s;
  for (int64_t i = 0; i < map.feature_dim(dim); ++i) {
    double wq = 0;
    for (int64_t d = 0; d < dim; ++d) wq += omega[i * dim + d] * q[d] * s;
    top = std::max(top, wq - q2 / 2);
  }
  return top;
}

// The plain FAVOR+ estimate of exp(qᵀk/√D): the product with the query row's documented constant
// e^(band − a*) taken out (the stabiliser test checks that constant).
double estimate(const FeatureMap& map, const std::vector<double>& q, const std::vector<double>& k) {
  return product(map, q, k) * std::exp(top_exponent(map, q) - kFavorQueryBand);
}

// The row of ω: [m, dim] with the largest norm: x̂ on it reaches the largest exponent, |ω|²/2.
int64_t longest_row(std::span<const double> omega, int64_t m, int64_t dim) {
  int64_t longest = 0;
  for (int64_t i = 1; i < m; ++i)
    if (dot(&omega[i * dim], &omega[i * dim], dim) > dot(&omega[longest * dim], &omega[longest * dim], dim))
      longest = i;
  return longest;
}

double softmax_kernel(const std::vector<double>& q, const std::vector<double>& k) {
  return std::exp(dot(q.data(), k.data(), int64_t(q.size())) / std::sqrt(double(q.size())));
}

TEST(FavorMap, DefaultFeatureCountIsDLogD) {
  EXPECT_EQ(default_favor_features(1), 1);
  EXPECT_EQ(default_favor_features(2), 2);
  EXPECT_EQ(default_favor_features(16), 45);
  EXPECT_EQ(default_favor_features(64), 267);
  EXPECT_EQ(default_favor_features(128), 622);
  EXPECT_EQ(favor_feature_map(64)->feature_dim(64), 267);
  EXPECT_EQ(favor_feature_map(64)->name(), "favor(d=64,m=267,seed=0,orthogonal)");
  EXPECT_EQ(favor_feature_map(16, {.n_features = 7})->feature_dim(16), 7);
}

TEST(FavorMap, OmegaIsOrthogonalWithinEachBlockWithChiNorms) {
  for (int64_t dim : {1, 5, 16, 59}) {
    const int64_t m = 2 * dim + dim / 2 + 1;  // two whole blocks and a partial one
    const auto map = favor_feature_map(dim, {.n_features = m, .seed = 7});
    const auto omega = as_random_feature_map(*map).omega();
    ASSERT_EQ(int64_t(omega.size()), m * dim);
    std::vector<double> norms;
    for (int64_t i = 0; i < m; ++i) {
      const double* a = omega.data() + i * dim;
      norms.push_back(std::sqrt(dot(a, a, dim)));
      for (int64_t j = i + 1; j < m && j / dim == i / dim; ++j) {
        const double* b = omega.data() + j * dim;
        EXPECT_LT(std::abs(dot(a, b, dim)), 1e-12 * norms.back() * std::sqrt(dot(b, b, dim)) + 1e-300)
            << "dim " << dim << " rows " << i << ", " << j;
      }
    }
    // Norms are redrawn from chi(dim), not left at 1 (mean ≈ √dim, and they differ).
    double mean = 0;
    for (double n : norms) mean += n / double(m);
    if (dim > 1) {
      EXPECT_NEAR(mean, std::sqrt(double(dim)), 0.35 * std::sqrt(double(dim))) << dim;
    }
    EXPECT_NE(norms[0], norms[1]);
  }
  // The i.i.d. option gives rows that are not orthogonal.
  const auto iid = favor_feature_map(16, {.n_features = 16, .seed = 7, .orthogonal = false});
  const auto omega = as_random_feature_map(*iid).omega();
  EXPECT_GT(std::abs(dot(omega.data(), omega.data() + 16, 16)), 1e-3);
}

TEST(FavorMap, DrawsAreAFunctionOfTheSeedAndRedrawChangesThem) {
  for (bool orthogonal : {true, false}) {
    const FavorOptions options{.n_features = 40, .seed = 11, .orthogonal = orthogonal};
    const auto a = favor_feature_map(16, options), b = favor_feature_map(16, options);
    const auto& ra = as_random_feature_map(*a);
    const auto oa = ra.omega(), ob = as_random_feature_map(*b).omega();
    EXPECT_TRUE(std::equal(oa.begin(), oa.end(), ob.begin()));
    EXPECT_EQ(ra.seed(), 11u);
    EXPECT_EQ(ra.input_dim(), 16);

    const auto c = ra.redraw(12);
    const auto oc = as_random_feature_map(*c).omega();
    ASSERT_EQ(oc.size(), oa.size());
    EXPECT_EQ(c->feature_dim(16), 40);
    EXPECT_EQ(as_random_feature_map(*c).seed(), 12u);
    int64_t same = 0;
    for (size_t i = 0; i < oa.size(); ++i) same += oa[i] == oc[i];
    EXPECT_EQ(same, 0);
    const auto again = ra.redraw(11);
    const auto back = as_random_feature_map(*again).omega();
    EXPECT_TRUE(std::equal(oa.begin(), oa.end(), back.begin()));

    // The fp32 features are bitwise reproducible too.
    std::mt19937_64 rng(3);
    std::vector<float> x(16 * 5);
    for (float& v : x) v = std::uniform_real_distribution<float>(-1, 1)(rng);
    std::vector<float> fa(40 * 5), fb(40 * 5);
    a->forward(fa.data(), x.data(), 5, 16, FeatureRole::query);
    b->forward(fb.data(), x.data(), 5, 16, FeatureRole::query);
    EXPECT_EQ(fa, fb);
  }
}

// Mean of φ(q)ᵀφ(k) over many seeds against exp(qᵀk/√D), within 4 standard errors (the bound comes
// from the sample variance of the same draws; a wrong scale of x̂ would miss by several times it).
TEST(FavorMap, EstimatorIsUnbiased) {
  std::mt19937_64 rng(5);
  const int64_t dim = 16, seeds = 3000;
  for (bool orthogonal : {true, false}) {
    for (int pair = 0; pair < 3; ++pair) {
      const auto q = random_vector(dim, rng, -0.8, 0.8), k = random_vector(dim, rng, -0.8, 0.8);
      const double want = softmax_kernel(q, k);
      double sum = 0, sum_sq = 0;
      for (int64_t s = 0; s < seeds; ++s) {
        const auto map = favor_feature_map(dim, {.n_features = 16, .seed = uint64_t(s), .orthogonal = orthogonal});
        const double e = estimate(*map, q, k);
        sum += e;
        sum_sq += e * e;
      }
      const double mean = sum / double(seeds);
      const double sd = std::sqrt((sum_sq - double(seeds) * mean * mean) / double(seeds - 1));
      const double bound = 4 * sd / std::sqrt(double(seeds));
      EXPECT_LT(std::abs(mean - want), bound) << "orthogonal " << orthogonal << " pair " << pair << ": mean " << mean
                                              << ", exp(qk/√D) " << want << ", 4 s.e. " << bound;
      // The bound is informative: far tighter than the value itself.
      EXPECT_LT(bound, 0.05 * want);
    }
  }
}

// Mean squared relative error of the kernel estimate over pairs and seeds.
double kernel_mse(int64_t dim, int64_t m, bool orthogonal, int64_t seeds, uint64_t first_seed = 1000,
                  double range = 1) {
  std::mt19937_64 rng(9);
  std::vector<std::vector<double>> qs, ks;
  for (int p = 0; p < 8; ++p) {
    qs.push_back(random_vector(dim, rng, -range, range));
    ks.push_back(random_vector(dim, rng, -range, range));
  }
  double mse = 0;
  for (int64_t s = 0; s < seeds; ++s) {
    const auto map =
        favor_feature_map(dim, {.n_features = m, .seed = first_seed + uint64_t(s), .orthogonal = orthogonal});
    for (size_t p = 0; p < qs.size(); ++p) {
      const double want = softmax_kernel(qs[p], ks[p]);
      const double err = (estimate(*map, qs[p], ks[p]) - want) / want;
      mse += err * err / double(seeds * int64_t(qs.size()));
    }
  }
  return mse;
}

TEST(FavorMap, ErrorShrinksAsFeaturesGrow) {
  // The variance falls as 1/m: each fourfold m should cut the MSE well below half.
  const double e16 = kernel_mse(16, 16, true, 200), e64 = kernel_mse(16, 64, true, 200),
               e256 = kernel_mse(16, 256, true, 200);
  EXPECT_LT(e64, 0.5 * e16) << e16 << " " << e64;
  EXPECT_LT(e256, 0.5 * e64) << e64 << " " << e256;
}

// Orthogonal draws lower the variance (measured ratio ≈ 0.83 at D = 16 for every m tried and several
// seed ranges); 1500 seeds keep the MSE estimates within a few percent, well inside the 0.92 margin.
TEST(FavorMap, OrthogonalFeaturesBeatIidOnAverage) {
  for (int64_t m : {16, 48}) {
    const double orthogonal = kernel_mse(16, m, true, 1500, 1000, 0.5), iid = kernel_mse(16, m, false, 1500, 1000, 0.5);
    EXPECT_LT(orthogonal, 0.92 * iid) << "m " << m << ": orthogonal " << orthogonal << ", iid " << iid;
  }
}

// The stabiliser: φ(q)ᵀφ(k) is the plain FAVOR+ estimate (1/m) Σᵢ exp(aᵢ(q) + aᵢ(k)), computed here
// from ω, times the query row's constant e^(band − a*), a* its largest exponent: the same for every key.
TEST(FavorMap, StabilisedProductIsPlainEstimateTimesAQueryRowConstant) {
  const int64_t dim = 16, m = 40;
  const auto map = favor_feature_map(dim, {.n_features = m, .seed = 2});
  const auto omega = as_random_feature_map(*map).omega();
  const auto plain = [&](const std::vector<double>& q, const std::vector<double>& k) {
    const double s = std::pow(double(dim), -0.25);
    double sum = 0, q2 = 0, k2 = 0;
    for (int64_t d = 0; d < dim; ++d) q2 += q[d] * s * q[d] * s, k2 += k[d] * s * k[d] * s;
    for (int64_t i = 0; i < m; ++i) {
      double wq = 0, wk = 0;
      for (int64_t d = 0; d < dim; ++d) wq += omega[i * dim + d] * q[d] * s, wk += omega[i * dim + d] * k[d] * s;
      sum += std::exp(wq - q2 / 2 + wk - k2 / 2);
    }
    return sum / double(m);
  };
  std::mt19937_64 rng(4);
  for (double scale : {1.0, 12.0}) {  // 12: exponents beyond the band
    const auto q = random_vector(dim, rng, -scale, scale);
    const double constant = std::exp(kFavorQueryBand - top_exponent(*map, q));
    for (int j = 0; j < 4; ++j) {
      const auto k = random_vector(dim, rng);
      EXPECT_NEAR(product(*map, q, k) / plain(q, k) / constant, 1.0, 1e-12) << scale;
    }
  }
}

// Inputs where the plain exponentials overflow fp32: keys on an ω direction (aᵢ = |ωᵢ|²/2, ~90 at
// D = 128) and large queries. Features stay finite, keys at most e^cap/√m, queries at most e^band/√m.
TEST(FavorMap, NoOverflowOnAdversarialInputs) {
  const int64_t dim = 128;
  const auto map = favor_feature_map(dim);
  const int64_t m = map->feature_dim(dim);
  const auto omega = as_random_feature_map(*map).omega();
  const int64_t longest = longest_row(omega, m, dim);
  std::vector<float> x(2 * dim);
  for (int64_t d = 0; d < dim; ++d) {
    x[d] = float(omega[longest * dim + d] * std::pow(double(dim), 0.25));  // x̂ = ω_longest
    x[dim + d] = 95.0f;
  }
  // Plain exp(aᵢ) would be > e^85 ≈ 8e36: any sum of a few such keys overflows fp32.
  ASSERT_GT(dot(&omega[longest * dim], &omega[longest * dim], dim) / 2, 85.0);
  std::vector<float> phi(2 * m);
  for (FeatureRole role : kRoles) {
    map->forward(phi.data(), x.data(), 2, dim, role);
    float largest = 0;
    for (float f : phi) {
      ASSERT_TRUE(std::isfinite(f));
      largest = std::max(largest, f);
    }
    const double bound = std::exp(role == FeatureRole::key ? kFavorKeyCap : kFavorQueryBand) / std::sqrt(double(m));
    EXPECT_LE(largest, 1.0001 * bound);
    EXPECT_GE(largest, 0.999 * bound);  // the first row reaches the bound
  }
}

// A NaN input row gives NaN features and gradients in that row only (never a silent 0).
TEST(FavorMap, NanPropagatesWithinItsRow) {
  const int64_t dim = 16;
  const auto map = favor_feature_map(dim, {.seed = 1});
  const int64_t m = map->feature_dim(dim);
  std::vector<float> x(2 * dim, 0.25f), phi(2 * m), dphi(2 * m, 1.0f), dx(2 * dim);
  for (int64_t d = 0; d < dim; ++d) x[d] = std::nanf("");
  for (FeatureRole role : kRoles) {
    map->forward(phi.data(), x.data(), 2, dim, role);
    map->backward(dx.data(), dphi.data(), x.data(), 2, dim, role);
    for (int64_t i = 0; i < m; ++i) {
      EXPECT_TRUE(std::isnan(phi[i])) << i;
      EXPECT_TRUE(std::isfinite(phi[m + i])) << i;
    }
    for (int64_t d = 0; d < dim; ++d) {
      EXPECT_TRUE(std::isnan(dx[d]));
      EXPECT_TRUE(std::isfinite(dx[dim + d]));
    }
  }
}

// fp32 path against the fp64 oracle, over awkward dims, for both roles, forward and backward.
TEST(FavorMap, Fp32MatchesOracle) {
  std::mt19937_64 rng(8);
  for (int64_t dim : {1, 16, 59, 64, 128}) {
    for (bool orthogonal : {true, false}) {
      const auto map = favor_feature_map(dim, {.seed = uint64_t(dim), .orthogonal = orthogonal});
      const int64_t m = map->feature_dim(dim), rows = dim == 16 ? 70 : 7;  // 70: past one block of 64
      const auto x64 = random_vector(rows * dim, rng, -1.5, 1.5);
      const auto dphi64 = random_vector(rows * m, rng);
      const std::vector<float> x(x64.begin(), x64.end()), dphi(dphi64.begin(), dphi64.end());
      std::vector<double> xd(x.begin(), x.end()), dphid(dphi.begin(), dphi.end());
      for (FeatureRole role : kRoles) {
        std::vector<float> phi(static_cast<size_t>(rows * m)), dx(static_cast<size_t>(rows * dim));
        std::vector<double> phi_ref(phi.size()), dx_ref(dx.size());
        map->forward(phi.data(), x.data(), rows, dim, role);
        map->forward_reference(phi_ref.data(), xd.data(), rows, dim, role);
        map->backward(dx.data(), dphi.data(), x.data(), rows, dim, role);
        map->backward_reference(dx_ref.data(), dphid.data(), xd.data(), rows, dim, role);
        double fe = 0, fm = 0, be = 0, bm = 0;
        for (size_t i = 0; i < phi.size(); ++i)
          fe = std::max(fe, std::abs(phi[i] - phi_ref[i])), fm = std::max(fm, std::abs(phi_ref[i]));
        for (size_t i = 0; i < dx.size(); ++i)
          be = std::max(be, std::abs(dx[i] - dx_ref[i])), bm = std::max(bm, std::abs(dx_ref[i]));
        EXPECT_LT(fe / fm, 5e-6) << "dim " << dim << " role " << int(role);
        // With m = 1 (D = 1) a query's one feature is the constant e^band: its gradient is exactly 0.
        EXPECT_LE(be, 2e-5 * bm) << "dim " << dim << " role " << int(role);
      }
    }
  }
}

// A key whose exponent passes the cap and a query whose shift is active (the same row x̂ = 0.6 ω_longest,
// a = 0.42|ω|² > 30): the oracle's gradient against central differences, and the fp32 backward against
// the oracle. The top feature is flat in x either way (its exponent is pinned at 30), so the
// differences leave its e³⁰ out of the loss (it would swamp their rounding) while the analytic
// gradient gets dφ_top ≠ 0: a missing cap or shift term shows up as e³⁰-sized error.
TEST(FavorMap, CappedKeyAndShiftedQueryGradients) {
  const int64_t dim = 64;
  const auto map = favor_feature_map(dim, {.seed = 3});
  const int64_t m = map->feature_dim(dim);
  const auto omega = as_random_feature_map(*map).omega();
  const int64_t longest = longest_row(omega, m, dim);
  ASSERT_GT(0.42 * dot(&omega[longest * dim], &omega[longest * dim], dim), kFavorKeyCap + 1);
  std::mt19937_64 rng(13);
  std::vector<double> x(static_cast<size_t>(dim));
  for (int64_t d = 0; d < dim; ++d) x[d] = 0.6 * omega[longest * dim + d] * std::pow(double(dim), 0.25);
  const auto dphi = random_vector(m, rng);
  for (FeatureRole role : kRoles) {
    std::vector<double> dx(x.size()), phi(static_cast<size_t>(m));
    map->backward_reference(dx.data(), dphi.data(), x.data(), 1, dim, role);
    const auto loss = [&] {
      map->forward_reference(phi.data(), x.data(), 1, dim, role);
      double sum = 0;
      for (int64_t i = 0; i < m; ++i) sum += i == longest ? 0.0 : phi[size_t(i)] * dphi[size_t(i)];
      return sum;
    };
    const auto [err, mag] = testing::finite_difference_error(x, dx, loss, 1e-6, true);
    EXPECT_GT(mag, 0.0);
    EXPECT_LT(err, 1e-6 * mag) << "role " << int(role);

    const std::vector<float> x32(x.begin(), x.end()), dphi32(dphi.begin(), dphi.end());
    const std::vector<double> x64(x32.begin(), x32.end()), dphi64(dphi32.begin(), dphi32.end());
    std::vector<float> dx32(x.size());
    map->backward(dx32.data(), dphi32.data(), x32.data(), 1, dim, role);
    map->backward_reference(dx.data(), dphi64.data(), x64.data(), 1, dim, role);
    double e32 = 0;
    for (size_t i = 0; i < dx.size(); ++i) e32 = std::max(e32, std::abs(dx32[i] - dx[i]));
    EXPECT_LT(e32, 1e-4 * mag) << "role " << int(role);
  }
}

// Rows are grouped in blocks of 64 and in fours inside the kernels; how a call groups them must not
// change any bit (drivers call with chunk-sized row counts that may depend on the partition).
TEST(FavorMap, Fp32ResultsDoNotDependOnRowGrouping) {
  std::mt19937_64 rng(12);
  const int64_t dim = 59, rows = 70;
  const auto map = favor_feature_map(dim, {.seed = 4});
  const int64_t m = map->feature_dim(dim);
  const auto x64 = random_vector(rows * dim, rng), dphi64 = random_vector(rows * m, rng);
  const std::vector<float> x(x64.begin(), x64.end()), dphi(dphi64.begin(), dphi64.end());
  for (FeatureRole role : kRoles) {
    std::vector<float> phi(size_t(rows * m)), one(phi.size()), dx(size_t(rows * dim)), dx_one(dx.size());
    map->forward(phi.data(), x.data(), rows, dim, role);
    map->backward(dx.data(), dphi.data(), x.data(), rows, dim, role);
    for (int64_t r = 0; r < rows; ++r) {
      map->forward(one.data() + r * m, x.data() + r * dim, 1, dim, role);
      map->backward(dx_one.data() + r * dim, dphi.data() + r * m, x.data() + r * dim, 1, dim, role);
    }
    EXPECT_EQ(phi, one);
    EXPECT_EQ(dx, dx_one);
  }
}

// The oracle's backward against central differences of the oracle's forward, including rows where
// the query shift is active and keys whose exponents are capped.
TEST(FavorMap, OracleBackwardMatchesFiniteDifferences) {
  std::mt19937_64 rng(10);
  for (int64_t dim : {1, 6, 16}) {
    const auto map = favor_feature_map(dim, {.n_features = 2 * dim + 3, .seed = 3});
    const int64_t m = map->feature_dim(dim);
    for (double scale : {1.0, 15.0}) {
      for (FeatureRole role : kRoles) {
        auto x = random_vector(3 * dim, rng, -scale, scale);
        const auto dphi = random_vector(3 * m, rng);
        std::vector<double> dx(x.size()), phi(size_t(3 * m));
        map->backward_reference(dx.data(), dphi.data(), x.data(), 3, dim, role);
        const auto loss = [&] {
          map->forward_reference(phi.data(), x.data(), 3, dim, role);
          return dot(phi.data(), dphi.data(), 3 * m);
        };
        const auto [err, mag] = testing::finite_difference_error(x, dx, loss, 1e-6, true);
        EXPECT_LT(err, 1e-6 * std::max(mag, 1e-300) + 1e-300) << "dim " << dim << " scale " << scale;
      }
    }
  }
}

using testing::error_of;

TEST(FavorMap, BadArgumentsThrowNamingThem) {
  EXPECT_NE(error_of([] { favor_feature_map(0); }).find("dim is 0, expected ≥ 1"), std::string::npos);
  EXPECT_NE(error_of([] { favor_feature_map(4, {.n_features = -3}); }).find("n_features is -3"), std::string::npos);
  EXPECT_NE(error_of([] { default_favor_features(-1); }).find("dim is -1"), std::string::npos);
  EXPECT_NE(
      error_of([] { favor_feature_map(int64_t(1) << 40, {.n_features = int64_t(1) << 40}); }).find("overflows int64"),
      std::string::npos);
  const auto map = favor_feature_map(16);
  const std::string m = error_of([&] { map->feature_dim(32); });
  EXPECT_NE(m.find("head dim is 32, expected 16"), std::string::npos) << m;
  EXPECT_NE(error_of([] { as_random_feature_map(*elu_feature_map()); }).find("map is \"elu\""), std::string::npos);
}

}  // namespace
}  // namespace linattn
