#pragma once
// The one random generator of linattn, its model and its tools: std::mt19937_64 (whose stream the
// standard fixes) with uniform, integer and normal draws written out here, so that a seed gives the
// same numbers with every standard library.
#include <cstdint>
#include <random>
#include <utility>

namespace linattn {

// splitmix64 (Steele et al. 2014): turns (seed, counter) pairs into independent seeds.
inline uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Box–Muller: two independent standard normals (r cos θ, r sin θ), r = √(−2 ln u1), θ = 2π u2, from
// u1 ∈ (0, 1] and u2 ∈ [0, 1).
std::pair<double, double> box_muller(double u1, double u2);

// std::mt19937_64, whose stream the standard fixes, with our own uniform, integer and normal draws
// written out here, so that every draw depends only on the seed: std::normal_distribution's (and
// std::uniform_*_distribution's) algorithms differ between standard libraries.
class Random {
 public:
  explicit Random(uint64_t seed) : engine_(seed) {}
  // Uniform in [0, 1) with 53 random bits.
  double uniform() { return double(engine_() >> 11) * 0x1.0p-53; }
  // Uniform in (0, 1): 53 random bits centred in their interval, so that 0 and 1 never occur.
  double uniform_open() { return (double(engine_() >> 11) + 0.5) * 0x1.0p-53; }
  // Uniform integer in [0, n).
  int64_t below(int64_t n) { return int64_t(uniform() * double(n)); }
  // Standard normal: both halves of a Box–Muller pair of open uniforms, the second kept for the next
  // call (the stream of the random-feature draws and of the tools' inputs).
  double normal();
  // Standard normal from two fresh uniforms, the cosine half only: the model's initialisation
  // stream, kept so that an init seed gives the weights it always gave.
  double normal_cosine() {
    const double u1 = 1.0 - uniform();  // drawn before u2: the order is part of the stream
    return box_muller(u1, uniform()).first;
  }
  // chi(k): the norm of a k-dim standard normal vector, drawn as exactly that.
  double chi(int64_t k);

 private:
  std::mt19937_64 engine_;
  double spare_ = 0;
  bool has_spare_ = false;
};

}  // namespace linattn
