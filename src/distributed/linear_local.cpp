#include "distributed/linear_local.hpp"

#include <omp.h>

#include <algorithm>
#include <optional>
#include <vector>

#include "feature_maps/feature_rows.hpp"
#include "kernels/feature_map_elementwise.hpp"
#include "kernels/gemm.hpp"
#include "kernels/pack.hpp"
#include "kernels/rows.hpp"
#include "kernels/rows_ahead.hpp"
#include "kernels/tile.hpp"

namespace linattn::distributed::detail {

namespace {

// Tokens per tile of the local passes: a fixed number, so the order of every sum is fixed.
constexpr int64_t kRows = 256;

// rows [t0, t0 + count) of head (b, h) of x into dst: [count, x.dim()] contiguous.
void gather(float* dst, ConstTensorView x, int64_t b, int64_t h, int64_t t0, int64_t count) {
  kernels::pack_rows({dst, x.dim(), count, x.dim()}, kernels::head_rows(x, b, h), t0, count);
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
  const kernels::ConstTile rows{src, dst.dim(), count, dst.dim()};
  if (accumulate)
    kernels::add_rows(kernels::head_rows(dst, b, h), t0, rows);
  else
    kernels::unpack_rows(kernels::head_rows(dst, b, h), t0, rows, count);
}

// The S part ([M, E]) of each of `count` state items, transposed: [count, E, M].
std::vector<float> transposed_states(const float* items, int64_t count, int64_t M, int64_t E) {
  std::vector<float> t(size_t(count * M * E));
  for (int64_t i = 0; i < count; ++i) {
    const float* a = items + i * state_item_floats(M, E);
    float* ti = t.data() + i * M * E;
    for (int64_t r = 0; r < M; ++r)
      for (int64_t c = 0; c < E; ++c) ti[c * M + r] = a[r * E + c];
  }
  return t;
}

// A tile of one head: tokens [t0, t0 + T) of head bh (T = 0 past the end), in the sweep of a thread
// whose share of the B·H heads is [first, last).
struct HeadTile {
  int64_t bh, t0, T, first, last;
};

// Inside an OpenMP parallel region: the calling thread's contiguous share of the B·H heads, start(bh)
// for each, then tile(this, next) over tiles of kRows tokens in order with every head of the share at
// each tile, so that [B, n, H, D] rows are read in memory order; `next` is the tile that follows (its
// rows are to be prefetched meanwhile). Each head's tiles run in ascending order on one thread
// whatever the thread count, so every sum has one fixed order.
template <class Start, class Tile>
void sweep_share(int64_t BH, int64_t n, Start start, Tile tile) {
  const int64_t threads = omp_get_num_threads(), thread = omp_get_thread_num();
  const int64_t first = BH * thread / threads, last = BH * (thread + 1) / threads;
  for (int64_t bh = first; bh < last; ++bh) start(bh);
  auto at = [&](int64_t bh, int64_t t0) {
    return HeadTile{bh, t0, std::clamp<int64_t>(n - t0, 0, kRows), first, last};
  };
  for (int64_t t0 = 0; t0 < n; t0 += kRows)
    for (int64_t bh = first; bh < last; ++bh) tile(at(bh, t0), bh + 1 < last ? at(bh + 1, t0) : at(first, t0 + kRows));
}

// φ of the rows of `tile` in x: phi: [T, M], the rows gathered into xs: [T, D] on the way.
void tile_features(const FeatureMap& map, float* phi, float* xs, ConstTensorView x, int64_t H, const HeadTile& tile,
                   FeatureRole role) {
  gather(xs, x, tile.bh / H, tile.bh % H, tile.t0, tile.T);
  map.forward(phi, xs, tile.T, x.dim(), role);
}

// φ of the rows of `tile` in x with `sums`: phi: [T, M], through xs: [T, D] unless the map is built in
// (`builtin`, from builtin_tile_map once per pass) and x's rows are read in place (the state sums are a
// third of a causal pass's time, and on the critical path of the distributed one).
void tile_features_with_sums(const FeatureMap& map, std::optional<kernels::TileMap> builtin, int64_t M, float* phi,
                             float* xs, ConstTensorView x, int64_t H, const HeadTile& tile, FeatureRole role,
                             const linattn::detail::FeatureSums& sums) {
  linattn::detail::map_rows({.phi = phi,
                             .ldp = M,
                             .map = &map,
                             .builtin = builtin,
                             .role = role,
                             .x = kernels::head_rows(x, tile.bh / H, tile.bh % H),
                             .n0 = tile.t0,
                             .rows = tile.T,
                             .D = x.dim(),
                             .M = M,
                             .xs = xs},
                            sums);
}

// What the GEMM of `tile` prefetches in x and y (y may be empty; for_write: y is written). With dense
// rows ([B, n, H, D]) and whole batch rows in the share, the head's part of the next tile's stretch
// of all heads: the share's GEMMs of one tile together fetch the next tile in memory order, a whole
// tile ahead (a head's rows alone are H·D floats apart, and fetched one head ahead they arrived late:
// the shard's sums ran 20–25% slower). Otherwise the rows of `next`, the sweep's next item.
kernels::RowsAhead rows_ahead(const HeadTile& tile, const HeadTile& next, int64_t H, ConstTensorView x,
                              ConstTensorView y, bool for_write = false) {
  const bool whole_batches = tile.first % H == 0 && tile.last % H == 0;
  if (whole_batches && kernels::tokens_dense(x) && (!y.data || kernels::tokens_dense(y))) {
    const int64_t t0 = tile.t0 + kRows, T = std::clamp<int64_t>(x.seq() - t0, 0, kRows);
    return kernels::dense_part_ahead(x, y, for_write, tile.bh / H, t0, T, tile.bh % H);
  }
  return kernels::head_rows_ahead(x, y, for_write, next.bh / H, next.bh % H, next.t0, next.T);
}

}  // namespace

void shard_state_sums(const FeatureMap& map, ConstTensorView k, ConstTensorView v, int64_t M, float* items) {
  const int64_t B = k.batch(), n = k.seq(), H = k.heads(), D = k.dim(), E = v.dim();
  const int64_t item = state_item_floats(M, E);
  const std::optional<kernels::TileMap> builtin = linattn::detail::builtin_tile_map(&map);
#pragma omp parallel
  {
    std::vector<float> x(size_t(kRows * D)), phi(size_t(kRows * M)), vt(size_t(kRows * E));
    sweep_share(
        B * H, n, [&](int64_t bh) { std::fill_n(items + bh * item, item, 0.0f); },
        [&](const HeadTile& tile, const HeadTile& next) {
          const int64_t bh = tile.bh, b = bh / H, h = bh % H, t0 = tile.t0, T = tile.T;
          float* S = items + bh * item;
          tile_features_with_sums(map, builtin, M, phi.data(), x.data(), k, H, tile, FeatureRole::key,
                                  {.sum = S + M * E});
          // S += φᵀ v: [M, T] · [T, E], fetching the next tile's k and v rows meanwhile.
          const kernels::RowsAhead ahead = rows_ahead(tile, next, H, k, v);
          kernels::gemm({S, E, M, E}, kernels::transposed(phi.data(), M), rows_of(v, b, h, t0, T, vt.data()),
                        {.accumulate = true, .ahead = &ahead});
        });
  }
}

namespace {

// The read-out of the state items against q's tiles, readout_forward's and finish_from_state's one body:
// o = φ(q) S, onto out's rows and with the running denominator when `keys` (a causal finish: z + Σ φ(k)
// up to each token), scaled by 1 / (den + eps) when normalize.
void readout_tiles(const FeatureMap& map, TensorView out, ConstTensorView q, const ConstTensorView* keys,
                   const float* items, int64_t M, float eps, bool normalize) {
  const int64_t B = q.batch(), n = q.seq(), H = q.heads(), D = q.dim(), E = out.dim();
  const int64_t item = state_item_floats(M, E);
  const bool running = keys && normalize;
  const std::optional<kernels::TileMap> builtin = linattn::detail::builtin_tile_map(&map);
#pragma omp parallel
  {
    std::vector<float> x(size_t(kRows * D)), phi(size_t(kRows * M)), phik(size_t(running ? kRows * M : 0)),
        o(size_t(kRows * E)), scale(kRows);
    // The running z + Σ φ(k) of each head (those of this thread's share are used).
    std::vector<float> z_run(size_t(running ? B * H * M : 0));
    sweep_share(
        B * H, n,
        [&](int64_t bh) {
          if (running) std::copy_n(items + bh * item + M * E, M, z_run.data() + bh * M);
        },
        [&](const HeadTile& tile, const HeadTile& next) {
          const int64_t bh = tile.bh, b = bh / H, h = bh % H, t0 = tile.t0, T = tile.T;
          const float* S = items + bh * item;
          const float* z = S + M * E;
          // den_t = φ(q_t)·z, formed with φ (or with the running sums of φ(k) below).
          const bool fused_dot = normalize && !running;
          tile_features_with_sums(map, builtin, M, phi.data(), x.data(), q, H, tile, FeatureRole::query,
                                  {.dot = fused_dot ? z : nullptr, .dots = fused_dot ? scale.data() : nullptr});
          if (running) {
            tile_features_with_sums(map, builtin, M, phik.data(), x.data(), *keys, H, tile, FeatureRole::key, {});
            kernels::running_dots(scale.data(), phi.data(), M, phik.data(), M, z_run.data() + bh * M, T, M);
          }
          if (normalize)
            for (int64_t t = 0; t < T; ++t) scale[t] = 1.0f / (scale[t] + eps);
          // o = ((out +) φ S) (/ den): [T, M] · [M, E], fetching the next tile's q and out rows meanwhile.
          if (keys) gather(o.data(), out, b, h, t0, T);
          const kernels::RowsAhead ahead = rows_ahead(tile, next, H, q, out, true);
          kernels::gemm(
              {o.data(), E, T, E}, kernels::plain(phi.data(), M), {S, E, M, E},
              {.accumulate = keys != nullptr, .row_scale = normalize ? scale.data() : nullptr, .ahead = &ahead});
          scatter(out, o.data(), b, h, t0, T, false);
        });
  }
}

}  // namespace

void readout_forward(const FeatureMap& map, TensorView out, ConstTensorView q, const float* items, int64_t M, float eps,
                     bool normalize) {
  readout_tiles(map, out, q, nullptr, items, M, eps, normalize);
}

void finish_from_state(const FeatureMap& map, TensorView out, ConstTensorView q, ConstTensorView k, const float* items,
                       int64_t M, float eps, bool normalize) {
  readout_tiles(map, out, q, &k, items, M, eps, normalize);
}

void readout_backward(const FeatureMap& map, TensorView dq, float* ditems, ConstTensorView dout, ConstTensorView q,
                      const float* items, int64_t M, float eps, bool normalize) {
  const int64_t B = q.batch(), n = q.seq(), H = q.heads(), D = q.dim(), E = dout.dim();
  const int64_t item = state_item_floats(M, E);
  const std::vector<float> ST = transposed_states(items, B * H, M, E);
#pragma omp parallel
  {
    std::vector<float> x(size_t(kRows * D)), phi(size_t(kRows * M)), dphi(size_t(kRows * M)), g(size_t(kRows * E)),
        dx(size_t(kRows * D)), den(size_t(kRows), 0.0f), dden(size_t(kRows), 0.0f);
    sweep_share(
        B * H, n, [&](int64_t bh) { std::fill_n(ditems + bh * item, item, 0.0f); },
        [&](const HeadTile& tile, const HeadTile& next) {
          const int64_t bh = tile.bh, b = bh / H, h = bh % H, t0 = tile.t0, T = tile.T;
          const float* z = items + bh * item + M * E;
          float* dS = ditems + bh * item;
          float* dz = dS + M * E;
          tile_features(map, phi.data(), x.data(), q, H, tile, FeatureRole::query);
          gather(g.data(), dout, b, h, t0, T);
          // P = dout Sᵀ: [T, E] · [E, M], fetching the next tile's q and dout rows meanwhile.
          const kernels::RowsAhead ahead = rows_ahead(tile, next, H, q, dout);
          kernels::gemm({dphi.data(), M, T, M}, kernels::plain(g.data(), E), {ST.data() + bh * M * E, M, E, M},
                        {.ahead = &ahead});
          if (normalize) {
            // out = num / den, den = φ·z + eps: dφ = P / den + dden z (dden = −φ·P / den²), dnum = dout / den.
            kernels::row_dots(den.data(), phi.data(), M, z, T, M);
            for (int64_t t = 0; t < T; ++t) {
              const float d = den[t] + eps, inv = 1.0f / d;
              dden[t] = kernels::normaliser_backward_row(dphi.data() + t * M, phi.data() + t * M, z, d, M);
              for (int64_t e = 0; e < E; ++e) g[t * E + e] *= inv;
            }
            kernels::add_weighted_rows(dz, phi.data(), M, dden.data(), T, M);  // dz += φᵀ dden
          }
          // dS += φᵀ dnum.
          kernels::gemm({dS, E, M, E}, kernels::transposed(phi.data(), M), {g.data(), E, T, E}, {.accumulate = true});
          map.backward(dx.data(), dphi.data(), x.data(), T, D, FeatureRole::query);
          scatter(dq, dx.data(), b, h, t0, T, false);
        });
  }
}

void state_sums_backward(const FeatureMap& map, TensorView dk, TensorView dv, ConstTensorView k, ConstTensorView v,
                         const float* gitems, int64_t M, bool accumulate) {
  const int64_t B = k.batch(), n = k.seq(), H = k.heads(), D = k.dim(), E = v.dim();
  const int64_t item = state_item_floats(M, E);
  const std::vector<float> GT = transposed_states(gitems, B * H, M, E);
#pragma omp parallel
  {
    std::vector<float> x(size_t(kRows * D)), phi(size_t(kRows * M)), dphi(size_t(kRows * M)), vt(size_t(kRows * E)),
        dvt(size_t(kRows * E)), dx(size_t(kRows * D));
    sweep_share(
        B * H, n, [](int64_t) {},
        [&](const HeadTile& tile, const HeadTile& next) {
          const int64_t bh = tile.bh, b = bh / H, h = bh % H, t0 = tile.t0, T = tile.T;
          const float* G = gitems + bh * item;
          const float* gz = G + M * E;
          tile_features(map, phi.data(), x.data(), k, H, tile, FeatureRole::key);
          gather(vt.data(), v, b, h, t0, T);

          // dφ = v G_Sᵀ + G_z: [T, E] · [E, M], fetching the next tile's k and v rows meanwhile;
          // dv = φ G_S: [T, M] · [M, E].
          const kernels::RowsAhead ahead = rows_ahead(tile, next, H, k, v);
          kernels::gemm({dphi.data(), M, T, M}, kernels::plain(vt.data(), E), {GT.data() + bh * M * E, M, E, M},
                        {.ahead = &ahead});
          for (int64_t t = 0; t < T; ++t)
            for (int64_t m = 0; m < M; ++m) dphi[t * M + m] += gz[m];
          kernels::gemm({dvt.data(), E, T, E}, kernels::plain(phi.data(), M), {G, E, M, E});
          map.backward(dx.data(), dphi.data(), x.data(), T, D, FeatureRole::key);
          scatter(dk, dx.data(), b, h, t0, T, accumulate);
          scatter(dv, dvt.data(), b, h, t0, T, accumulate);
        });
  }
}

}  // namespace linattn::distributed::detail
