// Exact softmax attention, forward: query tiles over the packed key tiles with an online softmax,
// or the decode (softmax_decode_forward.cpp) for few queries. The shared plan: softmax_plan.hpp.
#include <algorithm>
#include <vector>

#include "kernels/softmax_tile_rows.hpp"
#include "ops/softmax/softmax_plan.hpp"

namespace linattn {
namespace {

using namespace detail::softmax;

// Per-thread tiles of the forward.
struct ForwardScratch {
  detail::Scratch memory;
  float *qs, *s, *o, *row_max, *row_sum;
  int32_t key_end[kTileQ];

  explicit ForwardScratch(const Plan& p) : memory(zeros(kTileQ * (p.Dp + kTileK + p.Ep + 2))) {
    qs = memory.get();            // [kTileQ, Dp] scale · q
    s = qs + kTileQ * p.Dp;       // [kTileQ, kTileK] scores, then probabilities
    o = s + kTileQ * kTileK;      // [kTileQ, Ep] running output
    row_max = o + kTileQ * p.Ep;  // [kTileQ]
    row_sum = row_max + kTileQ;   // [kTileQ]
  }
};

// Rows of query tile t of (b, h): out and lse, over the key tiles it sees, with an online softmax.
void forward_query_tile(TensorView out, float* lse, ConstTensorView q, ConstTensorView k, ConstTensorView v,
                        const KeyPack& keys, const Plan& p, int64_t b, int64_t h, int64_t t, ForwardScratch& w) {
  const int64_t i0 = t * kTileQ, rows = p.query_rows(t);
  kernels::pack_rows({w.qs, p.Dp, rows, q.dim()}, kernels::head_rows(q, b, h), i0, rows, p.scale);
  std::fill_n(w.o, kTileQ * p.Ep, 0.0f);
  std::fill_n(w.row_max, kTileQ, -kInf);
  std::fill_n(w.row_sum, kTileQ, 0.0f);
  const int64_t seen = p.key_tiles_seen(b, t);
  const bool ahead = !keys.streaming && p.k_tiles > kPrefetchTiles;
  for (int64_t kt = 0; kt < seen; ++kt) {
    const int64_t j0 = kt * kTileK, count = p.key_rows(kt);
    if (keys.streaming) keys.pack(k, v, p, b, h, kt);
    for (int64_t r = 0; r < rows; ++r) w.key_end[r] = int32_t(std::clamp(p.key_end(b, i0 + r) - j0, int64_t(0), count));
    // s = (scale · q) kᵀ, while this tile's v arrives; then o += p v over each row's visible keys
    // only, while the next tile's kᵀ arrives (a long head's packs outgrow L2: each query tile
    // streams them from L3, and the hardware prefetcher stops at every 4 KiB page)
    const kernels::RowsAhead v_rows = tile_ahead(ahead ? keys.v(kt) : nullptr, p.Ep, p.Ep, count),
                             next_kt =
                                 tile_ahead(ahead && kt + 1 < seen ? keys.kt(kt + 1) : nullptr, kTileK, kTileK, p.D);
    kernels::gemm({w.s, kTileK, rows, kTileK}, {w.qs, p.Dp, 1}, {keys.kt(kt), kTileK, p.D, kTileK}, {.ahead = &v_rows});
    kernels::softmax_forward_tile(w.s, kTileK, w.o, p.Ep, w.row_max, w.row_sum, w.key_end, rows, kTileK, p.Ep);
    kernels::gemm({w.o, p.Ep, rows, p.Ep}, {w.s, kTileK, 1}, {keys.v(kt), p.Ep, count, p.Ep},
                  {.accumulate = true, .k_end = w.key_end, .ahead = &next_kt});
  }
  kernels::softmax_forward_finish(w.o, p.Ep, lse + (b * p.H + h) * p.Nq + i0, w.row_max, w.row_sum, rows, p.Ep);
  kernels::unpack_rows(kernels::head_rows(out, b, h), i0, {w.o, p.Ep, rows, out.dim()}, rows);
}

}  // namespace

void softmax_attention_forward(TensorView out, std::span<float> lse, ConstTensorView q, ConstTensorView k,
                               ConstTensorView v, const SoftmaxAttentionOptions& options) {
  const char* op = kForward;
  const SoftmaxAttentionOptions one = detail::without_packing(options);
  const Plan p = make_plan(op, q, k, v, lse.size(), one);
  detail::check_output_shape(op, "out", out, q, v);
  using detail::region;
  detail::check_outputs(op, {region("lse", lse), region("out", out)}, {region("q", q), region("k", k), region("v", v)});
  if (!options.cu_seqlens.empty()) {
    // Each packed sequence alone, over its slice of the tokens; its lse rows [H, n] of lse [1, H, T]
    // are not contiguous, so they come back through a buffer.
    detail::check_cu_seqlens(op, options.cu_seqlens, options.key_lengths, p.B, p.Nq, p.Nk);
    std::vector<float> rows;
    detail::for_each_sequence(options.cu_seqlens, [&](int64_t t, int64_t n) {
      rows.resize(size_t(p.H * n));
      using detail::seq_slice;
      softmax_attention_forward(seq_slice(out, t, n), rows, seq_slice(q, t, n), seq_slice(k, t, n), seq_slice(v, t, n),
                                one);
      for (int64_t h = 0; h < p.H; ++h) std::copy_n(rows.data() + h * n, n, lse.data() + h * p.Nq + t);
    });
    return;
  }

  if (p.Nq <= kDecodeRows) {
    decode_forward<float>(out, lse, q, k, v, p);
    return;
  }
  const int threads = omp_get_max_threads();
  std::vector<ForwardScratch> scratch;
  for (int t = 0; t < threads; ++t) scratch.emplace_back(p);
  if (p.items_per_head(false)) {
    std::vector<KeyPack> keys;  // one per thread
    for (int t = 0; t < threads; ++t) keys.emplace_back(p, false, p.q_tiles == 1);
#pragma omp parallel
    {
      const int thread = omp_get_thread_num();
#pragma omp for schedule(dynamic, 1)
      for (int64_t bh = 0; bh < p.B * p.H; ++bh) {
        const int64_t b = bh / p.H, h = bh % p.H;
        for (int64_t t = 0; t < p.k_tiles && !keys[thread].streaming; ++t) keys[thread].pack(k, v, p, b, h, t);
        for (int64_t t = 0; t < p.q_tiles; ++t)
          forward_query_tile(out, lse.data(), q, k, v, keys[thread], p, b, h, t, scratch[thread]);
      }
    }
    return;
  }
  const KeyPack keys(p, false);  // shared, one head at a time
#pragma omp parallel
  {
    const int thread = omp_get_thread_num();
    for (int64_t bh = 0; bh < p.B * p.H; ++bh) {
      const int64_t b = bh / p.H, h = bh % p.H;
#pragma omp for schedule(static)
      for (int64_t t = 0; t < p.k_tiles; ++t) keys.pack(k, v, p, b, h, t);
#pragma omp for schedule(dynamic, 1)
      for (int64_t t = 0; t < p.q_tiles; ++t)
        forward_query_tile(out, lse.data(), q, k, v, keys, p, b, h, t, scratch[thread]);
    }
  }
}

}  // namespace linattn
