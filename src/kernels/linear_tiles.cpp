// Tile kernels of linear attention (see linear_tiles.hpp), one Highway source for every target.
#include <algorithm>
#include <cmath>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/linear_tiles.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
// Must follow foreach_target.h.
#include "hwy/highway.h"
#include "kernels/feature_map_ops-inl.h"
#include "kernels/linear_tiles.hpp"

HWY_BEFORE_NAMESPACE();
namespace linattn::kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using D = hn::ScalableTag<float>;
using V = hn::Vec<D>;

// Register block: kRows rows × kVecs vectors of accumulators (24 of 32 zmm on AVX-512, 12 of 16 on AVX2).
constexpr int kRows = 6;
constexpr int kVecs = HWY_LANES(float) >= 16 ? 4 : 2;

struct Identity {
  HWY_INLINE V operator()(D, V x, V) const { return x; }
};

// φ of vector v: column c of row x, through a buffer at the ragged end of a row (nothing past the row
// is read; the lanes past it are 0).
template <class F>
HWY_INLINE V FeatureVector(D d, const F& f, const float* x, int64_t c, int64_t cols) {
  const int64_t L = int64_t(hn::Lanes(d));
  if (c + L <= cols) return f(d, hn::LoadU(d, x + c), hn::Zero(d));
  HWY_ALIGN float buf[HWY_LANES(float)] = {};
  const int64_t n = std::max<int64_t>(0, cols - c);
  std::copy_n(x + c, n, buf);
  return hn::IfThenElseZero(hn::FirstN(d, size_t(n)), f(d, hn::Load(d, buf), hn::Zero(d)));
}

// FeatureTile columns [c0, c0 + NV·L) with the map F: the group's column sums stay in registers across
// the rows, and its NV vectors are independent of each other.
template <int NV, class F>
HWY_INLINE void FeatureColumns(const FeatureTile& t, int64_t c0) {
  const D d;
  const F f;
  const int64_t L = int64_t(hn::Lanes(d));
  V sum[NV];
  for (int j = 0; j < NV; ++j) sum[j] = t.sum ? hn::LoadU(d, t.sum + c0 + j * L) : hn::Zero(d);
  for (int64_t r = 0; r < t.rows; ++r) {
    const float* x = t.x + r * t.ldx;
    float* phi = t.phi + r * t.ldp;
    V y[NV];
    for (int j = 0; j < NV; ++j) y[j] = FeatureVector(d, f, x, c0 + j * L, t.cols);
    for (int j = 0; j < NV; ++j) {
      hn::StoreU(y[j], d, phi + c0 + j * L);
      sum[j] = hn::Add(sum[j], y[j]);
    }
    if (t.dots) {
      V dot = hn::Zero(d);
      for (int j = 0; j < NV; ++j) dot = hn::MulAdd(y[j], hn::LoadU(d, t.dot + c0 + j * L), dot);
      const float part = hn::GetLane(hn::SumOfLanes(d, dot));
      t.dots[r] = c0 == 0 ? part : t.dots[r] + part;
    }
  }
  if (t.sum)
    for (int j = 0; j < NV; ++j) hn::StoreU(sum[j], d, t.sum + c0 + j * L);
}

// FeatureTile with the map F, in groups of up to kVecs vector columns.
template <class F>
void FeatureTileWith(const FeatureTile& t) {
  const D d;
  const int64_t L = int64_t(hn::Lanes(d));
  int64_t c0 = 0;
  for (; c0 + kVecs * L <= t.ldp; c0 += kVecs * L) FeatureColumns<kVecs, F>(t, c0);
  switch ((t.ldp - c0) / L) {
    case 1:
      FeatureColumns<1, F>(t, c0);
      break;
    case 2:
      FeatureColumns<2, F>(t, c0);
      break;
    case 3:
      FeatureColumns<3, F>(t, c0);
      break;
    default:
      break;
  }
}

void FeatureTileNow(const FeatureTile& t) {
  switch (t.map) {
    case TileMap::elu:
      return FeatureTileWith<EluForward>(t);
    case TileMap::relu:
      return FeatureTileWith<ReluForward>(t);
    default:
      return FeatureTileWith<Identity>(t);
  }
}

// The cache lines of a RowsAhead, one per Tick.
class Prefetcher {
 public:
  explicit Prefetcher(const RowsAhead* ahead) {
    if (!ahead || !ahead->rows[0] || ahead->count <= 0) return;
    ahead_ = ahead;
    Start(0);
  }
  HWY_INLINE void Tick() {
    if (rows_left_ == 0) return;
    if (write_)
      __builtin_prefetch(row_ + offset_, 1, 2);
    else
      __builtin_prefetch(row_ + offset_, 0, 2);
    offset_ += 64;
    if (offset_ < row_bytes_) return;
    offset_ = 0, row_ += pitch_;
    if (--rows_left_ == 0 && region_ == 0 && ahead_->rows[1]) Start(1);
  }

