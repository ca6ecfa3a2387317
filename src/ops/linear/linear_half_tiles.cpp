// Non-causal linear attention over half tensors, tile by tile (see linear_half_tiles.hpp). The passes
// and their blocking are those of the fp32 driver (sum_keys, then the queries tile by tile, the same
// reduction blocks, so the result does not depend on the thread count); only the loads and stores
// differ: a tile's rows are widened from the half tensor into one thread's scratch just before its
// GEMM, which prefetches the next tile's half rows meanwhile.
//
// Why fp32 products and not AVX512_BF16's vdpbf16ps (docs/half-precision.md): φ(k), φ(q) and S are
// not bf16 values, and rounding them for the instruction gave up to 2.9× the criterion's baseline
// error at small head dims (1.8× with FAVOR+), so each would need a second, low-order bf16 term, which
// costs the instruction's whole advantage; and on the Xeon this was measured on, vdpbf16ps runs at
// half the rate of fp32 FMA anyway (bench_peak: BM_Bf16DotPeak against BM_FmaPeak).
#include "ops/linear/linear_half_tiles.hpp"

#include <omp.h>

#include <algorithm>
#include <vector>

namespace linattn::detail {
namespace {

// What a GEMM on item t of walk prefetches: the next item's rows of x and of y (written when
// y_written), half rows given to the prefetcher as the floats that cover their bytes.
template <class T, class U>
kernels::RowsAhead next_rows(const TileWalk& walk, View4<T> x, View4<U> y, bool y_written, int64_t b, int64_t t) {
  kernels::RowsAhead a;
  if (t + 1 >= walk.count()) return a;
  const int64_t h = walk.head(t + 1), j = walk.token(t + 1);
  int region = 0;
  auto add = [&](const auto& z, bool written) {
    if (z.stride[3] != 1 || z.stride[1] % 2 != 0) return;
    a.rows[region] = reinterpret_cast<const float*>(head_rows(z, b, h).at(j));
    a.ld[region] = z.stride[1] / 2, a.cols[region] = (z.dim() + 1) / 2, a.write[region] = written;
    ++region;
  };
  add(x, false);
  add(y, y_written);
  a.count = region > 0 ? walk.rows(t + 1) : 0;
  return a;
}

// One thread's tiles: the rows widened, φ, the values widened. The pad columns stay 0.
struct Scratch {
  FeatureScratch features;
  std::vector<float> x, phi, val, num, den, scale;
  explicit Scratch(const LinearProblem& p)
      : features(p, kTile),
        x(size_t(kTile * p.D)),
        phi(size_t(kTile * p.Mp), 0.0f),
        val(size_t(kTile * p.Ep), 0.0f),
        num(size_t(kTile * p.Ep)),
        den(size_t(kTile)),
        scale(size_t(kTile)) {}

  // phi: [n, Mp] = φ(rows [n0, n0 + n) of x), with the sums load_features forms.
  template <HalfType T>
  void features_of(const LinearProblem& p, FeatureRole role, HeadRows<const T> rows, int64_t n0, int64_t n,
                   const FeatureSums& sums) {
    kernels::pack_rows({x.data(), p.D, n, p.D}, rows, n0, n);
    load_features(phi.data(), features, p, role, {x.data(), p.D, 1}, 0, n, n, sums);
  }
};

// state = Σ_{j < lengths[b]} (φ(k_j) v_jᵀ, φ(k_j)), blocked as sum_keys.
template <HalfType T>
void sum_keys_half(PackedState& state, View4<const T> k, View4<const T> v, const LinearProblem& p) {
  for_each_key_tile(
      state, k, p, [&] { return Scratch(p); },
      [&](Scratch& w, float* S, float* z, const TileWalk& walk, int64_t b, int64_t t) {
        const int64_t h = walk.head(t), j = walk.token(t), n = walk.rows(t);
        // φ(K) of the tile, z += Σ_j φ(k_j), then S += φ(K)ᵀ V while the next tile's rows arrive.
        w.features_of(p, FeatureRole::key, head_rows(k, b, h), j, n, {.sum = z});
        kernels::pack_rows({w.val.data(), p.Ep, n, p.E}, head_rows(v, b, h), j, n);
        const kernels::RowsAhead next = next_rows(walk, k, v, false, b, t);
        kernels::gemm({S, p.Ep, p.M, p.Ep}, {w.phi.data(), 1, p.Mp}, {w.val.data(), p.Ep, n, p.Ep},
                      {.accumulate = true, .ahead = &next});
      });
}

// out: [B, Nq, H, E] = φ(Q) S / (φ(Q) z + eps), tile by tile, as queries_forward.
template <HalfType T>
void queries_half(View4<T> out, View4<const T> q, const PackedState& state, const LinearProblem& p) {
  const TileWalk walk{p.H, 0, p.Nq, heads_outer(q)};
  const int64_t items = p.B * walk.count();
#pragma omp parallel
  {
    const auto [first, last] = thread_share(items);
    Scratch w(p);
    for (int64_t item = first; item < last; ++item) {
      const int64_t b = item / walk.count(), t = item % walk.count();
      const int64_t h = walk.head(t), i = walk.token(t), n = walk.rows(t), bh = b * p.H + h;
      // φ(Q) of the tile, and den_i = φ(q_i)·z
      w.features_of(p, FeatureRole::query, head_rows(q, b, h), i, n,
                    p.normalize ? FeatureSums{.dot = state.z_of(bh), .dots = w.den.data()} : FeatureSums{});
      if (p.normalize)
        for (int64_t r = 0; r < n; ++r) w.scale[r] = 1.0f / (w.den[r] + p.eps);
      const kernels::RowsAhead next = next_rows(walk, q, out, true, b, t);
      kernels::gemm({w.num.data(), p.Ep, n, p.Ep}, {w.phi.data(), p.Mp, 1}, {state.S_of(bh), p.Ep, p.M, p.Ep},
                    {.row_scale = p.normalize ? w.scale.data() : nullptr, .ahead = &next});
      kernels::unpack_rows(head_rows(out, b, h), i, {w.num.data(), p.Ep, n, p.E});
    }
  }
}

}  // namespace

template <HalfType T>
void linear_forward_half_tiles(View4<T> out, View4<const T> q, View4<const T> k, View4<const T> v,
                               const LinearProblem& p) {
  PackedState state(p);
  sum_keys_half(state, k, v, p);
  queries_half(out, q, state, p);
}

template void linear_forward_half_tiles<bf16>(View4<bf16>, View4<const bf16>, View4<const bf16>, View4<const bf16>,
                                              const LinearProblem&);
template void linear_forward_half_tiles<f16>(View4<f16>, View4<const f16>, View4<const f16>, View4<const f16>,
                                             const LinearProblem&);

}  // namespace linattn::detail
