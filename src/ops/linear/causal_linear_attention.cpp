// Causal linear attention, chunkwise. Per head, chunks of C tokens in order; for the chunk's rows
//   num = φ(Q) S + mask(φ(Q) φ(K)ᵀ) V,  den = φ(Q) z + rowsum(mask(φ(Q) φ(K)ᵀ)) + eps,
// then S += φ(K)ᵀ V, z += Σ φ(K). The backward runs the chunks forward for dq (it needs S before
// each chunk) and backward for dk, dv (they need G = Σ_{i later} φ(q_i) dnum_iᵀ, g = Σ φ(q_i) dden_i).
// Work is split over (batch, head) only, so every head's arithmetic is the same for any thread count.
#include <algorithm>

#include "core/validate.hpp"
#include "kernels/triangle.hpp"
#include "ops/linear/linear_common.hpp"

namespace linattn {
namespace detail {
namespace {

// Scratch of one thread for chunks of up to C tokens.
struct ChunkScratch {
  int64_t C, Cp;
  FeatureScratch features;
  std::vector<float> phi_q, phi_k, val, g;  // [C, Mp], [C, Mp], [C, Ep], [C, Ep]
  const float* V = nullptr;                 // the chunk's values: val, or v's own rows (pitch ldv)
  int64_t ldv = 0;
  std::vector<float> num, P;  // [C, Ep], [C, Mp]
  std::vector<float> A, W;    // [C, Cp], backward only
  std::vector<float> T;       // transposes: [max(M, E), Cp] (was max(Cp, Mp) wide: 1 GB at M = 16384)
  // The forward's output product out = [φ(Q) | A] [S; V] in one pass: X: [C, Kp] holds φ(Q) in its
  // first Mp columns and A after them; SV: [Mp + C, Ep] holds the state S in its first M rows (the
  // state lives there in both directions), zero rows up to Mp, then the chunk's values.
  // SV and z come in `slots`, one per head that a thread advances in lockstep (see causal_forward).
  int64_t Kp, Mp, sv_size, slot = 0;
  std::vector<float> X, SVs;
  std::vector<float> zs, St;             // [slots, Mp], [E, Mp]
  std::vector<float> den, dden, rowvec;  // [C], [C], [Mp]
  // Backward, per slot: den and dden of every row from the forward sweep ([N] each), and the reverse
  // sweep's state G: [M, Ep], g: [Mp].
  int64_t N, G_size;
  std::vector<float> dens, ddens, Gs, gs;
  // forward: X for the output product; backward: A and W (each pass allocates only what it uses).
  ChunkScratch(const LinearProblem& p, int64_t chunk, bool forward, int64_t slots = 1)
      : C(chunk),
        Cp(kernels::padded(chunk)),
        features(p, chunk),
        phi_q(size_t(C * p.Mp)),
        phi_k(size_t(C * p.Mp)),
        val(size_t(C * p.Ep)),
        g(size_t(C * p.Ep)),
        num(size_t(C * p.Ep)),
        P(size_t(C * p.Mp)),
        A(forward ? 0 : size_t(C * Cp)),
        W(forward ? 0 : size_t(C * Cp)),
        T(size_t(std::max(p.M, p.E) * Cp)),
        Kp(p.Mp + Cp),
        Mp(p.Mp),
        sv_size((p.Mp + C) * p.Ep),
        X(forward ? size_t(C * Kp) : 0),
        SVs(size_t(slots * sv_size), 0.0f),
        zs(size_t(slots * p.Mp)),
        St(size_t(p.E * p.Mp)),
        den(size_t(C)),
        dden(size_t(C)),
        rowvec(size_t(p.Mp)),
        N(p.Nq),
        G_size(p.M * p.Ep),
        dens(forward ? 0 : size_t(slots * N)),
        ddens(forward ? 0 : size_t(slots * N)),
        Gs(forward ? 0 : size_t(slots * G_size)),
        gs(forward ? 0 : size_t(slots * p.Mp)) {}

