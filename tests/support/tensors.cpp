#include "support/tensors.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace linattn::testing {

const char* layout_name(Layout layout) {
  switch (layout) {
    case Layout::bnhd:
      return "bnhd";
    case Layout::bhnd:
      return "bhnd";
    case Layout::padded:
      return "padded";
  }
  return "?";
}

Tensor32 make_tensor(std::array<int64_t, 4> e, Layout layout) {
  Tensor32 t;
  const auto [B, N, H, D] = e;
  switch (layout) {
    case Layout::bnhd:
      t.storage.assign(B * N * H * D, std::numeric_limits<float>::quiet_NaN());
      t.view = bnhd(t.storage.data(), B, N, H, D);
      break;
    case Layout::bhnd:
      t.storage.assign(B * N * H * D, std::numeric_limits<float>::quiet_NaN());
      t.view = bhnd(t.storage.data(), B, H, N, D);
      break;
    case Layout::padded: {
      const int64_t sd = 1, sh = D + 3, sn = H * sh + 5, sb = N * sn + 7;
      t.storage.assign(B * sb, std::numeric_limits<float>::quiet_NaN());
      t.view = TensorView(t.storage.data(), e, {sb, sn, sh, sd});
      break;
    }
  }
  return t;
}

void fill_uniform(TensorView view, std::mt19937_64& rng, float lo, float hi) {
  std::uniform_real_distribution<float> dist(lo, hi);
  for (int64_t b = 0; b < view.extent[0]; ++b)
    for (int64_t n = 0; n < view.extent[1]; ++n)
      for (int64_t h = 0; h < view.extent[2]; ++h)
        for (int64_t d = 0; d < view.extent[3]; ++d) view(b, n, h, d) = dist(rng);
}

Tensor32 random_tensor(std::array<int64_t, 4> extent, Layout layout, std::mt19937_64& rng, float lo, float hi) {
  Tensor32 t = make_tensor(extent, layout);
  fill_uniform(t.view, rng, lo, hi);
  return t;
}

namespace {
double scaled(double max_error, double max_magnitude) {
  return max_magnitude > 0 ? max_error / max_magnitude : max_error;
}
}  // namespace

double relative_error(ConstTensorView got, const reference::Tensor& want) {
  double max_error = 0, max_magnitude = 0;
  for (int64_t b = 0; b < got.extent[0]; ++b)
    for (int64_t n = 0; n < got.extent[1]; ++n)
      for (int64_t h = 0; h < got.extent[2]; ++h)
        for (int64_t d = 0; d < got.extent[3]; ++d) {
          const double g = got(b, n, h, d), w = want(b, n, h, d);
          if (!std::isfinite(g)) return std::numeric_limits<double>::infinity();
          max_error = std::max(max_error, std::abs(g - w));
          max_magnitude = std::max(max_magnitude, std::abs(w));
        }
  return scaled(max_error, max_magnitude);
}

double relative_error(const std::vector<float>& got, const std::vector<double>& want) {
  double max_error = 0, max_magnitude = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::isinf(want[i]) && got[i] == want[i]) continue;
    if (!std::isfinite(got[i])) return std::numeric_limits<double>::infinity();
    max_error = std::max(max_error, std::abs(double(got[i]) - want[i]));
    max_magnitude = std::max(max_magnitude, std::abs(want[i]));
  }
  return scaled(max_error, max_magnitude);
}

double relative_error(const reference::Tensor& got, const reference::Tensor& want) {
  double max_error = 0, max_magnitude = 0;
  for (size_t i = 0; i < want.data.size(); ++i) {
    max_error = std::max(max_error, std::abs(got.data[i] - want.data[i]));
    max_magnitude = std::max(max_magnitude, std::abs(want.data[i]));
  }
  return scaled(max_error, max_magnitude);
}

bool all_finite(ConstTensorView view) {
  for (int64_t b = 0; b < view.extent[0]; ++b)
    for (int64_t n = 0; n < view.extent[1]; ++n)
      for (int64_t h = 0; h < view.extent[2]; ++h)
        for (int64_t d = 0; d < view.extent[3]; ++d)
          if (!std::isfinite(view(b, n, h, d))) return false;
  return true;
}

}  // namespace linattn::testing
