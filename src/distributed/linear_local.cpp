#include "distributed/linear_local.hpp"

#include <algorithm>
#include <vector>

#include "kernels/gemm.hpp"

namespace linattn::distributed::detail {

namespace {

// Tokens per tile of the local passes: a fixed number, so the order of every sum is fixed.
constexpr int64_t kRows = 256;

// rows [t0, t0 + count) of head (b, h) of x into dst: [count, x.dim()] contiguous.
void gather(float* dst, ConstTensorView x, int64_t b, int64_t h, int64_t t0, int64_t count) {
  const int64_t D = x.dim();
  for (int64_t t = 0; t < count; ++t) {
    const float* src = x.row(b, t0 + t, h);
    if (x.stride[3] == 1) {
      std::copy_n(src, D, dst + t * D);
    } else {
      for (int64_t d = 0; d < D; ++d) dst[t * D + d] = src[d * x.stride[3]];
    }
  }
}

// Rows [t0, t0 + count) of head (b, h) of x as a GEMM operand: in place when x's rows are
// contiguous, else gathered into scratch.
kernels::ConstTile rows_of(ConstTensorView x, int64_t b, int64_t h, int64_t t0, int64_t count, float* scratch) {
  if (x.stride[3] == 1 && count > 0) return {x.row(b, t0, h), count > 1 ? x.stride[1] : x.dim(), count, x.dim()};
  gather(scratch, x, b, h, t0, count);
  return {scratch, x.dim(), count, x.dim()};
}

// dst's rows [t0, t0 + count) of head (b, h) = (or +=) src: [count, dst.dim()].
void scatter(TensorView dst, const float* src, int64_t b, int64_t h, int64_t t0, int64_t count, bool accumulate) {
  const int64_t D = dst.dim();
  for (int64_t t = 0; t < count; ++t) {
    float* row = dst.row(b, t0 + t, h);
    for (int64_t d = 0; d < D; ++d) {
      float& x = row[d * dst.stride[3]];
      x = accumulate ? x + src[t * D + d] : src[t * D + d];
    }
  }
}

// z[m] += Σ_t phi[t, m], t ascending (restrict: the sum vectorises over m).
void add_rows(float* __restrict z, const float* __restrict phi, int64_t rows, int64_t M) {
  for (int64_t t = 0; t < rows; ++t)
    for (int64_t m = 0; m < M; ++m) z[m] += phi[t * M + m];
}

// [rows, cols] → [cols, rows].
std::vector<float> transpose(const float* a, int64_t rows, int64_t cols) {
  std::vector<float> t(size_t(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) t[c * rows + r] = a[r * cols + c];
  return t;
}

}  // namespace

void shard_state_sums(const FeatureMap& map, ConstTensorView k, ConstTensorView v, int64_t M, float* items) {
  const int64_t B = k.batch(), n = k.seq(), H = k.heads(), D = k.dim(), E = v.dim();
  const int64_t item = state_item_floats(M, E);
#pragma omp parallel for schedule(static)
  for (int64_t bh = 0; bh < B * H; ++bh) {
    const int64_t b = bh / H, h = bh % H;
    float* S = items + bh * item;
    float* z = S + M * E;
    std::fill_n(S, item, 0.0f);
    std::vector<float> x(size_t(kRows * D)), phi(size_t(kRows * M)), vt(size_t(kRows * E));
    for (int64_t t0 = 0; t0 < n; t0 += kRows) {
      const int64_t T = std::min(kRows, n - t0);
      gather(x.data(), k, b, h, t0, T);
      map.forward(phi.data(), x.data(), T, D, FeatureRole::key);
      // S += φᵀ v: [M, T] · [T, E].
      kernels::gemm({S, E, M, E}, kernels::transposed(phi.data(), M), rows_of(v, b, h, t0, T, vt.data()),
                    {.accumulate = true});
      add_rows(z, phi.data(), T, M);
    }
  }
}

void readout_forward(const FeatureMap& map, TensorView out, ConstTensorView q, const float* items, int64_t M, float eps,
                     bool normalize) {
  const int64_t B = q.batch(), n = q.seq(), H = q.heads(), D = q.dim(), E = out.dim();
  const int64_t item = state_item_floats(M, E);
#pragma omp parallel for schedule(static)
  for (int64_t bh = 0; bh < B * H; ++bh) {
    const int64_t b = bh / H, h = bh % H;
    const float* S = items + bh * item;
    const float* z = S + M * E;
    std::vector<float> x(size_t(kRows * D)), phi(size_t(kRows * M)), o(size_t(kRows * E));
    for (int64_t t0 = 0; t0 < n; t0 += kRows) {
      const int64_t T = std::min(kRows, n - t0);
      gather(x.data(), q, b, h, t0, T);
      map.forward(phi.data(), x.data(), T, D, FeatureRole::query);
      // o = φ S: [T, M] · [M, E].
      kernels::gemm({o.data(), E, T, E}, kernels::plain(phi.data(), M), {S, E, M, E});
      if (normalize) {
        for (int64_t t = 0; t < T; ++t) {
          float den = 0;
          for (int64_t m = 0; m < M; ++m) den += phi[t * M + m] * z[m];
          const float inv = 1.0f / (den + eps);
          for (int64_t e = 0; e < E; ++e) o[t * E + e] *= inv;
        }
      }
      scatter(out, o.data(), b, h, t0, T, false);
    }
  }
}

void readout_backward(const FeatureMap& map, TensorView dq, float* ditems, ConstTensorView dout, ConstTensorView q,
                      const float* items, int64_t M, float eps, bool normalize) {
  const int64_t B = q.batch(), n = q.seq(), H = q.heads(), D = q.dim(), E = dout.dim();
  const int64_t item = state_item_floats(M, E);
#pragma omp parallel for schedule(static)
  for (int64_t bh = 0; bh < B * H; ++bh) {
    const int64_t b = bh / H, h = bh % H;
    const float* S = items + bh * item;
    const float* z = S + M * E;
    float* dS = ditems + bh * item;
    float* dz = dS + M * E;
    std::fill_n(dS, item, 0.0f);
    const std::vector<float> ST = transpose(S, M, E);
    std::vector<float> x(size_t(kRows * D)), phi(size_t(kRows * M)), dphi(size_t(kRows * M)), g(size_t(kRows * E)),
        o(size_t(kRows * E)), dx(size_t(kRows * D)), dden(size_t(kRows), 0.0f);
    for (int64_t t0 = 0; t0 < n; t0 += kRows) {
      const int64_t T = std::min(kRows, n - t0);
      gather(x.data(), q, b, h, t0, T);
      gather(g.data(), dout, b, h, t0, T);
      map.forward(phi.data(), x.data(), T, D, FeatureRole::query);
      if (normalize) {
        // num = φ S; den = φ·z + eps; dnum = dout / den; dden = −dout·num / den².
        kernels::gemm({o.data(), E, T, E}, kernels::plain(phi.data(), M), {S, E, M, E});
        for (int64_t t = 0; t < T; ++t) {
          float den = eps;
          for (int64_t m = 0; m < M; ++m) den += phi[t * M + m] * z[m];
          float dot = 0;
          for (int64_t e = 0; e < E; ++e) dot += g[t * E + e] * o[t * E + e];
          const float inv = 1.0f / den;
          dden[t] = -dot * inv * inv;
          for (int64_t e = 0; e < E; ++e) g[t * E + e] *= inv;
        }
      }
      // dφ = dnum Sᵀ (+ dden z): [T, E] · [E, M].
      kernels::gemm({dphi.data(), M, T, M}, kernels::plain(g.data(), E), {ST.data(), M, E, M});
      // dS += φᵀ dnum, dz += φᵀ dden.
      kernels::gemm({dS, E, M, E}, kernels::transposed(phi.data(), M), {g.data(), E, T, E}, {.accumulate = true});
      if (normalize) {
        for (int64_t t = 0; t < T; ++t) {
          for (int64_t m = 0; m < M; ++m) {
            dphi[t * M + m] += dden[t] * z[m];
            dz[m] += phi[t * M + m] * dden[t];
          }
        }
      }
      map.backward(dx.data(), dphi.data(), x.data(), T, D, FeatureRole::query);
      scatter(dq, dx.data(), b, h, t0, T, false);
    }
  }
}

void state_sums_backward(const FeatureMap& map, TensorView dk, TensorView dv, ConstTensorView k, ConstTensorView v,
                         const float* gitems, int64_t M, bool accumulate) {
  const int64_t B = k.batch(), n = k.seq(), H = k.heads(), D = k.dim(), E = v.dim();
  const int64_t item = state_item_floats(M, E);
#pragma omp parallel for schedule(static)
  for (int64_t bh = 0; bh < B * H; ++bh) {
    const int64_t b = bh / H, h = bh % H;
    const float* G = gitems + bh * item;
    const float* gz = G + M * E;
    const std::vector<float> GT = transpose(G, M, E);
    std::vector<float> x(size_t(kRows * D)), phi(size_t(kRows * M)), dphi(size_t(kRows * M)), vt(size_t(kRows * E)),
        dvt(size_t(kRows * E)), dx(size_t(kRows * D));
    for (int64_t t0 = 0; t0 < n; t0 += kRows) {
      const int64_t T = std::min(kRows, n - t0);
      gather(x.data(), k, b, h, t0, T);
      gather(vt.data(), v, b, h, t0, T);
      map.forward(phi.data(), x.data(), T, D, FeatureRole::key);
      // dφ = v G_Sᵀ + G_z: [T, E] · [E, M]; dv = φ G_S: [T, M] · [M, E].
      kernels::gemm({dphi.data(), M, T, M}, kernels::plain(vt.data(), E), {GT.data(), M, E, M});
      for (int64_t t = 0; t < T; ++t)
        for (int64_t m = 0; m < M; ++m) dphi[t * M + m] += gz[m];
      kernels::gemm({dvt.data(), E, T, E}, kernels::plain(phi.data(), M), {G, E, M, E});
      map.backward(dx.data(), dphi.data(), x.data(), T, D, FeatureRole::key);
      scatter(dk, dx.data(), b, h, t0, T, accumulate);
      scatter(dv, dvt.data(), b, h, t0, T, accumulate);
    }
  }
}

}  // namespace linattn::distributed::detail