  // [S; 0; V] of the current slot, and its state S: [M, Ep] and z: [Mp].
  float* SV() { return SVs.data() + slot * sv_size; }
  float* S() { return SV(); }
  float* z() { return zs.data() + slot * Mp; }
  float* den_all() { return dens.data() + slot * N; }
  float* dden_all() { return ddens.data() + slot * N; }
  float* G() { return Gs.data() + slot * G_size; }
  float* g_state() { return gs.data() + slot * Mp; }
  // S, z = the initial state of head bh, or 0.
  void start(const LinearProblem& p, const PackedState* initial, int64_t bh) {
    if (initial) {
      std::copy_n(initial->S_of(bh), p.M * p.Ep, S());
      std::copy_n(initial->z_of(bh), p.Mp, z());
    } else {
      std::fill_n(S(), p.M * p.Ep, 0.0f);
      std::fill_n(z(), p.Mp, 0.0f);
    }
  }
  // S += φ(K)ᵀ V, z += Σ φ(K) over the chunk's n tokens (prefetching `ahead` meanwhile).
  void advance(const LinearProblem& p, int64_t n, const kernels::RowsAhead& ahead) {
    kernels::gemm({S(), p.Ep, p.M, p.Ep}, {phi_k.data(), 1, p.Mp}, {V, ldv, n, p.Ep},
                  {.accumulate = true, .ahead = &ahead});
    kernels::add_weighted_rows(z(), phi_k.data(), p.Mp, nullptr, n, p.M);
  }
  // φ(Q), φ(K), V of tokens [t, t + n) of head (b, h); keys from `valid` on are 0.
  void load(const LinearProblem& p, ConstTensorView q, ConstTensorView k, ConstTensorView v, int64_t b, int64_t h,
            int64_t t, int64_t n, int64_t valid) {
    load_features(phi_q.data(), features, p, FeatureRole::query, head_rows(q, b, h), t, n, n);
    load_features(phi_k.data(), features, p, FeatureRole::key, head_rows(k, b, h), t, n, valid);
    // V's rows serve in place when they can and no key of the chunk is past the key length.
    if (valid == n && rows_in_place(v)) {
      V = head_rows(v, b, h).at(t), ldv = v.stride[1];
    } else {
      kernels::pack_rows({val.data(), p.Ep, n, p.E}, head_rows(v, b, h), t, valid);
      V = val.data(), ldv = p.Ep;
    }
  }
};

// The intra-chunk products only need one triangle of the chunk × chunk matrix: they run in strips
// of kStrip rows, each only as wide (or as deep) as the triangle reaches, which skips ~40% of the
// multiply-adds of a 64-token chunk.
constexpr int64_t kStrip = kernels::kPad;

// x: [n, width] (pitch ld) = 0 where the column is later than the row (j > i), for lower = true;
// where it is earlier (j < i) for lower = false.
void mask_triangle(float* x, int64_t ld, int64_t width, int64_t n, bool lower) {
  for (int64_t i = 0; i < n; ++i) {
    float* row = x + i * ld;
    if (lower)
      std::fill(row + i + 1, row + width, 0.0f);
    else
      std::fill(row, row + i, 0.0f);
  }
}

// A: [n, Cp] (pitch lda) = mask(X Yᵀ) (lower: j ≤ i; upper: j ≥ i), X, Y: [n, depth] (pitches ldx,
// ldy), via T = Yᵀ ([depth, Cp]).
void masked_product(float* A, int64_t lda, int64_t Cp, const float* X, int64_t ldx, const float* Y, int64_t ldy,
                    int64_t n, int64_t depth, float* T, bool lower) {
  const int64_t np = kernels::padded(n);
  kernels::transpose(T, Cp, Y, ldy, n, depth);
  for (int64_t r = 0; r < depth; ++r) std::fill(T + r * Cp + n, T + r * Cp + np, 0.0f);
  for (int64_t r = 0; r < n; r += kStrip) {
    const int64_t rows = std::min(kStrip, n - r);
    // Columns [c0, c1) hold the strip's part of the triangle; kStrip is a multiple of kPad. The
    // columns left out are exactly those mask_triangle zeroes below.
    const int64_t c0 = lower ? 0 : r, c1 = lower ? kernels::padded(r + rows) : np;
    kernels::gemm({A + r * lda + c0, lda, rows, c1 - c0}, {X + r * ldx, ldx, 1}, {T + c0, Cp, depth, c1 - c0});
  }
  mask_triangle(A, lda, Cp, n, lower);
}

// C: [n, cols] (+)= A B with A: [n, n] triangular (lower: A[i, j] = 0 for j > i; upper: for j < i), B: [n, cols];
// each row only as deep as its side of the diagonal, so that no masked 0 meets a NaN row of B.
void triangular_product(float* C, int64_t ldc, const float* A, int64_t lda, const float* B, int64_t ldb, int64_t n,
                        int64_t cols, bool lower, bool accumulate) {
  for (int64_t r = 0; r < n; r += kStrip) {
    const int64_t rows = std::min(kStrip, n - r);
    const int64_t k0 = lower ? 0 : r, k1 = lower ? r + rows : n;
    kernels::triangle_strip({C + r * ldc, ldc, rows, cols}, {A + r * lda + k0, lda, 1},
                            {B + k0 * ldb, ldb, k1 - k0, cols}, kernels::StripBounds(lower ? r + 1 : 0, rows), lower,
                            lower ? rows - 1 : 0, {.accumulate = accumulate});
  }
}

}  // namespace

// What a chunk prefetches: the rows of head (b, h) from token n0, or (dense: [B, N, H, D] rows in
// lockstep) the h-th part of the dense stretch of all heads' rows from n0. Nothing past either end.
struct ChunkAhead {
  int64_t b, h, n0;
  bool dense;
  kernels::RowsAhead of(ConstTensorView x, ConstTensorView y, bool for_write, int64_t C) const {
    if (n0 < 0) return {};
    return dense ? kernels::dense_part_ahead(x, y, for_write, b, n0, C, h)
                 : kernels::head_rows_ahead(x, y, for_write, b, h, n0, C);
  }
};

// The chunk starts of one sweep over N tokens, forward or in reverse; past the end: −1 or ≥ N.
struct Sweep {
  int64_t N, C;
  bool reverse;
  int64_t begin() const { return reverse ? (N - 1) / C * C : 0; }
  int64_t next(int64_t t) const { return reverse ? t - C : t + C; }
  bool valid(int64_t t) const { return t >= 0 && t < N; }
};

// Runs chunk(bh, t, ahead) over every chunk of a sweep for the heads [g0, g1) of one batch, in
// lockstep: every head's chunk t, then chunk t + C. ahead names the rows to fetch meanwhile: the next
// item's, or with dense rows the head's part of the next chunk of all heads. start(bh) and finish(bh)
// run before and after, with w's slot set to the head.
template <class Start, class Chunk, class Finish>
void sweep_heads(ChunkScratch& w, const LinearProblem& p, int64_t g0, int64_t g1, const Sweep& sweep, bool dense,
                 Start start, Chunk chunk, Finish finish) {
  for (int64_t bh = g0; bh < g1; ++bh) w.slot = bh - g0, start(bh);
  for (int64_t t = sweep.begin(); sweep.valid(t); t = sweep.next(t))
    for (int64_t bh = g0; bh < g1; ++bh) {
      w.slot = bh - g0;
      const int64_t next = bh + 1 < g1 ? bh + 1 : g0, nt = bh + 1 < g1 ? t : sweep.next(t);
      chunk(
          bh, t,
          dense ? ChunkAhead{bh / p.H, bh % p.H, sweep.next(t), true} : ChunkAhead{next / p.H, next % p.H, nt, false});
    }
  for (int64_t bh = g0; bh < g1; ++bh) w.slot = bh - g0, finish(bh);
}

// Splits the heads over the threads into groups for sweep_heads: with each head's rows one stretch of
// memory ([B, H, N, D]) every head is its own group, taken one at a time (a head runs to its end
// before the next); otherwise ([B, N, H, D]) a thread takes a contiguous share of the heads, grouped by
// batch, so that a group reads whole rows in memory order. Each head's arithmetic is the same either
// way. run(g0, g1) once per group.
template <class Run>
void share_heads(int64_t BH, int64_t H, bool lockstep, Run run) {
  if (!lockstep) {
#pragma omp for schedule(dynamic, 1)
    for (int64_t bh = 0; bh < BH; ++bh) run(bh, bh + 1);
    return;
  }
  const auto [first, last] = thread_share(BH);
  for (int64_t g0 = first; g0 < last;) {
    const int64_t g1 = std::min(last, (g0 / H + 1) * H);
    run(g0, g1);
    g0 = g1;
  }
}

// One chunk of the forward: tokens [t, t + C) of head bh, whose state is w's current slot; then the
// state moves past the chunk, while the rows `ahead` names are fetched.
void forward_chunk(ChunkScratch& w, TensorView out, ConstTensorView q, ConstTensorView k, ConstTensorView v,
                   const LinearProblem& p, int64_t bh, int64_t t, const ChunkAhead& ahead) {
  const int64_t b = bh / p.H, h = bh % p.H, C = w.C, n = std::min(C, p.Nq - t);
  const int64_t valid = std::clamp<int64_t>(p.lengths[b] - t, 0, n);
  w.load(p, q, k, v, b, h, t, n, valid);
  // The chunk's values below the state: SV = [S; 0; V].
  float* sv_v = w.SV() + p.Mp * p.Ep;
  for (int64_t r = 0; r < n; ++r) std::copy_n(w.V + r * w.ldv, p.Ep, sv_v + r * p.Ep);
  w.V = sv_v, w.ldv = p.Ep;
  // X = [φ(Q) | A], A = mask(φ(Q) φ(K)ᵀ)
  float* X = w.X.data();
  float* A = X + p.Mp;
  const int64_t Kp = w.Kp;
  masked_product(A, Kp, w.Cp, w.phi_q.data(), p.Mp, w.phi_k.data(), p.Mp, n, p.M, w.T.data(), true);
  for (int64_t r = 0; r < n; ++r) std::copy_n(w.phi_q.data() + r * p.Mp, p.Mp, X + r * Kp);
  // den = φ(Q) z + rowsum(mask(φ(Q) φ(K)ᵀ)) + eps; out = (φ(Q) S + A V) / den, the division applied by
  // the output product's store (one per row).
  float* scale = nullptr;
  if (p.normalize) {
    kernels::row_dots(w.den.data(), w.phi_q.data(), p.Mp, w.z(), n, p.M);
    kernels::row_sums(w.dden.data(), A, Kp, n, n);
    for (int64_t r = 0; r < n; ++r) w.den[r] = 1.0f / (w.den[r] + w.dden[r] + p.eps);
    scale = w.den.data();
  }
  // out = [φ(Q) | A] [S; 0; V], one product written once, in strips of kStrip rows each only as deep as
  // the triangle reaches; in place when out's rows allow it. The next item's rows are fetched during
  // the two largest products: q and out during the last strip, k and v during the state update.
  const bool direct = rows_in_place(out);
  float* o = direct ? head_rows(out, b, h).at(t) : w.num.data();
  const int64_t ldo = direct ? out.stride[1] : p.Ep;
  const kernels::RowsAhead next_q = ahead.of(q, out, true, C);
  for (int64_t r = 0; r < n; r += kStrip) {
    const int64_t rows = std::min(kStrip, n - r);
    // Row t reads the state and V's rows up to t only: a NaN or Inf at a later token stays out of it.
    kernels::triangle_strip({o + r * ldo, ldo, rows, p.Ep}, {X + r * Kp, Kp, 1}, {w.SV(), p.Ep, p.Mp + r + rows, p.Ep},
                            kernels::StripBounds(p.Mp + r + 1, rows), true, rows - 1,
                            {.row_scale = scale ? scale + r : nullptr, .ahead = r + kStrip >= n ? &next_q : nullptr});
  }
  if (!direct) kernels::unpack_rows(head_rows(out, b, h), t, {w.num.data(), p.Ep, n, p.E}, n);
  // S += φ(K)ᵀ V, z += Σ φ(K)
  w.advance(p, n, ahead.of(k, v, false, C));
}

void causal_forward(TensorView out, ConstTensorView q, ConstTensorView k, ConstTensorView v, const LinearProblem& p,
                    int64_t chunk, const PackedState* initial, PackedState* final_state) {
  const int64_t N = p.Nq, BH = p.B * p.H, C = std::clamp<int64_t>(chunk, 1, std::min(N, kMaxChunk));
  // With each head's rows one stretch of memory ([B, H, N, D]) a head runs to its end before the next;
  // otherwise ([B, N, H, D]) a batch's heads advance in lockstep, reading whole rows in memory order.
  const bool lockstep = !heads_outer(q);
  const bool dense = lockstep && kernels::tokens_dense(q) && kernels::tokens_dense(k) && kernels::tokens_dense(v) &&
                     kernels::tokens_dense(out);
#pragma omp parallel
  {
    ChunkScratch w(p, C, true, lockstep ? p.H : 1);
    share_heads(BH, p.H, lockstep, [&](int64_t g0, int64_t g1) {
      sweep_heads(
          w, p, g0, g1, Sweep{N, C, false}, dense, [&](int64_t bh) { w.start(p, initial, bh); },
          [&](int64_t bh, int64_t t, const ChunkAhead& ahead) { forward_chunk(w, out, q, k, v, p, bh, t, ahead); },
          [&](int64_t bh) {
            if (!final_state) return;
            std::copy_n(w.S(), p.M * p.Ep, final_state->S_of(bh));
            std::copy_n(w.z(), p.Mp, final_state->z_of(bh));
          });
    });
  }
}

// One chunk of the backward's forward sweep, with S_i, z_i the state that row i sees:
//   P_i = S_i dout_i, dden_i = −φ(q_i)·P_i / den_i², dφ(q_i) = P_i / den_i + z_i dden_i;
// den and dden are kept per row for the reverse sweep; then the state moves past the chunk.
void backward_chunk_forward_sweep(ChunkScratch& w, TensorView dq, ConstTensorView dout, ConstTensorView q,
                                  ConstTensorView k, ConstTensorView v, const LinearProblem& p, int64_t bh, int64_t t,
                                  const ChunkAhead& ahead) {
  const int64_t b = bh / p.H, h = bh % p.H, n = std::min(w.C, p.Nq - t);
  const int64_t valid = std::clamp<int64_t>(p.lengths[b] - t, 0, n);
  float* S = w.S();
  float* z = w.z();
  w.load(p, q, k, v, b, h, t, n, valid);
  kernels::pack_rows({w.g.data(), p.Ep, n, p.E}, head_rows(dout, b, h), t, n);
  // P = mask(dout Vᵀ) φ(K) + dout Sᵀ (the triangle first: overwriting, it needs no per-row ranges); meanwhile
  // the next item's q and k rows are fetched
  masked_product(w.W.data(), w.Cp, w.Cp, w.g.data(), p.Ep, w.V, w.ldv, n, p.E, w.T.data(), true);
  triangular_product(w.P.data(), p.Mp, w.W.data(), w.Cp, w.phi_k.data(), p.Mp, n, p.Mp, true, false);
  kernels::transpose(w.St.data(), p.Mp, S, p.Ep, p.M, p.E);
  const kernels::RowsAhead next_qk = ahead.of(q, k, false, w.C);
  kernels::gemm({w.P.data(), p.Mp, n, p.Mp}, {w.g.data(), p.Ep, 1}, {w.St.data(), p.Mp, p.E, p.Mp},
                {.accumulate = true, .ahead = &next_qk});
  if (p.normalize) {
    masked_product(w.A.data(), w.Cp, w.Cp, w.phi_q.data(), p.Mp, w.phi_k.data(), p.Mp, n, p.M, w.T.data(), true);
    kernels::row_dots(w.den.data(), w.phi_q.data(), p.Mp, z, n, p.M);
    kernels::row_sums(w.dden.data(), w.A.data(), w.Cp, n, n);
    std::copy_n(z, p.Mp, w.rowvec.data());  // z_i: z plus the chunk's keys up to i
    for (int64_t r = 0; r < n; ++r) {
      const float d = w.den[r] + w.dden[r] + p.eps;
      float* Pr = w.P.data() + r * p.Mp;
      const float* phr = w.phi_q.data() + r * p.Mp;
      const float* pkr = w.phi_k.data() + r * p.Mp;
      for (int64_t m = 0; m < p.M; ++m) w.rowvec[m] += pkr[m];
      const float dd = kernels::normaliser_backward_row(Pr, phr, w.rowvec.data(), d, p.M);
      w.den_all()[t + r] = d;
      w.dden_all()[t + r] = dd;
    }
  }
  store_feature_grad(head_rows(dq, b, h), w.features, p, FeatureRole::query, w.P.data(), w.phi_q.data(),
                     head_rows(q, b, h), t, n, n);
  w.advance(p, n, ahead.of(v, dout, false, w.C));
}

// One chunk of the reverse sweep, G = Σ_{later i} φ(q_i) dnum_iᵀ, g = Σ_{later i} φ(q_i) dden_i:
//   dφ(k_j) = G v_j + g + Σ_{i ≥ j in chunk} (dnum_i·v_j + dden_i) φ(q_i),
//   dv_j = Gᵀ φ(k_j) + Σ_{i ≥ j in chunk} (φ(q_i)·φ(k_j)) dnum_i;
// then G and g take in the chunk's queries.
void backward_chunk_reverse_sweep(ChunkScratch& w, TensorView dk, TensorView dv, ConstTensorView dout,
                                  ConstTensorView q, ConstTensorView k, ConstTensorView v, const LinearProblem& p,
                                  int64_t bh, int64_t t, const ChunkAhead& ahead) {
  const int64_t b = bh / p.H, h = bh % p.H, n = std::min(w.C, p.Nq - t);
  const int64_t valid = std::clamp<int64_t>(p.lengths[b] - t, 0, n);
  float* G = w.G();
  float* g = w.g_state();
  // The next item's rows, fetched during the two products with G.
  const kernels::RowsAhead next_qk = ahead.of(q, k, false, w.C), next_vg = ahead.of(v, dout, false, w.C);
  w.load(p, q, k, v, b, h, t, n, valid);
  kernels::pack_rows({w.g.data(), p.Ep, n, p.E}, head_rows(dout, b, h), t, n);
  float* dden = w.dden.data();
  if (p.normalize) {
    for (int64_t r = 0; r < n; ++r) {
      const float inv = 1.0f / w.den_all()[t + r];
      for (int64_t e = 0; e < p.E; ++e) w.g[r * p.Ep + e] *= inv;
      dden[r] = w.dden_all()[t + r];
    }
  }
  // dφ(K) = (mask_{i ≥ j}(V dnumᵀ) + dden) φ(Q) + g + V Gᵀ (the triangle first: overwriting, it needs no
  // per-row ranges)
  masked_product(w.W.data(), w.Cp, w.Cp, w.V, w.ldv, w.g.data(), p.Ep, n, p.E, w.T.data(), false);
  if (p.normalize)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t i = j; i < n; ++i) w.W[j * w.Cp + i] += dden[i];
  triangular_product(w.P.data(), p.Mp, w.W.data(), w.Cp, w.phi_q.data(), p.Mp, n, p.Mp, false, false);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t m = 0; m < p.Mp; ++m) w.P[r * p.Mp + m] += g[m];
  kernels::transpose(w.St.data(), p.Mp, G, p.Ep, p.M, p.E);
  kernels::gemm({w.P.data(), p.Mp, n, p.Mp}, {w.V, w.ldv, 1}, {w.St.data(), p.Mp, p.E, p.Mp},
                {.accumulate = true, .ahead = &next_qk});
  // dV = mask_{i ≥ j}(φ(K) φ(Q)ᵀ) dnum + φ(K) G
  masked_product(w.A.data(), w.Cp, w.Cp, w.phi_k.data(), p.Mp, w.phi_q.data(), p.Mp, n, p.M, w.T.data(), false);
  triangular_product(w.num.data(), p.Ep, w.A.data(), w.Cp, w.g.data(), p.Ep, n, p.Ep, false, false);
  kernels::gemm({w.num.data(), p.Ep, n, p.Ep}, {w.phi_k.data(), p.Mp, 1}, {G, p.Ep, p.M, p.Ep},
                {.accumulate = true, .ahead = &next_vg});
  store_feature_grad(head_rows(dk, b, h), w.features, p, FeatureRole::key, w.P.data(), w.phi_k.data(),
                     head_rows(k, b, h), t, n, valid);
  kernels::unpack_rows(head_rows(dv, b, h), t, {w.num.data(), p.Ep, n, p.E}, valid);
  // G += φ(Q)ᵀ dnum, g += Σ dden_i φ(q_i)
  kernels::gemm({G, p.Ep, p.M, p.Ep}, {w.phi_q.data(), 1, p.Mp}, {w.g.data(), p.Ep, n, p.Ep}, {.accumulate = true});
  if (p.normalize) kernels::add_weighted_rows(g, w.phi_q.data(), p.Mp, dden, n, p.M);
}