 private:
  void Start(int region) {
    region_ = region;
    row_ = reinterpret_cast<const char*>(ahead_->rows[region]);
    pitch_ = ahead_->ld[region] * int64_t(sizeof(float));
    write_ = ahead_->write[region];
    row_bytes_ = ahead_->cols[region] * int64_t(sizeof(float));
    rows_left_ = ahead_->count, offset_ = 0;
  }
  const RowsAhead* ahead_ = nullptr;
  const char* row_ = nullptr;
  int64_t row_bytes_ = 0, pitch_ = 0, rows_left_ = 0, offset_ = 0;
  int region_ = 0;
  bool write_ = false;
};

// c[0:R, 0:NV·L] (+)= diag(scale) · a(0:R, 0:depth) · b[0:depth, 0:NV·L]; the accumulators stay in
// registers; one prefetch per depth step.
template <int R, int NV, bool kAcc>
HWY_INLINE void GemmBlock(float* HWY_RESTRICT c, int64_t ldc, const float* HWY_RESTRICT a, int64_t a_rs, int64_t a_ks,
                          const float* HWY_RESTRICT b, int64_t ldb, int64_t depth, const float* HWY_RESTRICT scale,
                          Prefetcher& prefetch) {
  const D d;
  const int64_t L = int64_t(hn::Lanes(d));
  V acc[R][NV];
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < NV; ++j) acc[r][j] = hn::Zero(d);
  for (int64_t k = 0; k < depth; ++k) {
    const float* bk = b + k * ldb;
    const float* ak = a + k * a_ks;
    V bv[NV];
    for (int j = 0; j < NV; ++j) bv[j] = hn::LoadU(d, bk + j * L);
    for (int r = 0; r < R; ++r) {
      const V av = hn::Set(d, ak[r * a_rs]);
      for (int j = 0; j < NV; ++j) acc[r][j] = hn::MulAdd(av, bv[j], acc[r][j]);
    }
    prefetch.Tick();
  }
  for (int r = 0; r < R; ++r) {
    const V sr = scale ? hn::Set(d, scale[r]) : hn::Set(d, 1.0f);
    for (int j = 0; j < NV; ++j) {
      float* cr = c + r * ldc + j * L;
      const V sum = scale ? hn::Mul(acc[r][j], sr) : acc[r][j];
      hn::StoreU(kAcc ? hn::Add(hn::LoadU(d, cr), sum) : sum, d, cr);
    }
  }
}

template <int NV, bool kAcc>
HWY_INLINE void GemmColumns(float* c, int64_t ldc, const float* a, int64_t a_rs, int64_t a_ks, const float* b,
                            int64_t ldb, int64_t rows, int64_t depth, const float* scale, Prefetcher& prefetch) {
  int64_t r = 0;
  for (; r + kRows <= rows; r += kRows)
    GemmBlock<kRows, NV, kAcc>(c + r * ldc, ldc, a + r * a_rs, a_rs, a_ks, b, ldb, depth, scale ? scale + r : nullptr,
                               prefetch);
  float* cr = c + r * ldc;
  const float* ar = a + r * a_rs;
  const float* sr = scale ? scale + r : nullptr;
  switch (rows - r) {
    case 1:
      GemmBlock<1, NV, kAcc>(cr, ldc, ar, a_rs, a_ks, b, ldb, depth, sr, prefetch);
      break;
    case 2:
      GemmBlock<2, NV, kAcc>(cr, ldc, ar, a_rs, a_ks, b, ldb, depth, sr, prefetch);
      break;
    case 3:
      GemmBlock<3, NV, kAcc>(cr, ldc, ar, a_rs, a_ks, b, ldb, depth, sr, prefetch);
      break;
    case 4:
      GemmBlock<4, NV, kAcc>(cr, ldc, ar, a_rs, a_ks, b, ldb, depth, sr, prefetch);
      break;
    case 5:
      GemmBlock<5, NV, kAcc>(cr, ldc, ar, a_rs, a_ks, b, ldb, depth, sr, prefetch);
      break;
    default:
      break;
  }
}

