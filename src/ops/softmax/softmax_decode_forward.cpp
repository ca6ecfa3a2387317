// Exact softmax attention, the decode forward (few queries against a KV cache, flash-decoding), in
// fp32 and with a bf16/f16 cache read where it lies. The shared plan: softmax_plan.hpp.
#include <cmath>
#include <type_traits>
#include <vector>

#include "kernels/half_views.hpp"
#include "kernels/softmax_decode.hpp"
#include "kernels/softmax_tile_rows.hpp"
#include "ops/softmax/softmax_half.hpp"
#include "ops/softmax/softmax_plan.hpp"

namespace linattn::detail {
namespace softmax {
namespace {

// Decoding: few queries (Nq ≤ kDecodeRows) against many keys. Flash-decoding: the items are
// (head, key chunk); each chunk runs the online softmax over its key tiles into a partial
// (max m, sum l, unnormalised output o) per row, and a second pass merges a head's partials in chunk
// order. k and v are read where they lie, unpacked: the scores by kernels::softmax_decode_scores
// (a dot product per key along its contiguous row; Nq ≤ kDecodeDotRows), or else as
// sᵀ = k · (scale · q)ᵀ by the tile product with k as its strided A operand and the queries as the
// columns, then transposed. o += p v takes v as the tile product's B operand when its rows are
// contiguous and E is a multiple of kernels::kPad (else each v tile is packed).
struct DecodeScratch {
  detail::Scratch memory;
  float *qs, *qt, *st, *s, *o, *vp, *row_max, *row_sum;
  int32_t key_end[kDecodeRows];

