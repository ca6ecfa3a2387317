// Exact softmax attention, backward (FlashAttention-2 style): recomputes p and ds per (query tile,
// key tile) pair from the saved lse. The shared plan: softmax_plan.hpp.
#include <algorithm>
#include <vector>

#include "kernels/softmax_tile_rows.hpp"
#include "ops/softmax/softmax_plan.hpp"

namespace linattn {
namespace {

using namespace detail::softmax;

// The backward's query side of one head, per query tile t: qs [kTileQ, Dp] = scale · q,
// dos [kTileQ, Ep] = dO, delta [kTileQ] = rowsum(dO ∘ O).
struct QueryPack {
  int64_t qs_size = 0, dos_size = 0, tile_size = 0;
  detail::Scratch memory;

  explicit QueryPack(const Plan& p)
      : qs_size(kTileQ * p.Dp),
        dos_size(kTileQ * p.Ep),
        tile_size(qs_size + dos_size + kTileQ),
        memory(zeros(p.q_tiles * tile_size)) {}
  float* qs(int64_t t) const { return memory.get() + t * tile_size; }
  float* dos(int64_t t) const { return qs(t) + qs_size; }
  float* delta(int64_t t) const { return dos(t) + dos_size; }

  // o_scratch: [kTileQ, Ep].
  void pack(ConstTensorView q, ConstTensorView dout, ConstTensorView out, const Plan& p, int64_t b, int64_t h,
            int64_t t, float* o_scratch) const {
    const int64_t i0 = t * kTileQ, rows = p.query_rows(t);
    kernels::pack_rows({qs(t), p.Dp, kTileQ, q.dim()}, kernels::head_rows(q, b, h), i0, rows, p.scale);
    kernels::pack_rows({dos(t), p.Ep, kTileQ, dout.dim()}, kernels::head_rows(dout, b, h), i0, rows);
    kernels::pack_rows({o_scratch, p.Ep, kTileQ, out.dim()}, kernels::head_rows(out, b, h), i0, rows);
    kernels::softmax_row_dot(delta(t), dos(t), o_scratch, p.Ep, rows, p.Ep);
  }
};

// Per-thread tiles of the backward, with dk and dv accumulators for `key_tiles` key tiles.
struct BackwardScratch {
  int64_t dk_tile = 0, dv_tile = 0, key_tiles = 0;
  detail::Scratch memory;
  float *s, *dp, *o, *dq, *dk_all, *dv_all;
  int32_t key_end[kTileQ], query_begin[kTileK], query_end[kTileK];

