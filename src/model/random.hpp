#pragma once
// Portable random draws for initialisation and data: std::mt19937_64 (whose stream the standard
// fixes) with our own uniform and Box-Muller normal, so runs repeat across standard libraries.
#include <cmath>
#include <cstdint>
#include <numbers>
#include <random>

namespace linattn::model::detail {

// splitmix64: turns (seed, counter) pairs into independent seeds.
inline uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

class Rng {
 public:
  explicit Rng(uint64_t seed) : engine_(mix(seed)) {}
  // Uniform in [0, 1) with 53 random bits.
  double uniform() { return double(engine_() >> 11) * 0x1.0p-53; }
  // Uniform integer in [0, n).
  int64_t below(int64_t n) { return int64_t(uniform() * double(n)); }
  double normal() {
    const double u1 = 1.0 - uniform(), u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
  }

 private:
  std::mt19937_64 engine_;
};

}  // namespace linattn::model::detail
