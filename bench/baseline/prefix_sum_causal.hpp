#pragma once
// The comparison for causal linear attention: a token-by-token prefix sum, parallel over batch × heads
// with OpenMP. This is the design of fast-transformers' CPU causal_product kernel (one running state
// per (b, h), updated and read once per token), with its Python-side feature map and normaliser fused
// in. It is written to be as fast as that design allows: contiguous [B, H, N, D] rows, φ applied a
// block at a time through the library's fast FeatureMap path, and inner loops over E that the compiler
// vectorises; the per-token kernels are cloned for x86-64-v4/v3 with runtime selection (GCC
// target_clones), since the library dispatches its kernels at runtime too.
//
// Header-only so that tests/prefix_sum_baseline_test.cpp can check it against the fp64 oracle.
// target_clones emits a global resolver symbol: include this header from one .cpp per executable.
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "linattn/feature_map.hpp"

namespace linattn::baseline {

#if defined(__GNUC__) && defined(__x86_64__) && !defined(__clang__)
#define LINATTN_BASELINE_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define LINATTN_BASELINE_CLONES
#endif

namespace detail {

// Tokens whose features are computed in one FeatureMap call: [kBlock, M] stays in L1/L2.
inline constexpr int64_t kBlock = 64;

// Σ_i a[i]·b[i] with 16 partial sums added pairwise at the end: a fixed order (so no reassociation is
// needed) that the compiler vectorises.
inline float dot(const float* __restrict a, const float* __restrict b, int64_t n) {
  const int64_t whole = n - n % 16;
  float part[16] = {};
  for (int64_t i = 0; i < whole; i += 16)
    for (int j = 0; j < 16; ++j) part[j] += a[i + j] * b[i + j];
  for (int width = 8; width >= 1; width /= 2)
    for (int j = 0; j < width; ++j) part[j] += part[j + width];
  float sum = part[0];
  for (int64_t i = whole; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

// One token of the prefix sum: S += φ(k_t)v_tᵀ and z += φ(k_t), with num = Sᵀφ(q_t) read in the same pass
// over S while each row is in registers. Returns den = φ(q_t)·z + eps. S: [M, E]; z, qt, kt: [M]; num, vt: [E].
template <int64_t kE>
[[gnu::always_inline]] inline float prefix_step(float* __restrict S, float* __restrict z, float* __restrict num,
                                                const float* __restrict qt, const float* __restrict kt,
                                                const float* __restrict vt, int64_t M, int64_t E_, float eps) {
  const int64_t E = kE ? kE : E_;
  for (int64_t m = 0; m < M; ++m) z[m] += kt[m];
  for (int64_t e = 0; e < E; ++e) num[e] = 0.0f;
  for (int64_t m = 0; m < M; ++m) {
    float* __restrict row = S + m * E;
    const float km = kt[m], qm = qt[m];
    for (int64_t e = 0; e < E; ++e) {
      row[e] += km * vt[e];
      num[e] += qm * row[e];
    }
  }
  return dot(qt, z, M) + eps;
}

// Forward over `tokens` consecutive tokens of one (b, h): out: [tokens, E]; fq, fk: [tokens, M];
// v: [tokens, E]; running state S: [M, E], z: [M]; num: [E] scratch.
template <int64_t kE>
LINATTN_BASELINE_CLONES inline void forward_tokens(float* __restrict out, const float* __restrict fq,
                                                   const float* __restrict fk, const float* __restrict v,
                                                   float* __restrict S, float* __restrict z, float* __restrict num,
                                                   int64_t tokens, int64_t M, int64_t E_, float eps) {
  const int64_t E = kE ? kE : E_;
  for (int64_t t = 0; t < tokens; ++t) {
    const float* qt = fq + t * M;
    const float* kt = fk + t * M;
    const float den = prefix_step<kE>(S, z, num, qt, kt, v + t * E, M, E, eps);
    float* ot = out + t * E;
    for (int64_t e = 0; e < E; ++e) ot[e] = num[e] / den;
  }
}

// Backward, forward sweep over `tokens` tokens: dfq: [tokens, M] = ∂L/∂φ(q); den, dden: [tokens] saved for
// the reverse sweep; dout: [tokens, E]; S, z: running state; num: [E], dnum: [E] scratch.
template <int64_t kE>
LINATTN_BASELINE_CLONES inline void backward_query_tokens(float* __restrict dfq, float* __restrict den,
                                                          float* __restrict dden, const float* __restrict dout,
                                                          const float* __restrict fq, const float* __restrict fk,
                                                          const float* __restrict v, float* __restrict S,
                                                          float* __restrict z, float* __restrict num,
                                                          float* __restrict dnum, int64_t tokens, int64_t M, int64_t E_,
                                                          float eps) {
  const int64_t E = kE ? kE : E_;
  for (int64_t t = 0; t < tokens; ++t) {
    const float* qt = fq + t * M;
    const float* kt = fk + t * M;
    const float* gt = dout + t * E;
    const float d = prefix_step<kE>(S, z, num, qt, kt, v + t * E, M, E, eps);
    // out = num / den: ∂L/∂num = dout / den, ∂L/∂den = −(dout · num) / den².
    for (int64_t e = 0; e < E; ++e) dnum[e] = gt[e] / d;
    const float g = -dot(dnum, num, E) / d;
    den[t] = d;
    dden[t] = g;
    // φ(q_t) enters num = Sᵀφ(q_t) and den = φ(q_t)·z + eps.
    float* dqt = dfq + t * M;
    for (int64_t m = 0; m < M; ++m) dqt[m] = dot(S + m * E, dnum, E) + z[m] * g;
  }
}

// Backward, reverse sweep over `tokens` tokens, last token first: dfk: [tokens, M] = ∂L/∂φ(k);
// dv: [tokens, E]; R: [M, E] = Σ_{i ≥ t} φ(q_i) dnum_iᵀ and r: [M] = Σ_{i ≥ t} φ(q_i) dden_i running
// from the end; dnum: [E] scratch.
template <int64_t kE>
LINATTN_BASELINE_CLONES inline void backward_key_tokens(float* __restrict dfk, float* __restrict dv,
                                                        const float* __restrict dout, const float* __restrict fq,
                                                        const float* __restrict fk, const float* __restrict v,
                                                        const float* __restrict den, const float* __restrict dden,
                                                        float* __restrict R, float* __restrict r,
                                                        float* __restrict dnum, int64_t tokens, int64_t M, int64_t E_) {
  const int64_t E = kE ? kE : E_;
  for (int64_t t = tokens - 1; t >= 0; --t) {
    const float* qt = fq + t * M;
    const float* kt = fk + t * M;
    const float* vt = v + t * E;
    const float* gt = dout + t * E;
    const float d = den[t], g = dden[t];
    for (int64_t e = 0; e < E; ++e) dnum[e] = gt[e] / d;
    for (int64_t m = 0; m < M; ++m) r[m] += qt[m] * g;
    float* dvt = dv + t * E;
    for (int64_t e = 0; e < E; ++e) dvt[e] = 0.0f;
    float* dkt = dfk + t * M;
    // One pass over R: R += φ(q_t) dnum_tᵀ, then dv_t += φ(k_t)[m] R[m, :] and ∂φ(k_t)[m] = R[m, :]·v_t + r[m].
    for (int64_t m = 0; m < M; ++m) {
      float* __restrict row = R + m * E;
      const float qm = qt[m], km = kt[m];
      for (int64_t e = 0; e < E; ++e) {
        row[e] += qm * dnum[e];
        dvt[e] += km * row[e];
      }
      dkt[m] = dot(row, vt, E) + r[m];
    }
  }
}

// Calls f(std::integral_constant<int64_t, kE>) with kE = E for the usual value dims, so that the kernels
// keep a row of E floats in registers, and kE = 0 (E read at run time) otherwise.
template <class F>
void with_value_dim(int64_t E, F&& f) {
  switch (E) {
    case 32:
      return f(std::integral_constant<int64_t, 32>{});
    case 64:
      return f(std::integral_constant<int64_t, 64>{});
    case 128:
      return f(std::integral_constant<int64_t, 128>{});
    default:
      return f(std::integral_constant<int64_t, 0>{});
  }
}

// Visits the blocks of kBlock tokens of one (b, h), first to last or last to first: f(first row of the
// block in [B·H·N] rows, tokens in it, fq, fk) with fq, fk = φ(q), φ(k) of the block's rows ([tokens, M]).
template <class F>
void for_each_block(int64_t bh, int64_t N, bool reverse, const float* q, const float* k, int64_t D,
                    const FeatureMap& phi, std::vector<float>& fq, std::vector<float>& fk, F&& f) {
  const int64_t blocks = (N + kBlock - 1) / kBlock;
  for (int64_t i = 0; i < blocks; ++i) {
    const int64_t t0 = (reverse ? blocks - 1 - i : i) * kBlock, tokens = std::min(kBlock, N - t0);
    const int64_t row = bh * N + t0;
    phi.forward(fq.data(), q + row * D, tokens, D, FeatureRole::query);
    phi.forward(fk.data(), k + row * D, tokens, D, FeatureRole::key);
    f(row, t0, tokens);
  }
}

}  // namespace detail

// Causal linear attention, out_i = φ(q_i)ᵀS_i / (φ(q_i)ᵀz_i + eps) with S_i, z_i summed over j ≤ i.
// out: [B, H, N, E]; q, k: [B, H, N, D]; v: [B, H, N, E]; all contiguous; M = phi.feature_dim(D).
inline void prefix_sum_causal_forward(float* out, const float* q, const float* k, const float* v, int64_t B, int64_t H,
                                      int64_t N, int64_t D, int64_t E, const FeatureMap& phi, float eps) {
  const int64_t M = phi.feature_dim(D);
#pragma omp parallel
  {
    std::vector<float> fq(detail::kBlock * M), fk(detail::kBlock * M), S(M * E), z(M), num(E);
#pragma omp for schedule(static)
    for (int64_t bh = 0; bh < B * H; ++bh) {
      std::fill(S.begin(), S.end(), 0.0f);
      std::fill(z.begin(), z.end(), 0.0f);
      detail::for_each_block(bh, N, false, q, k, D, phi, fq, fk, [&](int64_t row, int64_t, int64_t tokens) {
        detail::with_value_dim(E, [&](auto kE) {
          detail::forward_tokens<kE()>(out + row * E, fq.data(), fk.data(), v + row * E, S.data(), z.data(), num.data(),
                                       tokens, M, E, eps);
        });
      });
    }
  }
}

// dq, dk: [B, H, N, D] and dv: [B, H, N, E] (overwritten); dout: [B, H, N, E]; q, k, v as in the forward.
// A forward sweep gives ∂φ(q) (it needs S_i and z_i); a reverse sweep gives ∂φ(k) and dv (they need the
// suffix sums of φ(q_i) dnum_iᵀ and φ(q_i) dden_i).
inline void prefix_sum_causal_backward(float* dq, float* dk, float* dv, const float* dout, const float* q,
                                       const float* k, const float* v, int64_t B, int64_t H, int64_t N, int64_t D,
                                       int64_t E, const FeatureMap& phi, float eps) {
  const int64_t M = phi.feature_dim(D);
#pragma omp parallel
  {
    std::vector<float> fq(detail::kBlock * M), fk(detail::kBlock * M), dphi(detail::kBlock * M), S(M * E), z(M), num(E),
        dnum(E), den(N), dden(N);
#pragma omp for schedule(static)
    for (int64_t bh = 0; bh < B * H; ++bh) {
      std::fill(S.begin(), S.end(), 0.0f);
      std::fill(z.begin(), z.end(), 0.0f);
      detail::for_each_block(bh, N, false, q, k, D, phi, fq, fk, [&](int64_t row, int64_t t0, int64_t tokens) {
        detail::with_value_dim(E, [&](auto kE) {
          detail::backward_query_tokens<kE()>(dphi.data(), den.data() + t0, dden.data() + t0, dout + row * E, fq.data(),
                                              fk.data(), v + row * E, S.data(), z.data(), num.data(), dnum.data(),
                                              tokens, M, E, eps);
        });
        phi.backward(dq + row * D, dphi.data(), q + row * D, tokens, D, FeatureRole::query);
      });
      // The reverse sweep reuses S and z as R and r.
      std::fill(S.begin(), S.end(), 0.0f);
      std::fill(z.begin(), z.end(), 0.0f);
      detail::for_each_block(bh, N, true, q, k, D, phi, fq, fk, [&](int64_t row, int64_t t0, int64_t tokens) {
        detail::with_value_dim(E, [&](auto kE) {
          detail::backward_key_tokens<kE()>(dphi.data(), dv + row * E, dout + row * E, fq.data(), fk.data(),
                                            v + row * E, den.data() + t0, dden.data() + t0, S.data(), z.data(),
                                            dnum.data(), tokens, M, E);
        });
        phi.backward(dk + row * D, dphi.data(), k + row * D, tokens, D, FeatureRole::key);
      });
    }
  }
}

// The flops of prefix_sum_causal_backward (its own count: the baseline is no operator of the table).
// Forward sweep S, z update and readout (4·M·E + 3·M), ∂φ(q) = S·dnum + z·dden (2·M·E + 2·M), ∂den
// (2·E); reverse sweep R += φ(q)dnumᵀ (2·M·E), dv = Rᵀφ(k) (2·M·E), ∂φ(k) = R·v + r (2·M·E + M).
inline double prefix_sum_backward_flops(int64_t B, int64_t H, int64_t N, int64_t M_, int64_t E_) {
  const double M = double(M_), E = double(E_);
  return double(B * H) * double(N) * (12.0 * M * E + 7.0 * M + 2.0 * E);
}

}  // namespace linattn::baseline