  explicit DecodeScratch(const Plan& p)
      : memory(zeros(2 * p.Dp * kDecodeRows + 2 * kTileK * kDecodeRows + kDecodeRows * p.Ep + kTileK * p.Ep +
                     2 * kDecodeRows)) {
    qs = memory.get();                // [kDecodeRows, Dp] scale · q
    qt = qs + kDecodeRows * p.Dp;     // [Dp, kDecodeRows] (scale · q)ᵀ
    st = qt + p.Dp * kDecodeRows;     // [kTileK, kDecodeRows] scores, key-major (strided head dim only)
    s = st + kTileK * kDecodeRows;    // [kDecodeRows, kTileK] scores, then probabilities
    o = s + kDecodeRows * kTileK;     // [kDecodeRows, Ep] running output
    vp = o + kDecodeRows * p.Ep;      // [kTileK, Ep] a packed v tile, when v cannot be read in place
    row_max = vp + kTileK * p.Ep;     // [kDecodeRows]
    row_sum = row_max + kDecodeRows;  // [kDecodeRows]
  }
};

// Partials of one (b, h, chunk): per row m, l and o [Ep], laid out [rows][Ep + 2].
// T: the element type of k and v (float, or bf16/f16 read in place and widened as loaded; then the
// head dim of k is contiguous, see softmax_decode_half).
template <class T>
void decode_chunk(float* partial, ConstTensorView q, View4<const T> k, View4<const T> v, const Plan& p, int64_t b,
                  int64_t h, int64_t chunk, DecodeScratch& w) {
  constexpr bool fp32 = std::is_same_v<T, float>;
  const int64_t rows = p.Nq, ld = p.Ep + 2;
  std::fill_n(w.o, kDecodeRows * p.Ep, 0.0f);
  std::fill_n(w.row_max, kDecodeRows, -kInf);
  std::fill_n(w.row_sum, kDecodeRows, 0.0f);
  const int64_t c0 = chunk * kDecodeChunk;
  const int64_t c1 = std::min(p.Nk, std::min(c0 + kDecodeChunk, p.key_end(b, rows - 1)));  // the last row sees most
  if (c0 < c1) {
    const bool k_rows = !fp32 || (k.stride[3] == 1 && rows <= kDecodeDotRows),
               v_in_place = fp32 && v.stride[3] == 1 && p.E == p.Ep;
    kernels::pack_rows({w.qs, p.Dp, rows, q.dim()}, kernels::head_rows(q, b, h), 0, rows, p.scale);
    if (!k_rows) {  // qt[d, r] = qs[r, d]; columns r ≥ Nq are 0
      std::fill_n(w.qt, p.Dp * kDecodeRows, 0.0f);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t d = 0; d < p.D; ++d) w.qt[d * kDecodeRows + r] = w.qs[r * p.Dp + d];
    }
    for (int64_t j0 = c0; j0 < c1; j0 += kTileK) {
      const int64_t count = std::min(kTileK, p.Nk - j0);
      for (int64_t r = 0; r < rows; ++r) w.key_end[r] = int32_t(std::clamp(p.key_end(b, r) - j0, int64_t(0), count));
      // s[r, j] = Σ_d qs[r, d] · k(b, j0 + j, h, d), over the tile's real keys only
      if (k_rows) {
        // the tile's value rows arrive while its scores are formed (they are read right after)
        const kernels::DecodeAhead values{v.row(b, j0, h), v.stride[1] * int64_t(sizeof(T)),
                                          ((v.dim() - 1) * v.stride[3] + 1) * int64_t(sizeof(T))};
        kernels::softmax_decode_scores(w.s, kTileK, w.qs, p.Dp, rows, k.row(b, j0, h), k.stride[1], count, p.D, values);
      } else if constexpr (fp32) {
        kernels::gemm({w.st, kDecodeRows, count, kDecodeRows}, {k.row(b, j0, h), k.stride[1], k.stride[3]},
                      {w.qt, kDecodeRows, p.D, kDecodeRows});
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t j = 0; j < count; ++j) w.s[r * kTileK + j] = w.st[j * kDecodeRows + r];
      }
      for (int64_t r = 0; r < rows; ++r) std::fill(w.s + r * kTileK + count, w.s + (r + 1) * kTileK, 0.0f);
      kernels::softmax_forward_tile(w.s, kTileK, w.o, p.Ep, w.row_max, w.row_sum, w.key_end, rows, kTileK, p.Ep);
      // o += p v, over each row's visible keys only; half values with a contiguous head dim straight
      // from the cache (the chain of kernels::gemm, so the same bits as through a packed copy)
      if constexpr (!fp32) {
        if (v.stride[3] == 1) {
          kernels::softmax_decode_values(w.o, p.Ep, w.s, kTileK, w.key_end, rows, v.row(b, j0, h), v.stride[1],
                                         v.dim());
          continue;
        }
      }
      const float* vt = w.vp;
      int64_t ldv = p.Ep;
      if constexpr (fp32) {
        if (v_in_place) {
          vt = v.row(b, j0, h);
          ldv = v.stride[1];
        }
      }
      if (!v_in_place) {
        kernels::pack_rows({w.vp, p.Ep, count, v.dim()}, kernels::head_rows(v, b, h), j0, count);
      }
      kernels::gemm({w.o, p.Ep, rows, p.Ep}, {w.s, kTileK, 1}, {vt, ldv, count, p.Ep},
                    {.accumulate = true, .k_end = w.key_end});
    }
  }
  for (int64_t r = 0; r < rows; ++r) {
    float* pr = partial + r * ld;
    pr[0] = w.row_max[r];
    pr[1] = w.row_sum[r];
    std::copy_n(w.o + r * p.Ep, p.Ep, pr + 2);
  }
}

// Merges the chunk partials of (b, h) in chunk order (a fixed order, whatever the thread count):
// m = max m_c, l = Σ l_c·exp(m_c − m), o = Σ o_c·exp(m_c − m); then out = o / l, lse = m + log l.
// A chunk that saw no key (l_c = 0) is skipped, so a row that sees none keeps m = −∞, l = 0.
void decode_merge(TensorView out, float* lse, const float* partials, const Plan& p, int64_t b, int64_t h,
                  int64_t chunks, DecodeScratch& w) {
  const int64_t rows = p.Nq, ld = p.Ep + 2, stride = rows * ld;
  std::fill_n(w.o, kDecodeRows * p.Ep, 0.0f);
  for (int64_t r = 0; r < rows; ++r) {
    float m = -kInf, l = 0.0f;
    for (int64_t c = 0; c < chunks; ++c) {
      const float* pr = partials + c * stride + r * ld;
      if (pr[1] != 0.0f) m = m > pr[0] ? m : pr[0];
    }
    float* o = w.o + r * p.Ep;
    for (int64_t c = 0; c < chunks; ++c) {
      const float* pr = partials + c * stride + r * ld;
      if (pr[1] == 0.0f) continue;
      const float f = std::exp(pr[0] - m);  // one scalar exp per row and chunk
      l += pr[1] * f;
      for (int64_t e = 0; e < p.Ep; ++e) o[e] += pr[2 + e] * f;
    }
    w.row_max[r] = m;
    w.row_sum[r] = l;
  }
  kernels::softmax_forward_finish(w.o, p.Ep, lse + (b * p.H + h) * p.Nq, w.row_max, w.row_sum, rows, p.Ep);
  kernels::unpack_rows(kernels::head_rows(out, b, h), 0, {w.o, p.Ep, rows, out.dim()}, rows);
}

}  // namespace

