#pragma once
// Flop and byte counts behind the benchmarks' FLOPS and bytes_per_second counters. docs/performance.md
// states the same formulas. A flop is one fp32 add or multiply (an FMA counts 2); exp and divide count 1.
// Counts are what the algorithm must perform, not what a particular kernel happens to do.
#include <algorithm>
#include <cstdint>

namespace linattn::bench {

// Non-causal linear attention forward, per (b, h): S = φ(K)ᵀV (2·Nk·M·E), z = Σφ(k) (Nk·M),
// φ(Q)S (2·Nq·M·E), φ(Q)·z (2·Nq·M), the division (Nq·E).
inline double linear_forward_flops(int64_t B, int64_t H, int64_t Nq, int64_t Nk, int64_t M_, int64_t E_) {
  const double M = double(M_), E = double(E_);
  return double(B * H) * (double(Nk) * (2.0 * M * E + M) + double(Nq) * (2.0 * M * E + 2.0 * M + E));
}
// Backward: recompute S, z (2·Nk·M·E + Nk·M); per query S·dnum (2·M·E), which also gives ∂den, and
// dS = φ(Q)ᵀdnum (2·M·E), dz (2·M) plus the ∂den terms (2·M); per key dφ(K) = dS·v (2·M·E + M) and
// dV = φ(K)ᵀdS (2·M·E).
inline double linear_backward_flops(int64_t B, int64_t H, int64_t Nq, int64_t Nk, int64_t M_, int64_t E_) {
  const double M = double(M_), E = double(E_);
  return double(B * H) * (double(Nk) * (6.0 * M * E + 2.0 * M) + double(Nq) * (4.0 * M * E + 4.0 * M));
}

// Causal (chunked, chunk C) forward, per (b, h) and chunk of c tokens: intra-chunk A = φ(Q_c)φ(K_c)ᵀ
// (2·c²·M, the whole C×C tile: the masked half is computed too), A·V_c (2·c²·E), row sums of A (c²);
// inter-chunk φ(Q_c)S (2·c·M·E), φ(Q_c)·z (2·c·M), state update φ(K_c)ᵀV_c (2·c·M·E), z (c·M); division (c·E).
inline double causal_forward_flops(int64_t B, int64_t H, int64_t N, int64_t M_, int64_t E_, int64_t C) {
  const double M = double(M_), E = double(E_);
  double per_bh = 0;
  for (int64_t t0 = 0; t0 < N; t0 += C) {
    const double c = double(std::min(C, N - t0));
    per_bh += c * c * (2.0 * M + 2.0 * E + 1.0) + c * (4.0 * M * E + 3.0 * M + E);
  }
  return double(B * H) * per_bh;
}
// What the library's causal forward actually multiplies (src/ops/causal_linear_attention.cpp), which is
// less than the count above: the in-chunk products run in strips of 16 rows, each only as wide (A) or
// as deep (the output product [φ(Q) | A][S; V]) as the triangle reaches, on rows padded to 16 floats.
// Per chunk of n tokens and strip of `rows` rows at r: A 2·rows·M·pad(r + rows), output
// 2·rows·(Mp + r + rows)·Ep; then the state update 2·M·n·Ep, z (n·M), φ(Q)·z (2·n·M), row sums of A
// (n²), and the 1/den scaling of [φ(Q) | A] (n·Mp + n(n + 1)/2).
inline double causal_forward_flops_executed(int64_t B, int64_t H, int64_t N, int64_t M_, int64_t E_, int64_t C) {
  const auto pad = [](int64_t x) { return double((x + 15) / 16 * 16); };
  const double M = double(M_), Mp = pad(M_), Ep = pad(E_);
  double per_bh = 0;
  for (int64_t t0 = 0; t0 < N; t0 += C) {
    const int64_t n = std::min(C, N - t0);
    for (int64_t r = 0; r < n; r += 16) {
      const int64_t rows = std::min<int64_t>(16, n - r);
      per_bh += 2.0 * double(rows) * M * pad(r + rows) + 2.0 * double(rows) * (Mp + double(r + rows)) * Ep;
    }
    const double c = double(n);
    per_bh += 2.0 * M * c * Ep + c * M + 2.0 * c * M + c * c + c * Mp + c * (c + 1) / 2;
  }
  return double(B * H) * per_bh;
}
// Backward per chunk: intra A again (2·c²·M), dA = dnum·V_cᵀ (2·c²·E), dφ(Q_c) += dA·φ(K_c) (2·c²·M),
// dφ(K_c) += dAᵀφ(Q_c) (2·c²·M), dV_c += Aᵀdnum (2·c²·E), the ∂den terms (2·c²); inter-chunk: the state
// before the chunk (2·c·M·E), dnum·Sᵀ (2·c·M·E), V_c·dSᵀ (2·c·M·E), φ(K_c)dS (2·c·M·E), dS += φ(Q_c)ᵀdnum
// (2·c·M·E), and the z / dz terms (6·c·M).
inline double causal_backward_flops(int64_t B, int64_t H, int64_t N, int64_t M_, int64_t E_, int64_t C) {
  const double M = double(M_), E = double(E_);
  double per_bh = 0;
  for (int64_t t0 = 0; t0 < N; t0 += C) {
    const double c = double(std::min(C, N - t0));
    per_bh += c * c * (6.0 * M + 4.0 * E + 2.0) + c * (10.0 * M * E + 6.0 * M);
  }
  return double(B * H) * per_bh;
}

// The token-by-token prefix sum (bench/baseline) performs, per token, S += φ(k)vᵀ (2·M·E), z (M),
// φ(q)ᵀS (2·M·E), φ(q)·z (2·M), division (E): the recurrent step's count.
inline double recurrent_step_flops(int64_t B, int64_t H, int64_t M_, int64_t E_) {
  const double M = double(M_), E = double(E_);
  return double(B * H) * (4.0 * M * E + 3.0 * M + E);
}
// Its backward: forward sweep S, z update and readout (4·M·E + 3·M), ∂φ(q) = S·dnum + z·dden (2·M·E + 2·M),
// ∂den (2·E); reverse sweep R += φ(q)dnumᵀ (2·M·E), dv = Rᵀφ(k) (2·M·E), ∂φ(k) = R·v + r (2·M·E + M).
inline double prefix_sum_backward_flops(int64_t B, int64_t H, int64_t N, int64_t M_, int64_t E_) {
  const double M = double(M_), E = double(E_);
  return double(B * H) * double(N) * (12.0 * M * E + 7.0 * M + 2.0 * E);
}

// Query-key pairs a query sees: all Nq·Nk, or with the bottom-right causal mask, i sees j ≤ i + Nk − Nq.
inline double visible_pairs(int64_t Nq, int64_t Nk, bool causal) {
  if (!causal) return double(Nq) * double(Nk);
  double pairs = 0;
  for (int64_t i = 0; i < Nq; ++i) pairs += double(std::clamp<int64_t>(i + Nk - Nq + 1, 0, Nk));
  return pairs;
}
// Softmax forward per visible pair: q·k (2·D), p·v (2·E); exp and the running max are not FMA work.
inline double softmax_forward_flops(int64_t B, int64_t H, int64_t Nq, int64_t Nk, int64_t D_, int64_t E_, bool causal) {
  const double D = double(D_), E = double(E_);
  return double(B * H) * visible_pairs(Nq, Nk, causal) * (2.0 * D + 2.0 * E);
}
// Backward per visible pair (FlashAttention-2): recompute q·k (2·D), dP = dO·v (2·E), dV += Pᵀ·dO (2·E),
// dQ += dS·k (2·D), dK += dSᵀ·q (2·D).
inline double softmax_backward_flops(int64_t B, int64_t H, int64_t Nq, int64_t Nk, int64_t D_, int64_t E_,
                                     bool causal) {
  const double D = double(D_), E = double(E_);
  return double(B * H) * visible_pairs(Nq, Nk, causal) * (6.0 * D + 4.0 * E);
}

// Linformer forward per (b, h): the projections k̃ = E·k (2·P·Nk·D) and ṽ = F·v (2·P·Nk·E), then softmax
// attention of Nq queries over P positions.
inline double linformer_forward_flops(int64_t B, int64_t H, int64_t Nq, int64_t Nk, int64_t P, int64_t D, int64_t E) {
  return double(B * H) * 2.0 * double(P) * double(Nk) * double(D + E) + softmax_forward_flops(B, H, Nq, P, D, E, false);
}
// Backward: softmax backward over P positions, then for each projection dk = Eᵀ·dk̃ and dE = dk̃·kᵀ
// (2·2·P·Nk·D), likewise dv and dF (2·2·P·Nk·E).
inline double linformer_backward_flops(int64_t B, int64_t H, int64_t Nq, int64_t Nk, int64_t P, int64_t D, int64_t E) {
  return double(B * H) * 4.0 * double(P) * double(Nk) * double(D + E) +
         softmax_backward_flops(B, H, Nq, P, D, E, false);
}

// Compulsory bytes: every input read once and every output written once, in fp32.
inline double tensor_bytes(int64_t B, int64_t H, int64_t N, int64_t D) { return 4.0 * double(B * H * N * D); }

}  // namespace linattn::bench
