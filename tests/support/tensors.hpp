#pragma once
// Test tensors in every layout the operators must accept, and error measures against the oracle.
#include <array>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "linattn/reference.hpp"
#include "linattn/view.hpp"

namespace linattn::testing {

enum class Layout {
  bnhd,    // [B, N, H, D] contiguous (the default)
  bhnd,    // [B, H, N, D] contiguous, viewed as [B, N, H, D]
  padded,  // [B, N, H, D] with gaps after each row, each head and each token (strides ≠ extents)
};
const char* layout_name(Layout layout);
inline constexpr Layout kAllLayouts[] = {Layout::bnhd, Layout::bhnd, Layout::padded};

// An fp32 tensor that owns its storage; `view` indexes it as [B, N, H, D]. Gaps hold NaN so that a
// kernel that reads them shows it.
struct Tensor32 {
  std::vector<float> storage;
  TensorView view;
  std::array<int64_t, 4> extent() const { return view.extent; }
};

Tensor32 make_tensor(std::array<int64_t, 4> extent, Layout layout);
// Uniform in [lo, hi).
Tensor32 random_tensor(std::array<int64_t, 4> extent, Layout layout, std::mt19937_64& rng, float lo = -1.0f,
                       float hi = 1.0f);
// n fp64 values uniform in [lo, hi): the inputs of the model layers' and feature maps' gradient checks.
inline std::vector<double> random_vector(int64_t n, std::mt19937_64& rng, double lo = -1, double hi = 1) {
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<double> x(static_cast<size_t>(n));
  for (double& v : x) v = u(rng);
  return x;
}
// Fills the addressed elements of an existing tensor (gaps keep their NaN).
void fill_uniform(TensorView view, std::mt19937_64& rng, float lo, float hi);

// max |got − want| / max |want| (or the absolute error when want is all zero): the error scaled by
// the tensor's magnitude, the measure used throughout the suite.
double relative_error(ConstTensorView got, const reference::Tensor& want);
// The same for contiguous buffers.
double relative_error(const std::vector<float>& got, const std::vector<double>& want);
// max |got − want| / max |want| for fp64 tensors (oracle against finite differences).
double relative_error(const reference::Tensor& got, const reference::Tensor& want);

// True when every addressed element is finite.
bool all_finite(ConstTensorView view);

}  // namespace linattn::testing
