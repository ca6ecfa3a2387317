#include "ops/linear/linear_common.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>
#include <string>
#include <utility>

#include "core/sequences.hpp"
#include "core/validate.hpp"
#include "kernels/feature_map_elementwise.hpp"
#include "kernels/gemm.hpp"
#include "kernels/rows.hpp"
#include "ops/linear/linear_checks.hpp"

namespace linattn::detail {

namespace {

// Checks shared by forward and backward: q, k, v and the options.
LinearProblem check_inputs(const char* op, ConstTensorView q, ConstTensorView k, ConstTensorView v,
                           const LinearAttentionOptions& o) {
  LinearProblem p;
  refuse_cu_seqlens(op, o.cu_seqlens,
                    "its state is one per batch row; linear_attention_forward/backward take packed sequences");
  p.M = check_linear_arguments(op, q, k, v, o);
  p.B = q.batch(), p.Nq = q.seq(), p.Nk = k.seq(), p.H = q.heads(), p.D = q.dim(), p.E = v.dim();
  p.Mp = kernels::padded(p.M), p.Ep = kernels::padded(p.E);
  p.map = o.feature_map.get(), p.eps = o.eps, p.normalize = o.normalize;
  p.builtin = builtin_tile_map(p.map);
  p.lengths.resize(size_t(p.B));
  for (int64_t b = 0; b < p.B; ++b) p.lengths[b] = key_length(o.key_lengths, b, p.Nk);
  return p;
}

// Up to N regions without a heap allocation (recurrent_step checks once per token): the listed ones
// and then a state's.
template <size_t N>
struct Regions {
  std::array<boundary::Region, N> all{};
  size_t count = 0;
  Regions(std::initializer_list<boundary::Region> first) {
    for (const boundary::Region& r : first) all[count++] = r;
  }
  std::span<const boundary::Region> plus(std::span<const boundary::Region> more) {
    for (const boundary::Region& r : more) {
      if (count == N) fail("linear attention", "more state regions than the check has room for");  // a bug here
      all[count++] = r;
    }
    return {all.data(), count};
  }
};

}  // namespace

LinearProblem check_linear_forward_shapes(const char* op, ConstTensorView out, ConstTensorView q, ConstTensorView k,
                                          ConstTensorView v, const LinearAttentionOptions& o) {
  LinearProblem p = check_inputs(op, q, k, v, o);
  check_output_shape(op, "out", out, q, v);
  return p;
}

LinearProblem check_linear_forward(const char* op, ConstTensorView out, ConstTensorView q, ConstTensorView k,
                                   ConstTensorView v, const LinearAttentionOptions& o,
                                   std::span<const boundary::Region> state_outputs,
                                   std::span<const boundary::Region> state_inputs) {
  LinearProblem p = check_linear_forward_shapes(op, out, q, k, v, o);
  check_outputs(op, Regions<3>{region("out", out)}.plus(state_outputs),
                Regions<5>{region("q", q), region("k", k), region("v", v)}.plus(state_inputs));
  return p;
}

LinearProblem check_linear_backward(const char* op, ConstTensorView dq, ConstTensorView dk, ConstTensorView dv,
                                    ConstTensorView dout, ConstTensorView q, ConstTensorView k, ConstTensorView v,
                                    const LinearAttentionOptions& o, std::span<const boundary::Region> state_outputs,
                                    std::span<const boundary::Region> state_inputs) {
  LinearProblem p = check_inputs(op, q, k, v, o);
  check_output_shape(op, "dout", dout, q, v);
  check_like(op, "dq", dq, q, "q");
  check_like(op, "dk", dk, k, "k");
  check_like(op, "dv", dv, v, "v");
  check_outputs(op, Regions<5>{region("dq", dq), region("dk", dk), region("dv", dv)}.plus(state_outputs),
                Regions<6>{region("dout", dout), region("q", q), region("k", k), region("v", v)}.plus(state_inputs));
  return p;
}

std::array<boundary::Region, 2> state_regions(const RecurrentState* state, const char* S_name, const char* z_name) {
  if (!state) return {};
  if (state->dtype() == DType::bf16) return {region(S_name, state->S_bf16()), region(z_name, state->z())};
  return {region(S_name, state->S()), region(z_name, state->z())};
}

void check_chunk_size(const char* op, const LinearAttentionOptions& o) {
  if (o.chunk_size >= 1) return;
  fail(op, "options.chunk_size is " + std::to_string(o.chunk_size) + ", expected ≥ 1");
}

void check_state(const char* op, const char* name, const RecurrentState& s, const LinearProblem& p, bool takes_bf16) {
  const std::string n(name);
  if (s.dtype() != DType::f32 && !takes_bf16)
    fail(op,
         n + ".dtype() is " + dtype_name(s.dtype()) +
             ", expected f32 (a bf16 state is for the decode steps: recurrent_step, decayed_step, delta_rule_step)");
  check_state_extents(op, name, {s.batch(), s.heads(), s.feature_dim(), s.value_dim()}, {p.B, p.H, p.M, p.E});
  if (s.feature_map() != p.map->name())
    fail(op, n + ".feature_map() is \"" + s.feature_map() + "\", expected \"" + p.map->name() +
                 "\" (options.feature_map's name)");
}

PackedState::PackedState(const LinearProblem& p)
    : M(p.M), E(p.E), Mp(p.Mp), Ep(p.Ep), S(size_t(p.B * p.H * p.M * p.Ep), 0.0f), z(size_t(p.B * p.H * p.Mp), 0.0f) {}

PackedState pack_state(const RecurrentState& state, const LinearProblem& p) {
  PackedState packed(p);
  for (int64_t bh = 0; bh < p.B * p.H; ++bh) {
    const float* S = state.S().data() + bh * p.M * p.E;
    for (int64_t m = 0; m < p.M; ++m) std::copy_n(S + m * p.E, p.E, packed.S_of(bh) + m * p.Ep);
    std::copy_n(state.z().data() + bh * p.M, p.M, packed.z_of(bh));
  }
  return packed;
}

void unpack_state(RecurrentState& state, const PackedState& packed, const LinearProblem& p, int64_t position) {
  if (state.batch() != p.B || state.heads() != p.H || state.feature_dim() != p.M || state.value_dim() != p.E ||
      state.feature_map() != p.map->name() || state.dtype() != DType::f32)
    state = RecurrentState(p.B, p.H, p.M, p.E, p.map->name());
  for (int64_t bh = 0; bh < p.B * p.H; ++bh) {
    float* S = state.S().data() + bh * p.M * p.E;
    for (int64_t m = 0; m < p.M; ++m) std::copy_n(packed.S_of(bh) + m * p.Ep, p.E, S + m * p.E);
    std::copy_n(packed.z_of(bh), p.M, state.z().data() + bh * p.M);
  }
  state.set_position(position);
}

FeatureScratch::FeatureScratch(const LinearProblem& p, int64_t rows)
    : x(size_t(rows * p.D)), dx(size_t(rows * p.D)), phi(size_t(rows * p.M)) {}

void load_features(float* phi, FeatureScratch& w, const LinearProblem& p, FeatureRole role, HeadRows<const float> x,
                   int64_t n0, int64_t n, int64_t valid, const FeatureSums& sums) {
  valid = std::clamp<int64_t>(valid, 0, n);
  map_rows({.phi = phi,
            .ldp = p.Mp,
            .map = p.map,
            .builtin = p.builtin,
            .role = role,
            .x = x,
            .n0 = n0,
            .rows = valid,
            .D = p.D,
            .M = p.M,
            .xs = w.x.data(),
            .phi_m = w.phi.data()},
           sums);
  std::fill(phi + valid * p.Mp, phi + n * p.Mp, 0.0f);
}

void store_feature_grad(HeadRows<float> dx, FeatureScratch& w, const LinearProblem& p, FeatureRole role,
                        const float* dphi, const float* phi, HeadRows<const float> x, int64_t n0, int64_t n,
                        int64_t valid) {
  valid = std::clamp<int64_t>(valid, 0, n);
  if (p.builtin && dx.col == 1) {
    if (*p.builtin == kernels::TileMap::identity) {
      for (int64_t r = 0; r < valid; ++r) std::memcpy(dx.at(n0 + r), dphi + r * p.Mp, size_t(p.D) * sizeof(float));
    } else {
      kernels::map_backward_from_phi(*p.builtin, dx.at(n0), dx.row, dphi, p.Mp, phi, p.Mp, valid, p.D);
    }
    for (int64_t r = valid; r < n; ++r) std::fill(dx.at(n0 + r), dx.at(n0 + r) + p.D, 0.0f);
    return;
  }
  if (valid > 0) {
    const float* g = dphi;
    if (p.M != p.Mp) {
      for (int64_t r = 0; r < valid; ++r) std::copy_n(dphi + r * p.Mp, p.M, w.phi.data() + r * p.M);
      g = w.phi.data();
    }
    kernels::pack_rows({w.x.data(), p.D, valid, p.D}, x, n0, valid);
    p.map->backward(w.dx.data(), g, w.x.data(), valid, p.D, role);
  }
  kernels::unpack_rows(dx, n0, {w.dx.data(), p.D, n, p.D}, valid);
}

ThreadShare thread_share(int64_t items) {
  const int64_t threads = omp_get_num_threads(), thread = omp_get_thread_num();
  return {items * thread / threads, items * (thread + 1) / threads};
}

kernels::RowsAhead rows_ahead(const TileWalk& walk, ConstTensorView x, ConstTensorView y, bool for_write, int64_t b,
                              int64_t t) {
  if (!walk.heads_outer && kernels::tokens_dense(x) && (!y.data || kernels::tokens_dense(y)))
    return kernels::dense_part_ahead(x, y, for_write, b, walk.token(t) + kTile,
                                     std::min(kTile, walk.end - walk.token(t) - kTile), walk.head(t));
  if (t + 1 >= walk.count()) return {};
  return kernels::head_rows_ahead(x, y, for_write, b, walk.head(t + 1), walk.token(t + 1), walk.rows(t + 1));
}

void sum_keys(PackedState& state, ConstTensorView k, ConstTensorView v, const LinearProblem& p) {
  struct Scratch {
    FeatureScratch w;
    std::vector<float> phi, val;
  };
  for_each_key_tile(
      state, k, p,
      [&] {
        return Scratch{FeatureScratch(p, kTile), std::vector<float>(size_t(kTile * p.Mp)),
                       std::vector<float>(size_t(kTile * p.Ep))};
      },
      [&](Scratch& w, float* S, float* z, const TileWalk& walk, int64_t b, int64_t t) {
        const int64_t h = walk.head(t), j = walk.token(t), n = walk.rows(t);
        // φ(K) of the tile, and z += Σ_j φ(k_j)
        load_features(w.phi.data(), w.w, p, FeatureRole::key, head_rows(k, b, h), j, n, n, {.sum = z});
        const float* V = head_rows(v, b, h).at(j);
        int64_t ldv = v.stride[1];
        if (!rows_in_place(v)) {
          kernels::pack_rows({w.val.data(), p.Ep, n, p.E}, head_rows(v, b, h), j, n);
          V = w.val.data(), ldv = p.Ep;
        }
        // S += φ(K)ᵀ V, while the next tile's k and v rows are fetched.
        const kernels::RowsAhead next = rows_ahead(walk, k, v, false, b, t);
        kernels::gemm({S, p.Ep, p.M, p.Ep}, {w.phi.data(), 1, p.Mp}, {V, ldv, n, p.Ep},
                      {.accumulate = true, .ahead = &next});
      });
}

void sum_keys_backward(TensorView dk, TensorView dv, ConstTensorView k, ConstTensorView v, const PackedState& grad,
                       const LinearProblem& p) {
  const int64_t Nk = k.seq(), BH = p.B * p.H;
  const TileWalk walk{p.H, 0, Nk, heads_outer(k)};
  const int64_t items = p.B * walk.count();
  // dSᵀ of every head: [E, Mp], the right-hand side of dφ(K) = V dSᵀ.
  std::vector<float> dSt(size_t(BH * p.E * p.Mp), 0.0f);
#pragma omp parallel
  {
#pragma omp for schedule(static)
    for (int64_t bh = 0; bh < BH; ++bh)
      kernels::transpose(dSt.data() + bh * p.E * p.Mp, p.Mp, grad.S_of(bh), p.Ep, p.M, p.E);
    // Each thread takes one contiguous run of the (batch, head, tile) items, in TileWalk order.
    const auto [first, last] = thread_share(items);
    FeatureScratch w(p, kTile);
    std::vector<float> phi(size_t(kTile * p.Mp)), val(size_t(kTile * p.Ep)), dphi(size_t(kTile * p.Mp)),
        dval(size_t(kTile * p.Ep));
    for (int64_t item = first; item < last; ++item) {
      const int64_t b = item / walk.count(), t = item % walk.count();
      const int64_t h = walk.head(t), j = walk.token(t), n = walk.rows(t), bh = b * p.H + h;
      const int64_t valid = std::clamp<int64_t>(p.lengths[b] - j, 0, n);
      if (valid > 0) {
        load_features(phi.data(), w, p, FeatureRole::key, head_rows(k, b, h), j, valid, valid);
        kernels::pack_rows({val.data(), p.Ep, valid, p.E}, head_rows(v, b, h), j, valid);
        // dφ(k_j) = dS v_j + dz, while the next tile's k and v rows are fetched
        for (int64_t r = 0; r < valid; ++r) std::copy_n(grad.z_of(bh), p.Mp, dphi.data() + r * p.Mp);
        const kernels::RowsAhead next = rows_ahead(walk, k, v, false, b, t);
        kernels::gemm({dphi.data(), p.Mp, valid, p.Mp}, {val.data(), p.Ep, 1},
                      {dSt.data() + bh * p.E * p.Mp, p.Mp, p.E, p.Mp}, {.accumulate = true, .ahead = &next});
        // dv_j = dSᵀ φ(k_j)
        kernels::gemm({dval.data(), p.Ep, valid, p.Ep}, {phi.data(), p.Mp, 1}, {grad.S_of(bh), p.Ep, p.M, p.Ep});
      }
      store_feature_grad(head_rows(dk, b, h), w, p, FeatureRole::key, dphi.data(), phi.data(), head_rows(k, b, h), j, n,
                         valid);
      kernels::unpack_rows(head_rows(dv, b, h), j, {dval.data(), p.Ep, n, p.E}, valid);
    }
  }
}

}  // namespace linattn::detail
