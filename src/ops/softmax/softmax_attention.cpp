// Exact softmax attention, forward and backward (FlashAttention-2 style): boundary checks, the
// tiling plan, threads and scratch. The arithmetic is in kernels/softmax_tile_* and
// kernels/softmax_decode.
//
// The keys and values of one (b, h) are packed once per call into per-tile buffers (KeyPack), and
// in the backward the queries and dO too (QueryPack). Two ways to spread work over threads:
//   per head   (many heads) one item per (b, h), packs private to the thread;
//   per tile   (few heads)  heads one after another; packs shared, items are the tiles of the head.
// Either way every result element is computed by one thread, by the same kernel calls in the same
// order (dq over key tiles ascending, dk and dv over query tiles ascending), so results are bitwise
// identical for every thread count and either way. Nothing is N × N.
//
// A forward with few queries (Nq ≤ kDecodeRows: decoding against a KV cache) takes a third way
// (decode_forward): items are (head, fixed chunk of keys), k and v are read unpacked, and each
// head's chunk partials are merged in chunk order, so it too is bitwise the same for any thread count.
#include "linattn/softmax_attention.hpp"

#include <omp.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <new>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "core/huge_pages.hpp"
#include "core/validate.hpp"
#include "kernels/gemm.hpp"
#include "kernels/half_views.hpp"
#include "kernels/pack.hpp"
#include "kernels/softmax_decode.hpp"
#include "kernels/softmax_tile_rows.hpp"
#include "ops/softmax/softmax_half.hpp"

namespace linattn {
namespace {

constexpr const char* kForward = "softmax_attention_forward";
constexpr const char* kBackward = "softmax_attention_backward";
constexpr int64_t kTileQ = 64;  // query rows per tile
constexpr int64_t kTileK = 64;  // key rows per tile (a multiple of kernels::kPad)
constexpr float kInf = std::numeric_limits<float>::infinity();
// Key packs of more tiles than this (over 1 MiB at D = E = 64) are prefetched tile by tile.
constexpr int64_t kPrefetchTiles = 32;
// Decoding (Nq ≤ kDecodeRows, e.g. one token against a KV cache): the keys of a head are split into
// chunks of kDecodeChunk keys, a number fixed by Nk alone (never by the thread count).
constexpr int64_t kDecodeRows = 16;     // at most kernels::kPad: the queries are the columns of one vector
constexpr int64_t kDecodeChunk = 2048;  // keys per chunk (a multiple of kTileK)
// Up to this many queries, scores are dot products along each key's row (a lane sum per query and
// key); beyond, the tile product's broadcast FMAs, which form 16 queries' scores at once, cost less.
constexpr int64_t kDecodeDotRows = 2;
// Below this many key elements (heads · Nk · (D + E)) the decode runs on the calling thread: the
// fork and join of a parallel region (~10–40 µs with passive waiting) would outweigh the work.
constexpr int64_t kDecodeParallelWork = int64_t(1) << 20;
static_assert(kDecodeRows <= kernels::kPad && kDecodeChunk % kTileK == 0);

int64_t round_up(int64_t x, int64_t to) { return (x + to - 1) / to * to; }
int64_t ceil_div(int64_t x, int64_t to) { return (x + to - 1) / to; }

// Shapes and masking of one call, shared by the forward and the backward.
struct Plan {
  int64_t B = 0, Nq = 0, Nk = 0, H = 0, D = 0, E = 0;
  int64_t Dp = 0, Ep = 0;  // D and E padded to kernels::kPad: the leading dims of the tiles
  int64_t q_tiles = 0, k_tiles = 0;
  float scale = 1;
  bool causal = false;
  std::span<const int64_t> key_lengths;

