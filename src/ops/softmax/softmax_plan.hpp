#pragma once
// Exact softmax attention (FlashAttention-2 style), what its forward (softmax_forward.cpp), backward
// (softmax_backward.cpp) and decode (softmax_decode_forward.cpp) share: the tiling plan and its boundary
// checks, scratch, and the packed keys. The arithmetic is in kernels/softmax_tile_* and
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
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <span>

#include "core/huge_pages.hpp"
#include "core/sequences.hpp"
#include "core/validate.hpp"
#include "core/views.hpp"
#include "kernels/gemm.hpp"
#include "kernels/pack.hpp"
#include "linattn/half.hpp"
#include "linattn/softmax_attention.hpp"

namespace linattn::detail::softmax {

inline constexpr const char* kForward = "softmax_attention_forward";
inline constexpr const char* kBackward = "softmax_attention_backward";
inline constexpr int64_t kTileQ = 64;  // query rows per tile
inline constexpr int64_t kTileK = 64;  // key rows per tile (a multiple of kernels::kPad)
inline constexpr float kInf = std::numeric_limits<float>::infinity();
// Key packs of more tiles than this (over 1 MiB at D = E = 64) are prefetched tile by tile.
inline constexpr int64_t kPrefetchTiles = 32;
// Decoding (Nq ≤ kDecodeRows, e.g. one token against a KV cache): the keys of a head are split into
// chunks of kDecodeChunk keys, a number fixed by Nk alone (never by the thread count).
inline constexpr int64_t kDecodeRows = 16;     // at most kernels::kPad: the queries are the columns of one vector
inline constexpr int64_t kDecodeChunk = 2048;  // keys per chunk (a multiple of kTileK)
// Up to this many queries, scores are dot products along each key's row (a lane sum per query and
// key); beyond, the tile product's broadcast FMAs, which form 16 queries' scores at once, cost less.
inline constexpr int64_t kDecodeDotRows = 2;
// Below this many key elements (heads · Nk · (D + E)) the decode runs on the calling thread: the
// fork and join of a parallel region (~10–40 µs with passive waiting) would outweigh the work.
inline constexpr int64_t kDecodeParallelWork = int64_t(1) << 20;
static_assert(kDecodeRows <= kernels::kPad && kDecodeChunk % kTileK == 0);

inline int64_t round_up(int64_t x, int64_t to) { return (x + to - 1) / to * to; }
inline int64_t ceil_div(int64_t x, int64_t to) { return (x + to - 1) / to; }

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

// The checks both directions share: q, k, v and their agreement, options, lse's size. options.cu_seqlens
// is refused: the entry points run packed sequences one by one before they plan.
Plan make_plan(const char* op, ConstTensorView q, ConstTensorView k, ConstTensorView v, size_t lse_size,
               const SoftmaxAttentionOptions& options);

// Zero-initialised floats (huge pages past 2 MiB). Allocated before a parallel region, where a
// throw could not leave.
inline Scratch zeros(int64_t floats) { return zeroed_scratch(size_t(floats)); }

// k and v of one head, per key tile t: kt [Dp, kTileK] = kᵀ; v [kTileK, Ep] (forward) or
// vt [Ep, kTileK] = vᵀ and kr [kTileK, Dp] = k (backward). Zero-padded past Nk, D and E.
// A streaming pack (a forward with one query tile of more than kDecodeRows queries, where each key
// tile is used once) holds one tile, packed just before its use.
struct KeyPack {
  bool backward = false, streaming = false;
  int64_t kt_size = 0, v_size = 0, kr_size = 0, tile_size = 0;
  Scratch memory;

  KeyPack(const Plan& p, bool backward, bool streaming = false);
  float* kt(int64_t t) const { return memory.get() + (streaming ? 0 : t) * tile_size; }
  float* v(int64_t t) const { return kt(t) + kt_size; }  // v, or vᵀ in the backward
  float* kr(int64_t t) const { return v(t) + v_size; }

  // Packs key tile t of (b, h).
  void pack(ConstTensorView k, ConstTensorView v_in, const Plan& p, int64_t b, int64_t h, int64_t t) const;
};

// A packed tile to prefetch (null: none): `count` rows of `cols` floats, `ld` apart.
inline kernels::RowsAhead tile_ahead(const float* rows, int64_t ld, int64_t cols, int64_t count, bool write = false) {
  return {.rows = {rows}, .ld = {ld}, .cols = {cols}, .write = {write}, .count = rows ? count : 0};
}

// The decode forward (flash-decoding, Nq ≤ kDecodeRows) of a checked plan; T: the element type of k
// and v (float, or bf16/f16 read where they lie, then with k's head dim contiguous).
template <class T>
void decode_forward(TensorView out, std::span<float> lse, ConstTensorView q, View4<const T> k, View4<const T> v,
                    const Plan& p);

}  // namespace linattn::detail::softmax
