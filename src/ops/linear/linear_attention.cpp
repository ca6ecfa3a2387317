// Linear attention, non-causal: S = Σ_j φ(k_j) v_jᵀ and z = Σ_j φ(k_j) once per head (sum_keys), then
// out_i = φ(q_i)ᵀ S / (φ(q_i)ᵀ z + eps) tile by tile. With options.causal it runs the chunked causal
// core; a causal cross-attention (Nq ≠ Nk, bottom-right) first folds the keys before the diagonal
// into an initial state, or gives 0 to the rows that see no key.
#include <algorithm>

#include "core/sequences.hpp"
#include "core/validate.hpp"
#include "ops/linear/linear_common.hpp"

namespace linattn {
namespace detail {
namespace {

// out: [B, Nq, H, E] = φ(Q) S / (φ(Q) z + eps), tile by tile; each thread takes one contiguous run of
// the (batch, head, tile) items, in TileWalk order.
void queries_forward(TensorView out, ConstTensorView q, const PackedState& state, const LinearProblem& p) {
  const TileWalk walk{p.H, 0, p.Nq, heads_outer(q)};
  const int64_t items = p.B * walk.count();
#pragma omp parallel
  {
    const auto [first, last] = thread_share(items);
    FeatureScratch w(p, kTile);
    std::vector<float> phi(size_t(kTile * p.Mp)), num(size_t(kTile * p.Ep)), den(kTile), scale(kTile);
    for (int64_t item = first; item < last; ++item) {
      const int64_t b = item / walk.count(), t = item % walk.count();
      const int64_t h = walk.head(t), i = walk.token(t), n = walk.rows(t), bh = b * p.H + h;
      // φ(Q) of the tile, and den_i = φ(q_i)·z
      load_features(phi.data(), w, p, FeatureRole::query, head_rows(q, b, h), i, n, n,
                    p.normalize ? FeatureSums{.dot = state.z_of(bh), .dots = den.data()} : FeatureSums{});
      // out_i = (φ(q_i)ᵀ S) / den_i: one division per row, the scaling in the GEMM's store.
      if (p.normalize)
        for (int64_t r = 0; r < n; ++r) scale[r] = 1.0f / (den[r] + p.eps);
      const float* row_scale = p.normalize ? scale.data() : nullptr;
      // Meanwhile the next item's q rows are fetched, and its out rows (to be written).
      const kernels::RowsAhead next = rows_ahead(walk, q, out, true, b, t);
      if (rows_in_place(out)) {
        kernels::gemm({head_rows(out, b, h).at(i), out.stride[1], n, p.Ep}, {phi.data(), p.Mp, 1},
                      {state.S_of(bh), p.Ep, p.M, p.Ep}, {.row_scale = row_scale, .ahead = &next});
      } else {
        kernels::gemm({num.data(), p.Ep, n, p.Ep}, {phi.data(), p.Mp, 1}, {state.S_of(bh), p.Ep, p.M, p.Ep},
                      {.row_scale = row_scale, .ahead = &next});
        kernels::unpack_rows(head_rows(out, b, h), i, {num.data(), p.Ep, n, p.E}, n);
      }
    }
  }
}

// Backward of queries_forward: dq, and grad = (dL/dS, dL/dz) summed over the queries.
//   out_i = num_i / den_i, num_i = Sᵀφ(q_i), den_i = φ(q_i)·z + eps:
//   dnum_i = dout_i / den_i, dden_i = −φ(q_i)·(S dout_i) / den_i², dφ(q_i) = S dnum_i + z dden_i,
//   dS = Σ_i φ(q_i) dnum_iᵀ, dz = Σ_i φ(q_i) dden_i.
void queries_backward(TensorView dq, PackedState& grad, ConstTensorView dout, ConstTensorView q,
                      const PackedState& state, const LinearProblem& p) {
  const int64_t BH = p.B * p.H, blocks = reduction_blocks(p.B, p.Nq);
  std::vector<float> St(size_t(BH * p.E * p.Mp), 0.0f);  // Sᵀ: [E, Mp] per head
  Partials partial_S(p.B, blocks, p.H, p.M * p.Ep), partial_z(p.B, blocks, p.H, p.Mp);
#pragma omp parallel
  {
#pragma omp for schedule(static)
    for (int64_t bh = 0; bh < BH; ++bh)
      kernels::transpose(St.data() + bh * p.E * p.Mp, p.Mp, state.S_of(bh), p.Ep, p.M, p.E);
    FeatureScratch w(p, kTile);
    std::vector<float> phi(size_t(kTile * p.Mp)), g(size_t(kTile * p.Ep)), P(size_t(kTile * p.Mp)), den(kTile),
        dden(kTile);
#pragma omp for schedule(static)
    for (int64_t item = 0; item < p.B * blocks; ++item) {
      const int64_t b = item / blocks, blk = item % blocks;
      const TileWalk walk{p.H, block_begin(blk, blocks, p.Nq), std::min(p.Nq, block_begin(blk + 1, blocks, p.Nq)),
                          heads_outer(q)};
      for (int64_t t = 0; t < walk.count(); ++t) {
        const int64_t h = walk.head(t), i = walk.token(t), n = walk.rows(t);
        const int64_t bh = b * p.H + h;
        const float* z = state.z_of(bh);
        float* gS = blk == 0 ? grad.S_of(bh) : partial_S.at(b, blk, h);
        float* gz = blk == 0 ? grad.z_of(bh) : partial_z.at(b, blk, h);
        load_features(phi.data(), w, p, FeatureRole::query, head_rows(q, b, h), i, n, n,
                      p.normalize ? FeatureSums{.dot = z, .dots = den.data()} : FeatureSums{});
        kernels::pack_rows({g.data(), p.Ep, n, p.E}, head_rows(dout, b, h), i, n);
        // P_i = S dout_i: [n, Mp], while the next tile's q and dout rows are fetched
        const kernels::RowsAhead next = rows_ahead(walk, q, dout, false, b, t);
        kernels::gemm({P.data(), p.Mp, n, p.Mp}, {g.data(), p.Ep, 1}, {St.data() + bh * p.E * p.Mp, p.Mp, p.E, p.Mp},
                      {.ahead = &next});
        if (p.normalize) {
          for (int64_t r = 0; r < n; ++r) {
            const float d = den[r] + p.eps;
            dden[r] = kernels::normaliser_backward_row(P.data() + r * p.Mp, phi.data() + r * p.Mp, z, d, p.M);
            const float inv = 1.0f / d;
            for (int64_t e = 0; e < p.E; ++e) g[r * p.Ep + e] *= inv;
          }
          kernels::add_weighted_rows(gz, phi.data(), p.Mp, dden.data(), n, p.M);
        }
        kernels::gemm({gS, p.Ep, p.M, p.Ep}, {phi.data(), 1, p.Mp}, {g.data(), p.Ep, n, p.Ep}, {.accumulate = true});
        store_feature_grad(head_rows(dq, b, h), w, p, FeatureRole::query, P.data(), phi.data(), head_rows(q, b, h), i,
                           n, n);
      }
    }
#pragma omp for schedule(static)
    for (int64_t bh = 0; bh < BH; ++bh) {
      partial_S.add_to(grad.S_of(bh), bh / p.H, bh % p.H);
      partial_z.add_to(grad.z_of(bh), bh / p.H, bh % p.H);
    }
  }
}

// Zeroes tokens [0, count) of x.
void zero_tokens(TensorView x, int64_t count) {
  for (int64_t b = 0; b < x.batch(); ++b)
    for (int64_t n = 0; n < count; ++n)
      for (int64_t h = 0; h < x.heads(); ++h)
        for (int64_t d = 0; d < x.dim(); ++d) x(b, n, h, d) = 0.0f;
}

// The problem on keys [begin, begin + count): lengths shift and clamp with the keys.
LinearProblem key_slice(const LinearProblem& p, int64_t begin, int64_t count) {
  LinearProblem s = p;
  s.Nk = count;
  for (int64_t& l : s.lengths) l = std::clamp<int64_t>(l - begin, 0, count);
  return s;
}

LinearProblem query_slice(const LinearProblem& p, int64_t count) {
  LinearProblem s = p;
  s.Nq = count;
  return s;
}

// Causal with bottom-right alignment for any Nq, Nk: query i sees keys j ≤ i + (Nk − Nq).
void causal_any_forward(TensorView out, ConstTensorView q, ConstTensorView k, ConstTensorView v, const LinearProblem& p,
                        int64_t chunk) {
  const int64_t offset = p.Nk - p.Nq;
  if (offset >= 0) {
    // Keys [0, offset) are visible to every query: they become the initial state.
    PackedState prefix(p);
    if (offset > 0) sum_keys(prefix, seq_slice(k, 0, offset), seq_slice(v, 0, offset), key_slice(p, 0, offset));
    causal_forward(out, q, seq_slice(k, offset, p.Nq), seq_slice(v, offset, p.Nq), key_slice(p, offset, p.Nq), chunk,
                   offset > 0 ? &prefix : nullptr, nullptr);
  } else {
    // Queries [0, −offset) see no key: 0 / (0 + eps) = 0.
    zero_tokens(out, -offset);
    causal_forward(seq_slice(out, -offset, p.Nk), seq_slice(q, -offset, p.Nk), k, v, query_slice(p, p.Nk), chunk,
                   nullptr, nullptr);
  }
}

void causal_any_backward(TensorView dq, TensorView dk, TensorView dv, ConstTensorView dout, ConstTensorView q,
                         ConstTensorView k, ConstTensorView v, const LinearProblem& p, int64_t chunk) {
  const int64_t offset = p.Nk - p.Nq;
  if (offset > 0) {
    const LinearProblem head = key_slice(p, 0, offset), tail = key_slice(p, offset, p.Nq);
    PackedState prefix(p), dprefix(p);
    sum_keys(prefix, seq_slice(k, 0, offset), seq_slice(v, 0, offset), head);
    causal_backward(dq, seq_slice(dk, offset, p.Nq), seq_slice(dv, offset, p.Nq), dout, q, seq_slice(k, offset, p.Nq),
                    seq_slice(v, offset, p.Nq), tail, chunk, &prefix, &dprefix);
    sum_keys_backward(seq_slice(dk, 0, offset), seq_slice(dv, 0, offset), seq_slice(k, 0, offset),
                      seq_slice(v, 0, offset), dprefix, head);
  } else if (offset < 0) {
    zero_tokens(dq, -offset);
    causal_backward(seq_slice(dq, -offset, p.Nk), dk, dv, seq_slice(dout, -offset, p.Nk), seq_slice(q, -offset, p.Nk),
                    k, v, query_slice(p, p.Nk), chunk, nullptr, nullptr);
  } else {
    causal_backward(dq, dk, dv, dout, q, k, v, p, chunk, nullptr, nullptr);
  }
}

// A packed call's checks beyond those of its unpacked options: cu_seqlens itself, and the causal
// chunk size, before the first sequence runs.
void check_packed(const char* op, const LinearAttentionOptions& options, const LinearProblem& p) {
  check_cu_seqlens(op, options.cu_seqlens, options.key_lengths, p.B, p.Nq, p.Nk);
  if (options.causal) check_chunk_size(op, options);
}

}  // namespace
}  // namespace detail

void linear_attention_forward(TensorView out, ConstTensorView q, ConstTensorView k, ConstTensorView v,
                              const LinearAttentionOptions& options) {
  const char* op = "linear_attention_forward";
  const LinearAttentionOptions one = detail::without_packing(options);
  const detail::LinearProblem p = detail::check_linear_forward(op, out, q, k, v, one);
  if (!options.cu_seqlens.empty()) {  // each packed sequence alone, over its slice of the tokens
    detail::check_packed(op, options, p);
    detail::for_each_sequence(options.cu_seqlens, [&](int64_t t, int64_t n) {
      using detail::seq_slice;
      linear_attention_forward(seq_slice(out, t, n), seq_slice(q, t, n), seq_slice(k, t, n), seq_slice(v, t, n), one);
    });
    return;
  }
  if (options.causal) {
    detail::check_chunk_size(op, options);
    detail::causal_any_forward(out, q, k, v, p, options.chunk_size);
    return;
  }
  detail::PackedState state(p);
  detail::sum_keys(state, k, v, p);
  detail::queries_forward(out, q, state, p);
}

void linear_attention_backward(TensorView dq, TensorView dk, TensorView dv, ConstTensorView dout, ConstTensorView q,
                               ConstTensorView k, ConstTensorView v, const LinearAttentionOptions& options) {
  const char* op = "linear_attention_backward";
  const LinearAttentionOptions one = detail::without_packing(options);
  const detail::LinearProblem p = detail::check_linear_backward(op, dq, dk, dv, dout, q, k, v, one);
  if (!options.cu_seqlens.empty()) {
    detail::check_packed(op, options, p);
    detail::for_each_sequence(options.cu_seqlens, [&](int64_t t, int64_t n) {
      using detail::seq_slice;
      linear_attention_backward(seq_slice(dq, t, n), seq_slice(dk, t, n), seq_slice(dv, t, n), seq_slice(dout, t, n),
                                seq_slice(q, t, n), seq_slice(k, t, n), seq_slice(v, t, n), one);
    });
    return;
  }
  if (options.causal) {
    detail::check_chunk_size(op, options);
    detail::causal_any_backward(dq, dk, dv, dout, q, k, v, p, options.chunk_size);
    return;
  }
  detail::PackedState state(p), grad(p);
  detail::sum_keys(state, k, v, p);
  detail::queries_backward(dq, grad, dout, q, state, p);
  detail::sum_keys_backward(dk, dv, k, v, grad, p);
}

}  // namespace linattn
