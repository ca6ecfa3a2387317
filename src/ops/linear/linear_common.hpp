#pragma once
// Shared by the linear attention drivers (non-causal, causal, recurrent): boundary checks, the
// packing of one head's rows into padded tiles, the state in padded form, and the passes that more
// than one driver runs.
#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "core/views.hpp"
#include "feature_maps/feature_rows.hpp"
#include "kernels/gemm.hpp"
#include "kernels/pack.hpp"
#include "kernels/rows.hpp"
#include "kernels/rows_ahead.hpp"
#include "linattn/boundary.hpp"
#include "linattn/linear_attention.hpp"
#include "linattn/recurrent_state.hpp"
#include "linattn/view.hpp"

namespace linattn::detail {

// Rows per packed tile in the non-causal passes.
inline constexpr int64_t kTile = 64;
// The non-causal reductions over tokens split each batch into this many blocks at most, summed in
// block order: a function of the shape only, so that the result never depends on the thread count,
// and enough work items for 16 threads.
inline constexpr int64_t kMinItems = 16;
inline int64_t reduction_blocks(int64_t B, int64_t N) {
  return std::clamp<int64_t>(kMinItems / B, 1, (N + kTile - 1) / kTile);
}
// Tile range [first, last) of block blk out of blocks over N tokens.
inline int64_t block_begin(int64_t blk, int64_t blocks, int64_t N) {
  return (N + kTile - 1) / kTile * blk / blocks * kTile;
}
// Causal chunks are clamped to this many tokens: the chunk × chunk scratch stays 4 MiB per thread.
inline constexpr int64_t kMaxChunk = 1024;

// One call's sizes and options, after the boundary checks. lengths[b]: keys that enter batch b's sums.
struct LinearProblem {
  int64_t B = 0, Nq = 0, Nk = 0, H = 0, D = 0, M = 0, E = 0;
  int64_t Mp = 0, Ep = 0;  // M and E padded to kernels::kPad
  const FeatureMap* map = nullptr;
  // The built-in elementwise maps get φ fused into the loads of rows (no copy of x first).
  std::optional<kernels::TileMap> builtin;
  float eps = 0;
  bool normalize = true;
  std::vector<int64_t> lengths;
};

// Checks q, k, v, out and the options (see linear_attention.hpp), and the aliasing rule over out and
// state_outputs against q, k, v and state_inputs (core/validate.hpp); returns the problem.
LinearProblem check_linear_forward(const char* op, ConstTensorView out, ConstTensorView q, ConstTensorView k,
                                   ConstTensorView v, const LinearAttentionOptions& options,
                                   std::span<const boundary::Region> state_outputs = {},
                                   std::span<const boundary::Region> state_inputs = {});
// The same checks but the aliasing rule, for callers that check it on views of another element type
// (the bf16 drivers: shape-only float views of half tensors, kernels::shape_view).
LinearProblem check_linear_forward_shapes(const char* op, ConstTensorView out, ConstTensorView q, ConstTensorView k,
                                          ConstTensorView v, const LinearAttentionOptions& options);
// The same for a backward: dq, dk, dv shaped like q, k, v, and outputs dq, dk, dv and state_outputs
// against dout, q, k, v and state_inputs.
LinearProblem check_linear_backward(const char* op, ConstTensorView dq, ConstTensorView dk, ConstTensorView dv,
                                    ConstTensorView dout, ConstTensorView q, ConstTensorView k, ConstTensorView v,
                                    const LinearAttentionOptions& options,
                                    std::span<const boundary::Region> state_outputs = {},
                                    std::span<const boundary::Region> state_inputs = {});
// S() and z() of a state as regions named S_name and z_name; empty ones for no state.
std::array<boundary::Region, 2> state_regions(const RecurrentState* state, const char* S_name, const char* z_name);
// options.chunk_size ≥ 1.
void check_chunk_size(const char* op, const LinearAttentionOptions& options);
// A state read by an operator matches [B, H, M, E] and the feature map's name.
// takes_bf16: the caller handles a bf16 S (recurrent_step); others refuse one.
void check_state(const char* op, const char* name, const RecurrentState& state, const LinearProblem& p,
                 bool takes_bf16 = false);

using kernels::head_rows;
using kernels::HeadRows;
// Whether x's rows can serve the tile kernels in place: contiguous, and a whole number of kPad.
template <class T>
bool rows_in_place(View4<T> x) {
  return x.stride[3] == 1 && x.dim() % kernels::kPad == 0;
}

// S: [B·H, M, Ep] and z: [B·H, Mp], rows padded so that they feed the tile kernels directly.
struct PackedState {
  int64_t M = 0, E = 0, Mp = 0, Ep = 0;
  std::vector<float> S, z;
  PackedState() = default;
  explicit PackedState(const LinearProblem& p);
  float* S_of(int64_t bh) { return S.data() + bh * M * Ep; }
  const float* S_of(int64_t bh) const { return S.data() + bh * M * Ep; }
  float* z_of(int64_t bh) { return z.data() + bh * Mp; }
  const float* z_of(int64_t bh) const { return z.data() + bh * Mp; }
};
PackedState pack_state(const RecurrentState& state, const LinearProblem& p);
// Writes a packed state into `state`, reshaped to [B, H, M, E] and named after the feature map.
void unpack_state(RecurrentState& state, const PackedState& packed, const LinearProblem& p, int64_t position);

// Partial sums of blocks 1.. of every batch: [B, blocks − 1, H, size]; block 0 sums into the result.
struct Partials {
  int64_t blocks, H, size;
  std::vector<float> data;
  Partials(int64_t B, int64_t blocks_, int64_t H_, int64_t size_)
      : blocks(blocks_), H(H_), size(size_), data(size_t(B * (blocks_ - 1) * H_ * size_), 0.0f) {}
  float* at(int64_t b, int64_t blk, int64_t h) { return data.data() + ((b * (blocks - 1) + blk - 1) * H + h) * size; }
  // result[b, h] += Σ_{blk ≥ 1} partial[b, blk, h], in block order.
  void add_to(float* result, int64_t b, int64_t h) {
    for (int64_t blk = 1; blk < blocks; ++blk) {
      const float* x = at(b, blk, h);
      for (int64_t i = 0; i < size; ++i) result[i] += x[i];
    }
  }
};

// Scratch of one thread for loading and storing feature tiles of up to `rows` rows.
struct FeatureScratch {
  std::vector<float> x, dx, phi;  // [rows, D], [rows, D], [rows, M]
  FeatureScratch(const LinearProblem& p, int64_t rows);
};

// The order in which a pass visits the (head, tile) pairs of tokens [begin, end): heads outer when each
// head's rows are one stretch of memory ([B, H, N, D]: the hardware prefetcher streams a head through),
// tiles outer otherwise ([B, N, H, D]: one tile of all heads is one contiguous stretch).
struct TileWalk {
  int64_t H, begin, end;
  bool heads_outer;
  int64_t tiles() const { return (end - begin + kTile - 1) / kTile; }
  int64_t count() const { return H * tiles(); }
  int64_t head(int64_t index) const { return heads_outer ? index / tiles() : index % H; }
  int64_t token(int64_t index) const { return begin + (heads_outer ? index % tiles() : index / H) * kTile; }
  int64_t rows(int64_t index) const { return std::min(kTile, end - token(index)); }
};
// Items [first, last) of `items`: the calling thread's contiguous share inside an OpenMP parallel
// region (for passes whose items are independent, so that the share does not change any result).
struct ThreadShare {
  int64_t first, last;
};
ThreadShare thread_share(int64_t items);
template <class T>
bool heads_outer(View4<T> x) {
  return x.stride[2] >= x.seq() * x.stride[1];
}
// What a GEMM on item t of walk (batch b) prefetches: the rows that the pass reads after it, from x and
// y (y may be empty; for_write: y is written). Heads outer: the next item's rows. Tiles outer with
// [B, N, H, D] rows dense: the H-th part of the next tile of all heads (one contiguous stretch), so
// that memory is streamed in order. Other layouts: the next item's rows.
kernels::RowsAhead rows_ahead(const TileWalk& walk, ConstTensorView x, ConstTensorView y, bool for_write, int64_t b,
                              int64_t t);
// phi: [n, Mp] = φ(rows [n0, n0 + n) of x); rows from `valid` on (keys past the key length) are 0.
// The built-in maps on contiguous rows form φ and the sums in one pass (kernels::feature_tile).
void load_features(float* phi, FeatureScratch& w, const LinearProblem& p, FeatureRole role, HeadRows<const float> x,
                   int64_t n0, int64_t n, int64_t valid, const FeatureSums& sums = {});
// Rows [n0, n0 + n) of dx = (∂φ/∂x)ᵀ dphi at x, dphi: [n, Mp]; rows from `valid` on are 0. phi: the
// tile's φ(x) ([n, Mp]); the built-in maps read their derivative off it (no x, no exp).
void store_feature_grad(HeadRows<float> dx, FeatureScratch& w, const LinearProblem& p, FeatureRole role,
                        const float* dphi, const float* phi, HeadRows<const float> x, int64_t n0, int64_t n,
                        int64_t valid);

// The reduction of sum_keys over the key tiles of k (any element type): tile(scratch, S, z, walk, b, t)
// adds item t of walk (batch b; keys walk.token(t) + [0, walk.rows(t)) of head walk.head(t)) into S and
// z, on one OpenMP thread with its scratch (make_scratch(), once per thread). Each batch's keys below
// lengths[b] are split into reduction_blocks(B, Nk) blocks; block 0 sums into state, the others into
// partials added to it in block order afterwards, so the result does not depend on the thread count.
template <class T, class MakeScratch, class AddTile>
void for_each_key_tile(PackedState& state, View4<T> k, const LinearProblem& p, MakeScratch make_scratch, AddTile tile) {
  const int64_t Nk = k.seq(), blocks = reduction_blocks(p.B, Nk);
  Partials partial_S(p.B, blocks, p.H, p.M * p.Ep), partial_z(p.B, blocks, p.H, p.Mp);
#pragma omp parallel
  {
    auto scratch = make_scratch();
#pragma omp for schedule(static)
    for (int64_t item = 0; item < p.B * blocks; ++item) {
      const int64_t b = item / blocks, blk = item % blocks;
      const TileWalk walk{p.H, block_begin(blk, blocks, Nk), std::min(block_begin(blk + 1, blocks, Nk), p.lengths[b]),
                          heads_outer(k)};
      for (int64_t t = 0; t < walk.count(); ++t) {
        const int64_t h = walk.head(t);
        tile(scratch, blk == 0 ? state.S_of(b * p.H + h) : partial_S.at(b, blk, h),
             blk == 0 ? state.z_of(b * p.H + h) : partial_z.at(b, blk, h), walk, b, t);
      }
    }
#pragma omp for schedule(static)
    for (int64_t bh = 0; bh < p.B * p.H; ++bh) {
      partial_S.add_to(state.S_of(bh), bh / p.H, bh % p.H);
      partial_z.add_to(state.z_of(bh), bh / p.H, bh % p.H);
    }
  }
}

// Non-causal passes, also used for the prefix of a causal cross-attention.
// state = Σ_{j < lengths[b]} (φ(k_j) v_jᵀ, φ(k_j)); k: [B, Nk, H, D], v: [B, Nk, H, E].
void sum_keys(PackedState& state, ConstTensorView k, ConstTensorView v, const LinearProblem& p);
// Keys' gradients given grad = (dL/dS, dL/dz): dφ(k_j) = dS v_j + dz, dv_j = dSᵀ φ(k_j); 0 past lengths[b].
void sum_keys_backward(TensorView dk, TensorView dv, ConstTensorView k, ConstTensorView v, const PackedState& grad,
                       const LinearProblem& p);

// Causal core (Nq == Nk, query i sees keys j ≤ i), chunkwise; initial and final may be null.
void causal_forward(TensorView out, ConstTensorView q, ConstTensorView k, ConstTensorView v, const LinearProblem& p,
                    int64_t chunk, const PackedState* initial, PackedState* final_state);
// dinitial (may be null) receives dL/dS0 and dL/dz0.
void causal_backward(TensorView dq, TensorView dk, TensorView dv, ConstTensorView dout, ConstTensorView q,
                     ConstTensorView k, ConstTensorView v, const LinearProblem& p, int64_t chunk,
                     const PackedState* initial, PackedState* dinitial);

}  // namespace linattn::detail