  BackwardScratch(const Plan& p, int64_t key_tiles_)
      : dk_tile(kTileK * p.Dp),
        dv_tile(kTileK * p.Ep),
        key_tiles(key_tiles_),
        memory(zeros(2 * kTileQ * kTileK + kTileQ * (p.Ep + p.Dp) + key_tiles * (dk_tile + dv_tile))) {
    s = memory.get();                       // [kTileQ, kTileK] scores, then p
    dp = s + kTileQ * kTileK;               // [kTileQ, kTileK] dO vᵀ, then ds
    o = dp + kTileQ * kTileK;               // [kTileQ, Ep] O, while packing
    dq = o + kTileQ * p.Ep;                 // [kTileQ, Dp]
    dk_all = dq + kTileQ * p.Dp;            // [key_tiles · kTileK, Dp]
    dv_all = dk_all + key_tiles * dk_tile;  // [key_tiles · kTileK, Ep]
  }
  float* dk(int64_t t) const { return dk_all + t * dk_tile; }
  float* dv(int64_t t) const { return dv_all + t * dv_tile; }
  void clear_dk_dv() const { std::fill_n(dk_all, key_tiles * (dk_tile + dv_tile), 0.0f); }
};

// One (query tile qt, key tile kt) pair of (b, ·): recomputes p and ds, then accumulates
// dq += ds k (rows of qt), dv += pᵀ dO and dk += dsᵀ (scale · q) (rows of kt); a null target is
// skipped. Each product runs over the visible pairs only. With `prefetch`, each product asks for
// the next one's packed operand (a long head's packs and dk, dv outgrow L2), and the last for
// next_kt, the key tile of the next pair (null: none).
void backward_pair(float* dq, float* dk, float* dv, const QueryPack& queries, const KeyPack& keys, const float* lse,
                   const Plan& p, int64_t b, int64_t qt, int64_t kt, BackwardScratch& w, bool prefetch,
                   const float* next_kt) {
  const int64_t i0 = qt * kTileQ, rows = p.query_rows(qt), j0 = kt * kTileK, count = p.key_rows(kt);
  for (int64_t r = 0; r < rows; ++r) w.key_end[r] = int32_t(std::clamp(p.key_end(b, i0 + r) - j0, int64_t(0), count));
  const float* qs = queries.qs(qt);
  const float* dos = queries.dos(qt);
  const kernels::RowsAhead vt_rows = tile_ahead(prefetch ? keys.v(kt) : nullptr, kTileK, kTileK, p.E),
                           kr_rows = tile_ahead(prefetch && dq ? keys.kr(kt) : nullptr, p.Dp, p.Dp, count),
                           dv_rows = tile_ahead(prefetch ? dv : nullptr, p.Ep, p.Ep, count, true),
                           dk_rows = tile_ahead(prefetch ? dk : nullptr, p.Dp, p.Dp, count, true),
                           next_rows = tile_ahead(prefetch ? next_kt : nullptr, kTileK, kTileK, p.D);
  // s = (scale · q) kᵀ; dp = dO vᵀ; then p = exp(s − lse), ds = p ∘ (dp − delta)
  kernels::gemm({w.s, kTileK, rows, kTileK}, {qs, p.Dp, 1}, {keys.kt(kt), kTileK, p.D, kTileK}, {.ahead = &vt_rows});
  kernels::gemm({w.dp, kTileK, rows, kTileK}, {dos, p.Ep, 1}, {keys.v(kt), kTileK, p.E, kTileK},
                {.ahead = dq ? &kr_rows : &dv_rows});
  kernels::softmax_backward_tile(w.s, w.dp, kTileK, lse + i0, queries.delta(qt), w.key_end, rows, kTileK);
  if (dq)
    kernels::gemm({dq, p.Dp, rows, p.Dp}, {w.dp, kTileK, 1}, {keys.kr(kt), p.Dp, count, p.Dp},
                  {.accumulate = true, .k_end = w.key_end, .ahead = dk ? &dv_rows : &next_rows});
  if (!dk) return;
  for (int64_t c = 0; c < count; ++c) {
    const int64_t begin = p.query_begin(b, j0 + c);
    w.query_begin[c] = int32_t(std::clamp(begin - i0, int64_t(0), rows));
    w.query_end[c] = begin < p.Nq ? int32_t(rows) : 0;
  }
  kernels::gemm({dv, p.Ep, count, p.Ep}, {w.s, 1, kTileK}, {dos, p.Ep, rows, p.Ep},
                {.accumulate = true, .k_begin = w.query_begin, .k_end = w.query_end, .ahead = &dk_rows});
  kernels::gemm({dk, p.Dp, count, p.Dp}, {w.dp, 1, kTileK}, {qs, p.Dp, rows, p.Dp},
                {.accumulate = true, .k_begin = w.query_begin, .k_end = w.query_end, .ahead = &next_rows});
}

}  // namespace

void softmax_attention_backward(TensorView dq, TensorView dk, TensorView dv, ConstTensorView dout, ConstTensorView q,
                                ConstTensorView k, ConstTensorView v, ConstTensorView out, std::span<const float> lse,
                                const SoftmaxAttentionOptions& options) {
  const char* op = kBackward;
  const SoftmaxAttentionOptions one = detail::without_packing(options);
  const Plan p = make_plan(op, q, k, v, lse.size(), one);
  detail::check_output_shape(op, "out", out, q, v);
  detail::check_output_shape(op, "dout", dout, q, v);
  detail::check_like(op, "dq", dq, q, "q");
  detail::check_like(op, "dk", dk, k, "k");
  detail::check_like(op, "dv", dv, v, "v");
  using detail::region;
  detail::check_outputs(
      op, {region("dq", dq), region("dk", dk), region("dv", dv)},
      {region("q", q), region("k", k), region("v", v), region("out", out), region("dout", dout), region("lse", lse)});
  if (!options.cu_seqlens.empty()) {
    // Each packed sequence alone, over its slice of the tokens, with its lse rows [H, n] gathered.
    detail::check_cu_seqlens(op, options.cu_seqlens, options.key_lengths, p.B, p.Nq, p.Nk);
    std::vector<float> rows;
    detail::for_each_sequence(options.cu_seqlens, [&](int64_t t, int64_t n) {
      rows.resize(size_t(p.H * n));
      for (int64_t h = 0; h < p.H; ++h) std::copy_n(lse.data() + h * p.Nq + t, n, rows.data() + h * n);
      using detail::seq_slice;
      softmax_attention_backward(seq_slice(dq, t, n), seq_slice(dk, t, n), seq_slice(dv, t, n), seq_slice(dout, t, n),
                                 seq_slice(q, t, n), seq_slice(k, t, n), seq_slice(v, t, n), seq_slice(out, t, n), rows,
                                 one);
    });
    return;
  }

  const int threads = omp_get_max_threads();
  const bool prefetch = p.k_tiles > kPrefetchTiles;
  if (p.items_per_head(true)) {
    // One thread per head: query tiles ascending, and within each the key tiles it sees ascending;
    // dk and dv of the whole head stay in scratch until the last query tile.
    std::vector<KeyPack> keys;
    std::vector<QueryPack> queries;
    std::vector<BackwardScratch> scratch;
    for (int t = 0; t < threads; ++t) {
      keys.emplace_back(p, true);
      queries.emplace_back(p);
      scratch.emplace_back(p, p.k_tiles);
    }
#pragma omp parallel
    {
      const int thread = omp_get_thread_num();
      const KeyPack& kp = keys[thread];
      const QueryPack& qp = queries[thread];
      BackwardScratch& w = scratch[thread];
#pragma omp for schedule(dynamic, 1)
      for (int64_t bh = 0; bh < p.B * p.H; ++bh) {
        const int64_t b = bh / p.H, h = bh % p.H;
        const float* lse_rows = lse.data() + bh * p.Nq;
        for (int64_t t = 0; t < p.k_tiles; ++t) kp.pack(k, v, p, b, h, t);
        for (int64_t t = 0; t < p.q_tiles; ++t) qp.pack(q, dout, out, p, b, h, t, w.o);
        w.clear_dk_dv();
        for (int64_t qt = 0; qt < p.q_tiles; ++qt) {
          std::fill_n(w.dq, kTileQ * p.Dp, 0.0f);
          const int64_t seen = p.key_tiles_seen(b, qt);
          for (int64_t kt = 0; kt < seen; ++kt)
            backward_pair(w.dq, w.dk(kt), w.dv(kt), qp, kp, lse_rows, p, b, qt, kt, w, prefetch,
                          kt + 1 < seen ? kp.kt(kt + 1) : nullptr);
          kernels::unpack_rows(kernels::head_rows(dq, b, h), qt * kTileQ, {w.dq, p.Dp, p.query_rows(qt), dq.dim()},
                               p.query_rows(qt), p.scale);
        }
        kernels::unpack_rows(kernels::head_rows(dk, b, h), 0, {w.dk_all, p.Dp, p.Nk, dk.dim()}, p.Nk);
        kernels::unpack_rows(kernels::head_rows(dv, b, h), 0, {w.dv_all, p.Ep, p.Nk, dv.dim()}, p.Nk);
      }
    }
    return;
  }
  // Heads one after another; within a head, each query tile's dq (key tiles ascending) and each key
  // tile's dk, dv (query tiles ascending) are items of their own.
  const KeyPack kp(p, true);
  const QueryPack qp(p);
  std::vector<BackwardScratch> scratch;
  for (int t = 0; t < threads; ++t) scratch.emplace_back(p, 1);
#pragma omp parallel
  {
    BackwardScratch& w = scratch[omp_get_thread_num()];
    for (int64_t bh = 0; bh < p.B * p.H; ++bh) {
      const int64_t b = bh / p.H, h = bh % p.H;
      const float* lse_rows = lse.data() + bh * p.Nq;
#pragma omp for schedule(static)
      for (int64_t t = 0; t < p.k_tiles + p.q_tiles; ++t) {
        if (t < p.k_tiles)
          kp.pack(k, v, p, b, h, t);
        else
          qp.pack(q, dout, out, p, b, h, t - p.k_tiles, w.o);
      }
#pragma omp for schedule(dynamic, 1)
      for (int64_t item = 0; item < p.q_tiles + p.k_tiles; ++item) {
        if (item < p.q_tiles) {
          const int64_t qt = item;
          std::fill_n(w.dq, kTileQ * p.Dp, 0.0f);
          const int64_t seen = p.key_tiles_seen(b, qt);
          for (int64_t kt = 0; kt < seen; ++kt)
            backward_pair(w.dq, nullptr, nullptr, qp, kp, lse_rows, p, b, qt, kt, w, prefetch,
                          kt + 1 < seen ? kp.kt(kt + 1) : nullptr);
          kernels::unpack_rows(kernels::head_rows(dq, b, h), qt * kTileQ, {w.dq, p.Dp, p.query_rows(qt), dq.dim()},
                               p.query_rows(qt), p.scale);
        } else {
          const int64_t kt = item - p.q_tiles;
          w.clear_dk_dv();
          for (int64_t qt = p.first_query_tile(b, kt); qt < p.q_tiles; ++qt)
            backward_pair(nullptr, w.dk(0), w.dv(0), qp, kp, lse_rows, p, b, qt, kt, w, false, nullptr);
          kernels::unpack_rows(kernels::head_rows(dk, b, h), kt * kTileK, {w.dk(0), p.Dp, p.key_rows(kt), dk.dim()},
                               p.key_rows(kt));
          kernels::unpack_rows(kernels::head_rows(dv, b, h), kt * kTileK, {w.dv(0), p.Ep, p.key_rows(kt), dv.dim()},
                               p.key_rows(kt));
        }
      }
    }
  }
}

}  // namespace linattn
