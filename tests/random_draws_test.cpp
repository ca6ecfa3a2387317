// The one random generator (core/random_draws.hpp) keeps the streams that seeds have always given:
// the model's initialisation, data and sampling draws, and the random-feature draws ω. The values were
// printed from the two generators it replaces (model/random.hpp and NormalStream at 3421a4e).
#include "core/random_draws.hpp"

#include <gtest/gtest.h>

#include <cmath>

#include "linattn/random.hpp"

namespace linattn {
namespace {

TEST(RandomDraws, ModelStreamIsUnchanged) {
  Random rng(splitmix64(5));  // the model's seeding
  EXPECT_EQ(rng.normal_cosine(), -0x1.bec3a456782adp+0);
  EXPECT_EQ(rng.normal_cosine(), -0x1.a286fec48b308p-2);
  EXPECT_EQ(rng.normal_cosine(), 0x1.d4fca0deec2e8p-3);
  EXPECT_EQ(rng.below(1000), 894);
  EXPECT_EQ(rng.uniform(), 0x1.2e0c3c2112e4p-1);
  EXPECT_EQ(splitmix64(42), 13679457532755275413ull);
}

TEST(RandomDraws, FeatureDrawStreamIsUnchanged) {
  Random normal(7);
  EXPECT_EQ(normal.normal(), 0x1.6d123f133d2b8p-1);
  EXPECT_EQ(normal.normal(), -0x1.e192f7952dd38p-3);
  EXPECT_EQ(normal.normal(), 0x1.9c4d6b299942bp+0);
  EXPECT_EQ(normal.chi(5), 0x1.38c63955c77edp+1);
  const std::vector<double> omega = detail::orthogonal_omega(3, 2, 9);
  EXPECT_EQ(omega[0], -0x1.b3131fd5d31cap+0);
  EXPECT_EQ(omega[5], 0x1.98a50dbd22e74p-3);
}

TEST(RandomDraws, BoxMullerPairIsOnUnitCircleTimesRadius) {
  const auto [c, s] = box_muller(0.25, 0.125);
  const double r = std::sqrt(-2.0 * std::log(0.25));
  EXPECT_NEAR(c * c + s * s, r * r, 1e-12);
  EXPECT_NEAR(std::atan2(s, c), 2.0 * 3.141592653589793 * 0.125, 1e-12);
}

}  // namespace
}  // namespace linattn