void causal_backward(TensorView dq, TensorView dk, TensorView dv, ConstTensorView dout, ConstTensorView q,
                     ConstTensorView k, ConstTensorView v, const LinearProblem& p, int64_t chunk,
                     const PackedState* initial, PackedState* dinitial) {
  const int64_t N = p.Nq, BH = p.B * p.H, C = std::clamp<int64_t>(chunk, 1, std::min(N, kMaxChunk));
  const bool lockstep = !heads_outer(q);  // as in causal_forward
  const bool dense = lockstep && kernels::tokens_dense(q) && kernels::tokens_dense(k) && kernels::tokens_dense(v) &&
                     kernels::tokens_dense(dout);
#pragma omp parallel
  {
    ChunkScratch w(p, C, false, lockstep ? p.H : 1);
    share_heads(BH, p.H, lockstep, [&](int64_t g0, int64_t g1) {
      // Forward sweep for dq, from the initial state; then the reverse sweep for dk, dv from G = 0, g = 0.
      sweep_heads(
          w, p, g0, g1, Sweep{N, C, false}, dense, [&](int64_t bh) { w.start(p, initial, bh); },
          [&](int64_t bh, int64_t t, const ChunkAhead& ahead) {
            backward_chunk_forward_sweep(w, dq, dout, q, k, v, p, bh, t, ahead);
          },
          [](int64_t) {});
      sweep_heads(
          w, p, g0, g1, Sweep{N, C, true}, dense,
          [&](int64_t) {
            std::fill_n(w.G(), p.M * p.Ep, 0.0f);
            std::fill_n(w.g_state(), p.Mp, 0.0f);
          },
          [&](int64_t bh, int64_t t, const ChunkAhead& ahead) {
            backward_chunk_reverse_sweep(w, dk, dv, dout, q, k, v, p, bh, t, ahead);
          },
          [&](int64_t bh) {
            if (!dinitial) return;
            std::copy_n(w.G(), p.M * p.Ep, dinitial->S_of(bh));
            std::copy_n(w.g_state(), p.Mp, dinitial->z_of(bh));
          });
    });
  }
}

}  // namespace detail