template <bool kAcc>
HWY_INLINE void Gemm(float* c, int64_t ldc, const float* a, int64_t a_rs, int64_t a_ks, const float* b, int64_t ldb,
                     int64_t rows, int64_t depth, int64_t cols, const float* scale, const RowsAhead* ahead) {
  const D d;
  const int64_t L = int64_t(hn::Lanes(d));
  Prefetcher prefetch(ahead);
  int64_t col = 0;
  for (; col + kVecs * L <= cols; col += kVecs * L)
    GemmColumns<kVecs, kAcc>(c + col, ldc, a, a_rs, a_ks, b + col, ldb, rows, depth, scale, prefetch);
  switch ((cols - col) / L) {
    case 1:
      GemmColumns<1, kAcc>(c + col, ldc, a, a_rs, a_ks, b + col, ldb, rows, depth, scale, prefetch);
      break;
    case 2:
      GemmColumns<2, kAcc>(c + col, ldc, a, a_rs, a_ks, b + col, ldb, rows, depth, scale, prefetch);
      break;
    case 3:
      GemmColumns<3, kAcc>(c + col, ldc, a, a_rs, a_ks, b + col, ldb, rows, depth, scale, prefetch);
      break;
    default:
      break;
  }
}

void GemmAcc(float* c, int64_t ldc, const float* a, int64_t a_rs, int64_t a_ks, const float* b, int64_t ldb,
             int64_t rows, int64_t depth, int64_t cols, const RowsAhead* ahead) {
  Gemm<true>(c, ldc, a, a_rs, a_ks, b, ldb, rows, depth, cols, nullptr, ahead);
}
void GemmSet(float* c, int64_t ldc, const float* a, int64_t a_rs, int64_t a_ks, const float* b, int64_t ldb,
             int64_t rows, int64_t depth, int64_t cols, const float* row_scale, const RowsAhead* ahead) {
  Gemm<false>(c, ldc, a, a_rs, a_ks, b, ldb, rows, depth, cols, row_scale, ahead);
}

// Σ_k a[k]·x[k] (x null: Σ_k a[k]) in a fixed order: lanes, then the scalar tail.
HWY_INLINE float Dot(const float* HWY_RESTRICT a, const float* HWY_RESTRICT x, int64_t n) {
  const D d;
  const int64_t L = int64_t(hn::Lanes(d));
  V acc = hn::Zero(d);
  int64_t k = 0;
  if (x) {
    for (; k + L <= n; k += L) acc = hn::MulAdd(hn::LoadU(d, a + k), hn::LoadU(d, x + k), acc);
  } else {
    for (; k + L <= n; k += L) acc = hn::Add(hn::LoadU(d, a + k), acc);
  }
  float sum = hn::GetLane(hn::SumOfLanes(d, acc));
  for (; k < n; ++k) sum += x ? a[k] * x[k] : a[k];
  return sum;
}

void RowDots(float* out, const float* a, int64_t lda, const float* x, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) out[r] = Dot(a + r * lda, x, cols);
}

void RowSums(float* out, const float* a, int64_t lda, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) out[r] = Dot(a + r * lda, nullptr, cols);
}

void AddWeightedRows(float* HWY_RESTRICT y, const float* HWY_RESTRICT a, int64_t lda, const float* HWY_RESTRICT w,
                     int64_t rows, int64_t cols) {
  const D d;
  const int64_t L = int64_t(hn::Lanes(d));
  int64_t k = 0;
  for (; k + L <= cols; k += L) {
    V acc = hn::LoadU(d, y + k);
    for (int64_t r = 0; r < rows; ++r) {
      const V row = hn::LoadU(d, a + r * lda + k);
      acc = w ? hn::MulAdd(hn::Set(d, w[r]), row, acc) : hn::Add(acc, row);
    }
    hn::StoreU(acc, d, y + k);
  }
  for (; k < cols; ++k) {
    float sum = y[k];
    for (int64_t r = 0; r < rows; ++r) sum = w ? std::fma(w[r], a[r * lda + k], sum) : sum + a[r * lda + k];
    y[k] = sum;
  }
}

void RankOneUpdateReadout(float* HWY_RESTRICT num, float* HWY_RESTRICT S, const float* HWY_RESTRICT phi_k,
                          const float* HWY_RESTRICT v, const float* HWY_RESTRICT phi_q, int64_t M, int64_t E) {
  const D d;
  const int64_t L = int64_t(hn::Lanes(d));
  int64_t e = 0;
  // One sweep over S per vector column: update the row, then read it out, while it is in registers.
  for (; e + L <= E; e += L) {
    const V ve = hn::LoadU(d, v + e);
    V acc = hn::Zero(d);
    for (int64_t m = 0; m < M; ++m) {
      float* s = S + m * E + e;
      const V row = hn::MulAdd(hn::Set(d, phi_k[m]), ve, hn::LoadU(d, s));
      hn::StoreU(row, d, s);
      acc = hn::MulAdd(hn::Set(d, phi_q[m]), row, acc);
    }
    hn::StoreU(acc, d, num + e);
  }
  for (; e < E; ++e) {
    float acc = 0;
    for (int64_t m = 0; m < M; ++m) {
      S[m * E + e] = std::fma(phi_k[m], v[e], S[m * E + e]);
      acc = std::fma(phi_q[m], S[m * E + e], acc);
    }
    num[e] = acc;
  }
}

