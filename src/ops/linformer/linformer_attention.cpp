// Linformer attention: boundary checks, the sequence projections k̃ = E k, ṽ = F v and their
// backward (threads over (batch, head), and over rows of dE for its sums), and
// softmax_attention_forward/backward over the projected positions.
#include <algorithm>
#include <array>
#include <sstream>
#include <string>
#include <vector>

#include "core/validate.hpp"
#include "kernels/gemm.hpp"
#include "linattn/linformer.hpp"
#include "linattn/softmax_attention.hpp"
#include "ops/linformer/linformer_checks.hpp"

namespace linattn {
namespace {

constexpr const char* kForward = "linformer_attention_forward";
constexpr const char* kBackward = "linformer_attention_backward";

constexpr int64_t kRowsPerItem = 8;  // rows of dE per work item of its backward

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

using Sizes = detail::LinformerSizes;

// x̃ (b, h): [P, Dx] row-major, one slab of a [B, H, P, Dx] buffer.
float* slab(std::vector<float>& x, const Sizes& s, int64_t b, int64_t h, int64_t dim) {
  return x.data() + ((b * s.H + h) * s.P) * dim;
}

// The rows j < rows of head h of batch b, packed: [rows, Dx].
void gather_rows(float* dst, ConstTensorView x, int64_t b, int64_t h, int64_t rows) {
  for (int64_t j = 0; j < rows; ++j)
    for (int64_t d = 0; d < x.extent[3]; ++d) dst[j * x.extent[3] + d] = x(b, j, h, d);
}

// The same rows transposed: [Dx, ld], row d holding x(b, j, h, d) for j < rows.
void gather_columns(float* dst, int64_t ld, ConstTensorView x, int64_t b, int64_t h, int64_t rows) {
  for (int64_t j = 0; j < rows; ++j)
    for (int64_t d = 0; d < x.extent[3]; ++d) dst[d * ld + j] = x(b, j, h, d);
}

const float* head_projection(std::span<const float> E, const Sizes& s, const LinformerOptions& o, int64_t h) {
  return E.data() + (o.share_heads ? 0 : h) * s.projection_size();
}

// x̃: [B, H, P, Dx] = E_h x over the keys j < key_length(b) (columns past it are not read).
std::vector<float> project(ConstTensorView x, std::span<const float> E, const Sizes& s, const LinformerOptions& o) {
  const int64_t dim = x.extent[3];
  std::vector<float> out(size_t(s.B * s.H * s.P * dim), 0.0f);
#pragma omp parallel
  {
    std::vector<float> rows(static_cast<size_t>(s.Nk * dim));
#pragma omp for schedule(dynamic, 1)
    for (int64_t bh = 0; bh < s.B * s.H; ++bh) {
      const int64_t b = bh / s.H, h = bh % s.H, L = detail::key_length(o.key_lengths, b, s.Nk);
      gather_rows(rows.data(), x, b, h, L);
      const float* e = head_projection(E, s, o, h);
      float* xp = slab(out, s, b, h, dim);
      // x̃ = E_h[:, :L] · x[:L]
      kernels::gemm({xp, dim, s.P, dim}, {e, s.N_max, 1}, {rows.data(), dim, L, dim});
    }
  }
  return out;
}

// dx = E_hᵀ dx̃ (rows past key_length(b) are 0) and dE_h += dx̃ xᵀ (columns past it get nothing).
void project_backward(TensorView dx, std::span<float> dE, const std::vector<float>& dxp, ConstTensorView x,
                      std::span<const float> E, const Sizes& s, const LinformerOptions& o) {
  const int64_t dim = x.extent[3], heads = o.share_heads ? 1 : s.H;
  // E_hᵀ[:Nk]: [heads, Nk, P], so that dx's sums read contiguous rows.
  std::vector<float> Et(size_t(heads * s.Nk * s.P));
  for (int64_t p = 0; p < heads; ++p)
    for (int64_t r = 0; r < s.P; ++r)
      for (int64_t j = 0; j < s.Nk; ++j)
        Et[size_t((p * s.Nk + j) * s.P + r)] = E[size_t(p * s.projection_size() + r * s.N_max + j)];
  // x transposed per (b, h): [B, H, Dx, Nk], for dE's sums along the sequence.
  std::vector<float> xt(size_t(s.B * s.H * dim * s.Nk));
#pragma omp parallel
  {
    std::vector<float> rows(static_cast<size_t>(s.Nk * dim));
#pragma omp for schedule(dynamic, 1)
    for (int64_t bh = 0; bh < s.B * s.H; ++bh) {
      const int64_t b = bh / s.H, h = bh % s.H, L = detail::key_length(o.key_lengths, b, s.Nk);
      gather_columns(xt.data() + bh * dim * s.Nk, s.Nk, x, b, h, L);
      const float* g = dxp.data() + bh * s.P * dim;
      const float* et = Et.data() + (o.share_heads ? 0 : h) * s.Nk * s.P;
      // dx[:L] = E_h[:, :L]ᵀ · dx̃
      kernels::gemm({rows.data(), dim, L, dim}, {et, s.P, 1}, {g, dim, s.P, dim});
      for (int64_t j = 0; j < s.Nk; ++j)
        for (int64_t d = 0; d < dim; ++d) dx(b, j, h, d) = j < L ? rows[size_t(j * dim + d)] : 0.0f;
    }
    // One thread per block of dE's rows, summing over (b, h) in order: no two threads write the same
    // element, and each element's sum has one order.
    const int64_t blocks = ceil_div(s.P, kRowsPerItem);
#pragma omp for schedule(dynamic, 1)
    for (int64_t item = 0; item < heads * blocks; ++item) {
      const int64_t p = item / blocks, r = item % blocks * kRowsPerItem, nr = std::min(kRowsPerItem, s.P - r);
      float* de = dE.data() + p * s.projection_size() + r * s.N_max;
      for (int64_t b = 0; b < s.B; ++b) {
        const int64_t L = detail::key_length(o.key_lengths, b, s.Nk);
        for (int64_t h = o.share_heads ? 0 : p; h < (o.share_heads ? s.H : p + 1); ++h) {
          // dE_h[r.., :L] += dx̃[r..] · x[:L]ᵀ
          kernels::gemm({de, s.N_max, nr, L}, {dxp.data() + ((b * s.H + h) * s.P + r) * dim, dim, 1},
                        {xt.data() + (b * s.H + h) * dim * s.Nk, s.Nk, dim, L}, {.accumulate = true});
        }
      }
    }
  }
}

// [B, H, P, Dx] buffer viewed as [B, P, H, Dx].
template <class T>
View4<T> projected_view(T* data, const Sizes& s, int64_t dim) {
  return bhnd(data, s.B, s.H, s.P, dim);
}

// Softmax over the P projected positions; a batch with no visible key sees none of them.
struct ProjectedSoftmax {
  std::vector<int64_t> lengths;
  SoftmaxAttentionOptions options;
  ProjectedSoftmax(const LinformerOptions& o, const Sizes& s) {
    options.scale = o.scale;
    if (o.key_lengths.empty()) return;
    for (int64_t b = 0; b < s.B; ++b) lengths.push_back(o.key_lengths[b] > 0 ? s.P : 0);
    options.key_lengths = lengths;
  }
};

}  // namespace

void linformer_attention_forward(TensorView out, std::span<float> lse, ConstTensorView q, ConstTensorView k,
                                 ConstTensorView v, std::span<const float> E, std::span<const float> F,
                                 const LinformerOptions& options) {
  using detail::region;
  const Sizes s = detail::check_linformer_arguments(kForward, q, k, v, E.size(), F.size(), options);
  detail::check_output_shape(kForward, "out", out, q, v);
  detail::check_size(kForward, "lse", int64_t(lse.size()), s.B * s.H * s.Nq, "[B, H, Nq]");
  detail::check_outputs(kForward, {region("lse", lse), region("out", out)},
                        {region("q", q), region("k", k), region("v", v), region("E", E), region("F", F)});
  std::span<const float> Fv = options.share_key_value ? E : F;
  std::vector<float> kp = project(k, E, s, options), vp = project(v, Fv, s, options);
  const ProjectedSoftmax softmax(options, s);
  softmax_attention_forward(out, lse, q, projected_view(kp.data(), s, s.D), projected_view(vp.data(), s, s.Ev),
                            softmax.options);
}

void linformer_attention_backward(TensorView dq, TensorView dk, TensorView dv, std::span<float> dE, std::span<float> dF,
                                  ConstTensorView dout, ConstTensorView q, ConstTensorView k, ConstTensorView v,
                                  std::span<const float> E, std::span<const float> F, ConstTensorView out,
                                  std::span<const float> lse, const LinformerOptions& options) {
  using namespace detail;
  const Sizes s = check_linformer_arguments(kBackward, q, k, v, E.size(), F.size(), options);
  check_like(kBackward, "dq", dq, q, "q");
  check_like(kBackward, "dk", dk, k, "k");
  check_like(kBackward, "dv", dv, v, "v");
  check_output_shape(kBackward, "dout", dout, q, v);
  check_output_shape(kBackward, "out", out, q, v);
  check_size(kBackward, "lse", int64_t(lse.size()), s.B * s.H * s.Nq, "[B, H, Nq]");
  check_size(kBackward, "dE", int64_t(dE.size()), int64_t(E.size()), "E's size");
  check_size(kBackward, "dF", int64_t(dF.size()), int64_t(F.size()), "F's size");
  check_outputs(kBackward, {region("dq", dq), region("dk", dk), region("dv", dv), region("dE", dE), region("dF", dF)},
                {region("dout", dout), region("q", q), region("k", k), region("v", v), region("E", E), region("F", F),
                 region("out", out), region("lse", lse)});
  std::span<const float> Fv = options.share_key_value ? E : F;
  std::vector<float> kp = project(k, E, s, options), vp = project(v, Fv, s, options);
  std::vector<float> dkp(kp.size()), dvp(vp.size());
  const ProjectedSoftmax softmax(options, s);
  softmax_attention_backward(dq, projected_view(dkp.data(), s, s.D), projected_view(dvp.data(), s, s.Ev), dout, q,
                             projected_view(kp.data(), s, s.D), projected_view(vp.data(), s, s.Ev), out, lse,
                             softmax.options);
  std::fill(dE.begin(), dE.end(), 0.0f);
  std::fill(dF.begin(), dF.end(), 0.0f);
  project_backward(dk, dE, dkp, k, E, s, options);
  project_backward(dv, options.share_key_value ? dE : dF, dvp, v, Fv, s, options);
}

}  // namespace linattn