namespace {

detail::LinearProblem check_causal(const char* op, const LinearAttentionOptions& options, detail::LinearProblem p,
                                   const RecurrentState* initial) {
  if (p.Nq != p.Nk)
    detail::fail(op, "k.extent[1] (sequence) is " + std::to_string(p.Nk) + ", expected " + std::to_string(p.Nq) +
                         " (q's sequence length; causal_linear_attention needs Nq == Nk, "
                         "linear_attention_forward with causal = true takes Nq ≠ Nk)");
  detail::check_chunk_size(op, options);
  if (initial) detail::check_state(op, "initial", *initial, p);
  return p;
}

}  // namespace

void causal_linear_attention_forward(TensorView out, ConstTensorView q, ConstTensorView k, ConstTensorView v,
                                     const LinearAttentionOptions& options, const RecurrentState* initial,
                                     RecurrentState* final_state) {
  const char* op = "causal_linear_attention_forward";
  // final_state may be initial itself (the state carried on in place): then it is one input.
  const auto outputs =
      detail::state_regions(final_state == initial ? nullptr : final_state, "final_state.S()", "final_state.z()");
  const auto inputs = detail::state_regions(initial, "initial.S()", "initial.z()");
  const detail::LinearProblem p =
      check_causal(op, options, detail::check_linear_forward(op, out, q, k, v, options, outputs, inputs), initial);
  const detail::PackedState start = initial ? detail::pack_state(*initial, p) : detail::PackedState();
  detail::PackedState end = final_state ? detail::PackedState(p) : detail::PackedState();
  detail::causal_forward(out, q, k, v, p, options.chunk_size, initial ? &start : nullptr, final_state ? &end : nullptr);
  if (final_state) {
    // Position: tokens consumed; with ragged key lengths, the longest (see docs/linear-attention.md).
    const int64_t consumed = *std::max_element(p.lengths.begin(), p.lengths.end());
    const int64_t position = (initial ? initial->position() : 0) + consumed;
    detail::unpack_state(*final_state, end, p, position);
  }
}

void causal_linear_attention_backward(TensorView dq, TensorView dk, TensorView dv, ConstTensorView dout,
                                      ConstTensorView q, ConstTensorView k, ConstTensorView v,
                                      const LinearAttentionOptions& options, const RecurrentState* initial,
                                      RecurrentState* dinitial) {
  const char* op = "causal_linear_attention_backward";
  const auto outputs = detail::state_regions(dinitial, "dinitial.S()", "dinitial.z()");
  const auto inputs = detail::state_regions(initial, "initial.S()", "initial.z()");
  const detail::LinearProblem p = check_causal(
      op, options, detail::check_linear_backward(op, dq, dk, dv, dout, q, k, v, options, outputs, inputs), initial);
  const detail::PackedState start = initial ? detail::pack_state(*initial, p) : detail::PackedState();
  detail::PackedState grad = dinitial ? detail::PackedState(p) : detail::PackedState();
  detail::causal_backward(dq, dk, dv, dout, q, k, v, p, options.chunk_size, initial ? &start : nullptr,
                          dinitial ? &grad : nullptr);
  if (dinitial) detail::unpack_state(*dinitial, grad, p, initial ? initial->position() : 0);
}

}  // namespace linattn
