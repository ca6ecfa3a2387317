#pragma once
// Random-feature maps: FAVOR+ positive features for the softmax kernel (the Performer paper's;
// "favor" everywhere in linattn, "performer" an alias: include/linattn/performer.hpp and the
// command's --op performer), and random Fourier features for the Gaussian kernel. Both plug into
// LinearAttentionOptions::feature_map.
#include <cstdint>
#include <span>
#include <string>

#include "linattn/feature_map.hpp"

namespace linattn {

struct FavorOptions {
  // m, the number of random features; 0: default_favor_features(D).
  int64_t n_features = 0;
  // Draws are a pure function of (D, m, seed, orthogonal): the same seed gives the same ω in every
  // mode and every process (std::mt19937_64 with our own Box-Muller and chi draws, so the stream
  // does not depend on the standard library's distributions).
  uint64_t seed = 0;
  // Block-orthogonal ω (QR of D×D Gaussian blocks, row norms redrawn from chi(D)); false: i.i.d.
  bool orthogonal = true;
};

// m = max(D, ⌈D·ln D⌉): the Performer paper's uniform-convergence bound (Choromanski et al. 2021)
// needs m = Θ(D log D) features for a uniformly small softmax-kernel error (performer-pytorch defaults
// to ⌊D ln D⌋ too); D features at least, so that an orthogonal draw fills one whole block.
// Examples: D=16 → 45, D=64 → 267, D=128 → 622.
int64_t default_favor_features(int64_t dim);

// FAVOR+ for head dim `dim`: with x̂ = x·D^(−1/4) and aᵢ(x) = ωᵢᵀx̂ − |x̂|²/2,
//   key   feature i: exp(min(aᵢ(k), kFavorKeyCap)) / √m
//   query feature i: exp(aᵢ(q) − c(q)) / √m,  c(q) = a* − kFavorQueryBand,  a* = maxᵢ aᵢ(q).
// Hence φ(q)ᵀφ(k) = e^(−c(q)) · (1/m) Σᵢ exp(aᵢ(q) + aᵢ(k)), the FAVOR+ estimate of exp(qᵀk/√D)
// times a constant per query row, whenever no key exponent exceeds the cap. Every query row's
// largest feature is e^band/√m, so its normaliser φ(q)ᵀz ≥ e^band/√m · z_top does not depend on
// |q|, and eps = 1e-6 matters only where the keys' own features vanish (with the plain scale, at
// D = 64 and |q| ≈ 20, the normaliser fell below eps and rows lost their normalisation). The shift
// cancels in the normalised output; with normalize = false the output is the plain estimate times
// e^(−c(q)). The key side is data-independent (no max over keys),
// so no key ever changes another token's output: the same map is safe in non-causal, causal and
// recurrent modes. docs/performer-linformer.md explains the choice.
// name() names the draw, "favor(d=D,m=m,seed=S,orthogonal)" (or ",iid)"), so that a recurrent state
// summed under one draw is refused by a map with another; kind() is "favor". feature_dim(D) is m;
// using it with another head dim throws linattn::Error.
FeatureMapPtr favor_feature_map(int64_t dim, const FavorOptions& options = {});

inline constexpr double kFavorKeyCap = 30.0;
inline constexpr double kFavorQueryBand = 30.0;  // a query row's largest exponent after its shift

// Random Fourier features for the Gaussian kernel exp(−|x − y|²/(2√D)) (bandwidth σ² = √D, i.e. the
// unit-bandwidth kernel on x̂ = x·D^(−1/4), the scaling softmax attention uses):
// φ(x) = √(2/m) [cos(ω₁ᵀx̂) … cos(ω_{m/2}ᵀx̂), sin(ω₁ᵀx̂) … sin(ω_{m/2}ᵀx̂)], ωᵢ i.i.d. N(0, I).
// n_features = m must be even. Features can be negative, so the normalised linear attention
// normaliser is not guaranteed positive: use it with normalize = false, or as a kernel estimate.
// name() is "random_fourier(d=D,m=m,seed=S)", kind() is "random_fourier"; role-independent.
FeatureMapPtr random_fourier_feature_map(int64_t dim, int64_t n_features, uint64_t seed);

// What the random maps share: their draws, for tests and inspection, and an explicit redraw.
class RandomFeatureMap : public FeatureMap {
 public:
  // D, the head dim the map was drawn for.
  virtual int64_t input_dim() const = 0;
  virtual uint64_t seed() const = 0;
  // The family without its draw: "favor" or "random_fourier" (name() adds D, m, seed, options).
  virtual std::string kind() const = 0;
  // ω: [rows, D] row-major in fp64 (the fp32 path uses its rounding); rows = m for FAVOR+, m/2 for
  // random Fourier features.
  virtual std::span<const double> omega() const = 0;
  // The same kind of map (same D, m and options) with fresh draws from `seed`.
  virtual FeatureMapPtr redraw(uint64_t seed) const = 0;
};

// The map as a RandomFeatureMap; throws linattn::Error naming its name when it is not one.
const RandomFeatureMap& as_random_feature_map(const FeatureMap& map);

}  // namespace linattn