template <class T>
void decode_forward(TensorView out, std::span<float> lse, ConstTensorView q, View4<const T> k, View4<const T> v,
                    const Plan& p) {
  const int threads = omp_get_max_threads();
  const int64_t chunks = ceil_div(p.Nk, kDecodeChunk), heads = p.B * p.H, stride = p.Nq * (p.Ep + 2);
  const auto partials = zeros(heads * chunks * stride);
  std::vector<DecodeScratch> scratch;
  for (int t = 0; t < threads; ++t) scratch.emplace_back(p);
    // A small cache (a model's decode step over a few hundred keys) costs less than waking the threads.
#pragma omp parallel if (heads * p.Nk * (p.D + p.E) >= kDecodeParallelWork)
  {
    DecodeScratch& w = scratch[omp_get_thread_num()];
#pragma omp for schedule(dynamic, 1)
    for (int64_t item = 0; item < heads * chunks; ++item) {
      const int64_t bh = item / chunks;
      decode_chunk<T>(partials.get() + item * stride, q, k, v, p, bh / p.H, bh % p.H, item % chunks, w);
    }
#pragma omp for schedule(static)
    for (int64_t bh = 0; bh < heads; ++bh)
      decode_merge(out, lse.data(), partials.get() + bh * chunks * stride, p, bh / p.H, bh % p.H, chunks, w);
  }
}

template void decode_forward<float>(TensorView, std::span<float>, ConstTensorView, View4<const float>,
                                    View4<const float>, const Plan&);

}  // namespace softmax

using namespace softmax;

bool softmax_half_decodes(int64_t query_rows, const std::array<int64_t, 4>& k_stride) {
  return query_rows <= kDecodeRows && k_stride[3] == 1;
}

template <HalfType H>
void softmax_decode_half(TensorView out, std::span<float> lse, ConstTensorView q, View4<const H> k, View4<const H> v,
                         const SoftmaxAttentionOptions& options) {
  const char* op = kForward;
  const Plan p = make_plan(op, q, kernels::shape_view(k), kernels::shape_view(v), lse.size(), options);
  detail::check_output_shape(op, "out", out, q, kernels::shape_view(v));
  if (!softmax_half_decodes(p.Nq, k.stride))
    fail_with(op, "the half-precision decode takes Nq ≤ ", kDecodeRows, " and a contiguous head dim of k, got Nq ",
              p.Nq, " and k's head-dim stride ", k.stride[3]);
  decode_forward<H>(out, lse, q, k, v, p);
}
template void softmax_decode_half<bf16>(TensorView, std::span<float>, ConstTensorView, View4<const bf16>,
                                        View4<const bf16>, const SoftmaxAttentionOptions&);
template void softmax_decode_half<f16>(TensorView, std::span<float>, ConstTensorView, View4<const f16>,
                                       View4<const f16>, const SoftmaxAttentionOptions&);

}  // namespace linattn::detail