// dst = srcᵀ in 4 × 4 blocks of 128-bit vectors (two rounds of interleaves), the ragged edges scalar.
void Transpose(float* HWY_RESTRICT dst, int64_t ldd, const float* HWY_RESTRICT src, int64_t lds, int64_t rows,
               int64_t cols) {
#if HWY_TARGET == HWY_SCALAR
  const int64_t r4 = 0, c4 = 0;  // no 128-bit vectors: all of it takes the scalar path
#else
  const hn::FixedTag<float, 4> d4;
  const int64_t r4 = rows / 4 * 4, c4 = cols / 4 * 4;
  for (int64_t r = 0; r < r4; r += 4)
    for (int64_t c = 0; c < c4; c += 4) {
      const float* s = src + r * lds + c;
      const auto a = hn::LoadU(d4, s), b = hn::LoadU(d4, s + lds), e = hn::LoadU(d4, s + 2 * lds),
                 f = hn::LoadU(d4, s + 3 * lds);
      const auto ab_lo = hn::InterleaveLower(d4, a, b), ef_lo = hn::InterleaveLower(d4, e, f);
      const auto ab_hi = hn::InterleaveUpper(d4, a, b), ef_hi = hn::InterleaveUpper(d4, e, f);
      float* t = dst + c * ldd + r;
      hn::StoreU(hn::ConcatLowerLower(d4, ef_lo, ab_lo), d4, t);
      hn::StoreU(hn::ConcatUpperUpper(d4, ef_lo, ab_lo), d4, t + ldd);
      hn::StoreU(hn::ConcatLowerLower(d4, ef_hi, ab_hi), d4, t + 2 * ldd);
      hn::StoreU(hn::ConcatUpperUpper(d4, ef_hi, ab_hi), d4, t + 3 * ldd);
    }
#endif
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = r < r4 ? c4 : 0; c < cols; ++c) dst[c * ldd + r] = src[r * lds + c];
}

}  // namespace HWY_NAMESPACE
}  // namespace linattn::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace linattn::kernels {

HWY_EXPORT(FeatureTileNow);
HWY_EXPORT(GemmAcc);
HWY_EXPORT(GemmSet);
HWY_EXPORT(RowDots);
HWY_EXPORT(RowSums);
HWY_EXPORT(AddWeightedRows);
HWY_EXPORT(RankOneUpdateReadout);
HWY_EXPORT(Transpose);

void feature_tile(const FeatureTile& tile) { HWY_DYNAMIC_DISPATCH(FeatureTileNow)(tile); }
void gemm_acc(float* c, int64_t ldc, const float* a, int64_t a_rs, int64_t a_ks, const float* b, int64_t ldb,
              int64_t rows, int64_t depth, int64_t cols, const RowsAhead* ahead) {
  HWY_DYNAMIC_DISPATCH(GemmAcc)(c, ldc, a, a_rs, a_ks, b, ldb, rows, depth, cols, ahead);
}
void gemm_set(float* c, int64_t ldc, const float* a, int64_t a_rs, int64_t a_ks, const float* b, int64_t ldb,
              int64_t rows, int64_t depth, int64_t cols, const float* row_scale, const RowsAhead* ahead) {
  HWY_DYNAMIC_DISPATCH(GemmSet)(c, ldc, a, a_rs, a_ks, b, ldb, rows, depth, cols, row_scale, ahead);
}
void row_dots(float* out, const float* a, int64_t lda, const float* x, int64_t rows, int64_t cols) {
  HWY_DYNAMIC_DISPATCH(RowDots)(out, a, lda, x, rows, cols);
}
void row_sums(float* out, const float* a, int64_t lda, int64_t rows, int64_t cols) {
  HWY_DYNAMIC_DISPATCH(RowSums)(out, a, lda, rows, cols);
}
void add_weighted_rows(float* y, const float* a, int64_t lda, const float* w, int64_t rows, int64_t cols) {
  HWY_DYNAMIC_DISPATCH(AddWeightedRows)(y, a, lda, w, rows, cols);
}
void rank1_update_readout(float* num, float* S, const float* phi_k, const float* v, const float* phi_q, int64_t M,
                          int64_t E) {
  HWY_DYNAMIC_DISPATCH(RankOneUpdateReadout)(num, S, phi_k, v, phi_q, M, E);
}

void transpose(float* dst, int64_t ldd, const float* src, int64_t lds, int64_t rows, int64_t cols) {
  HWY_DYNAMIC_DISPATCH(Transpose)(dst, ldd, src, lds, rows, cols);
}

}  // namespace linattn::kernels
#endif  // HWY_ONCE
