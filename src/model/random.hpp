#pragma once
// The model's draws (initialisation, data, sampling) come from the one generator of
// core/random_draws.hpp; these names are the model's and its command's way to it.
#include <cstdint>

#include "linattn/random.hpp"

namespace linattn::model::detail {

inline uint64_t mix(uint64_t x) { return linattn::splitmix64(x); }

// The generator seeded through splitmix64, so that nearby seeds give unrelated streams.
class Rng : public linattn::Random {
 public:
  explicit Rng(uint64_t seed) : Random(linattn::splitmix64(seed)) {}
};

}  // namespace linattn::model::detail
