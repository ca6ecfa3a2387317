#pragma once
// What FAVOR+ and random Fourier features share: the draws ω [R, D] and the product t = ω x̂ with
// x̂ = x·D^(−1/4), in fp32 (SIMD kernels), for the fast paths only: the fp64 oracles
// (favor_reference.cpp, random_fourier_reference.cpp) compute t from ω on their own.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "core/validate.hpp"
#include "kernels/gemm.hpp"
#include "linattn/favor.hpp"

namespace linattn::detail {

class RandomProjectionMap : public RandomFeatureMap {
 public:
  int64_t input_dim() const override { return dim_; }
  uint64_t seed() const override { return seed_; }
  std::span<const double> omega() const override { return omega_; }

 protected:
  // Rows projected per block: the block's t stays in L2.
  static constexpr int64_t kBlockRows = 64;

  RandomProjectionMap(int64_t dim, uint64_t seed, std::vector<double> omega)
      : dim_(dim),
        rows_(int64_t(omega.size()) / dim),
        ldt_(kernels::padded(rows_)),
        seed_(seed),
        omega_(std::move(omega)) {
    const double scale = std::pow(double(dim_), -0.25);
    w_.resize(omega_.size());
    wt_.assign(size_t(dim_ * ldt_), 0.0f);
    for (int64_t i = 0; i < rows_; ++i)
      for (int64_t d = 0; d < dim_; ++d) {
        const auto w = float(omega_[size_t(i * dim_ + d)] * scale);
        w_[size_t(i * dim_ + d)] = w;
        wt_[size_t(d * ldt_ + i)] = w;
      }
  }

  // "kind(d=D,m=m,seed=S<suffix>)": everything the draw is a function of, so that a state file
  // (which stores the name) summed under one draw is refused by another (state-format.md).
  std::string draw_name(int64_t m, const char* suffix) const {
    return kind() + "(d=" + std::to_string(dim_) + ",m=" + std::to_string(m) + ",seed=" + std::to_string(seed_) +
           suffix + ")";
  }

  // The drivers size their buffers with feature_dim(D): the one place to catch a map drawn for
  // another head dim before any kernel runs.
  void check_dim(int64_t dim) const {
    if (dim == dim_) return;
    fail((kind() + "_feature_map").c_str(), "head dim is " + std::to_string(dim) + ", expected " +
                                                std::to_string(dim_) + " (the dim the map's ω was drawn for)");
  }

  // t: [rows, ldt_] = ω x̂ for x: [rows, D] (columns past R hold 0 in fp32).
  void project_block(float* t, const float* x, int64_t rows) const {
    kernels::gemm({t, ldt_, rows, ldt_}, {x, dim_, 1}, {wt_.data(), ldt_, dim_, ldt_});
  }
  // dx: [rows, D] = Σᵢ gᵢ ∂tᵢ/∂x = Σᵢ gᵢ ωᵢ D^(−1/4) for each row of g: [rows, ldt_] (its first R).
  void project_backward(float* dx, const float* g, int64_t rows) const {
    kernels::gemm({dx, dim_, rows, dim_}, {g, ldt_, 1}, {w_.data(), dim_, rows_, dim_});
  }

  int64_t dim_;
  int64_t rows_;  // R: rows of ω
  int64_t ldt_;   // R rounded up to the SIMD pad: t's leading dim
  uint64_t seed_;
  std::vector<double> omega_;  // [R, D]
  std::vector<float> w_;       // [R, D] = ω·D^(−1/4)
  std::vector<float> wt_;      // [D, ldt_], its transpose, zero-padded
};

}  // namespace linattn::detail