  // Query i of batch b sees the keys [0, key_end(b, i)).
  int64_t key_end(int64_t b, int64_t i) const {
    const int64_t kl = detail::key_length(key_lengths, b, Nk);
    return causal ? std::clamp(i + (Nk - Nq) + 1, int64_t(0), kl) : kl;
  }
  // Key j of batch b is seen by the queries [query_begin(b, j), Nq), or by none when j ≥ key length.
  int64_t query_begin(int64_t b, int64_t j) const {
    if (j >= detail::key_length(key_lengths, b, Nk)) return Nq;
    return causal ? std::clamp(j - (Nk - Nq), int64_t(0), Nq) : 0;
  }
  // Key tiles that query tile t sees: [0, key_tiles_seen(b, t)).
  int64_t key_tiles_seen(int64_t b, int64_t t) const {
    return ceil_div(key_end(b, std::min(Nq, (t + 1) * kTileQ) - 1), kTileK);  // its last row sees most
  }
  // Query tiles that see key tile t: [first_query_tile(b, t), q_tiles).
  int64_t first_query_tile(int64_t b, int64_t t) const { return query_begin(b, t * kTileK) / kTileQ; }
  int64_t query_rows(int64_t t) const { return std::min(kTileQ, Nq - t * kTileQ); }
  int64_t key_rows(int64_t t) const { return std::min(kTileK, Nk - t * kTileK); }
  // One work item per head (many heads, or one query tile per head), or else the tiles of each head
  // as items. A backward per head costs 10·N²·D per head, on ⌈heads / threads⌉ heads in a row;
  // per tile it costs 14·N²·D per head, spread evenly: take the cheaper.
  bool items_per_head(bool backward) const {
    const int64_t threads = omp_get_max_threads(), heads = B * H;
    if (q_tiles == 1) return true;
    if (backward) return 10 * threads * ceil_div(heads, threads) <= 14 * heads;
    return heads % threads == 0 || heads >= 4 * threads;
  }
};

// The checks both directions share: q, k, v and their agreement, options, lse's size.
Plan make_plan(const char* op, ConstTensorView q, ConstTensorView k, ConstTensorView v, size_t lse_size,
               const SoftmaxAttentionOptions& options) {
  detail::check_attention_inputs(op, q, k, v);
  detail::check_key_lengths(op, options.key_lengths, q.batch(), k.seq());
  detail::check_scale(op, options.scale);
  Plan p;
  p.B = q.batch(), p.Nq = q.seq(), p.Nk = k.seq(), p.H = q.heads(), p.D = q.dim(), p.E = v.dim();
  p.Dp = round_up(p.D, kernels::kPad);
  p.Ep = round_up(p.E, kernels::kPad);
  p.q_tiles = ceil_div(p.Nq, kTileQ);
  p.k_tiles = ceil_div(p.Nk, kTileK);
  p.scale = options.scale ? *options.scale : float(1.0 / std::sqrt(double(p.D)));
  p.causal = options.causal;
  p.key_lengths = options.key_lengths;
  const int64_t rows = detail::checked_mul(op, "lse's size (B·H)", p.B, p.H);
  detail::check_size(op, "lse", int64_t(lse_size), detail::checked_mul(op, "lse's size (B·H·Nq)", rows, p.Nq),
                     "[B, H, Nq]");
  // Scratch is sized by one head's packed rows, each at most 2·(Dp + Ep) floats wide.
  detail::checked_mul(op, "one head's packed size ((Nq + Nk) · 2·(D + E), padded)",
                      round_up(p.Nq, kTileQ) + round_up(p.Nk, kTileK), 2 * (p.Dp + p.Ep));
  return p;
}

// Zero-initialised floats (huge pages past 2 MiB). Allocated before a parallel region, where a
// throw could not leave.
detail::Scratch zeros(int64_t floats) { return detail::zeroed_scratch(size_t(floats)); }

// k and v of one head, per key tile t: kt [Dp, kTileK] = kᵀ; v [kTileK, Ep] (forward) or
// vt [Ep, kTileK] = vᵀ and kr [kTileK, Dp] = k (backward). Zero-padded past Nk, D and E.
// A streaming pack (a forward with one query tile of more than kDecodeRows queries, where each key
// tile is used once) holds one tile, packed just before its use.
struct KeyPack {
  bool backward = false, streaming = false;
  int64_t kt_size = 0, v_size = 0, kr_size = 0, tile_size = 0;
  detail::Scratch memory;

  KeyPack(const Plan& p, bool backward_, bool streaming_ = false)
      : backward(backward_),
        streaming(streaming_),
        kt_size(p.Dp * kTileK),
        v_size(p.Ep * kTileK),
        kr_size(backward ? kTileK * p.Dp : 0),
        tile_size(kt_size + v_size + kr_size),
        memory(zeros((streaming ? 1 : p.k_tiles) * tile_size)) {}
  float* kt(int64_t t) const { return memory.get() + (streaming ? 0 : t) * tile_size; }
  float* v(int64_t t) const { return kt(t) + kt_size; }  // v, or vᵀ in the backward
  float* kr(int64_t t) const { return v(t) + v_size; }

  void pack(ConstTensorView k, ConstTensorView v_in, const Plan& p, int64_t b, int64_t h, int64_t t) const {
    const int64_t j0 = t * kTileK, count = p.key_rows(t);
    kernels::pack_rows_transposed({kt(t), kTileK, k.dim(), count}, kernels::head_rows(k, b, h), j0);
    if (!backward) {
      kernels::pack_rows({v(t), p.Ep, kTileK, v_in.dim()}, kernels::head_rows(v_in, b, h), j0, count);
      return;
    }
    kernels::pack_rows_transposed({v(t), kTileK, v_in.dim(), count}, kernels::head_rows(v_in, b, h), j0);
    kernels::pack_rows({kr(t), p.Dp, kTileK, k.dim()}, kernels::head_rows(k, b, h), j0, count);
  }
};

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

// A packed tile to prefetch (null: none): `count` rows of `cols` floats, `ld` apart.
kernels::RowsAhead tile_ahead(const float* rows, int64_t ld, int64_t cols, int64_t count, bool write = false) {
  return {.rows = {rows}, .ld = {ld}, .cols = {cols}, .write = {write}, .count = rows ? count : 0};
}

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

void softmax_attention_forward(TensorView out, std::span<float> lse, ConstTensorView q, ConstTensorView k,
                               ConstTensorView v, const SoftmaxAttentionOptions& options) {
  const char* op = kForward;
  const Plan p = make_plan(op, q, k, v, lse.size(), options);
  detail::check_output_shape(op, "out", out, q, v);
  using detail::region;
  detail::check_outputs(op, {region("lse", lse), region("out", out)}, {region("q", q), region("k", k), region("v", v)});

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

void softmax_attention_backward(TensorView dq, TensorView dk, TensorView dv, ConstTensorView dout, ConstTensorView q,
                                ConstTensorView k, ConstTensorView v, ConstTensorView out, std::span<const float> lse,
                                const SoftmaxAttentionOptions& options) {
  const char* op = kBackward;
  const Plan p = make_plan(op, q, k, v, lse.size(), options);
  detail::check_output_shape(op, "out", out, q, v);
  detail::check_output_shape(op, "dout", dout, q, v);
  detail::check_like(op, "dq", dq, q, "q");
  detail::check_like(op, "dk", dk, k, "k");
  detail::check_like(op, "dv", dv, v, "v");
  using detail::region;
  detail::check_outputs(
      op, {region("dq", dq), region("dk", dk), region("dv", dv)},
      {region("q", q), region("k", k), region("v", v), region("out", out), region("dout", dout), region("lse", lse)});

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

namespace detail {

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

}  // namespace detail
}  // namespace linattn
