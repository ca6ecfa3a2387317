#pragma once
// The decay factors of the decayed family's chunks: products with exp of a difference of cumulative
// log decays, formed so that the exponent is the difference itself (never exp of a large number
// divided by exp of another). Single-threaded, SIMD (Highway, dispatched at runtime).
#include <cstdint>

namespace linattn::kernels {

// The floor of every log decay a chunk's running sums take: below about −104 e^{g} is 0 in fp32, so a
// product of decays across such a token is 0 either way. −inf and −1e30 (resets) become it, so that the
// sums stay finite and no factor is e^{−inf + inf}; NaN stays NaN.
inline constexpr float kLogDecayFloor = -128.0f;

// y: [n] = x · exp(sign · (a − b)), elementwise (b null: 0). y may be x.
void mul_exp_difference(float* y, const float* x, const float* a, const float* b, float sign, int64_t n);

// The running log decays of one chunk whose factors must stay bounded, and its column factors.
// b: [rows, ld], row t holding token t's log decays [cols] on entry and Σ_{u ≤ t} of them on return
// for the rows taken (the rows not taken are left as they were), each log decay floored at
// kLogDecayFloor. The rows taken: all of them unless stop_early, else the longest prefix (always ≥ 1
// row) over which no column's running sum spans more than max_span, counting 0 (the chunk's start) in
// the span when from_zero; a first row with a log decay below −max_span is taken alone (a reset ends
// its chunk). Then, per column over the rows taken, with lo..hi its range (a NaN left out, so that a
// later token's NaN never reaches the midpoint of the earlier rows): mid = (lo + hi) / 2, last = b_n
// (the last row taken), e_mid = e^{mid}, e_last_mid = e^{b_n − mid}. lo, hi: [cols] scratch.
struct ChunkDecays {
  float* b;
  int64_t ld, cols;
  float *lo, *hi, *mid, *last, *e_mid, *e_last_mid;
};
int64_t running_log_decays(const ChunkDecays& c, int64_t rows, float max_span, bool from_zero, bool stop_early);

// The factored sides of one chunk row (n elements) split around each column's midpoint m, from one
// exp and one division per element: e = exp(b − m), then
//   Ql = q e, Kr = k / e, Qe = Ql em, Kd = Kr enm   (em = e^{m}, enm = e^{b_n − m}),
// the delta rule's left keys Kl = k e, Kt = Kl em (null: GLA, which has none), and the factors that
// the backward applies again, El = e, Er = 1/e and with the left keys Eb = e em (= e^{b}),
// Ed = Er enm (= e^{b_n − b}) (null: a forward, which needs none). Qe null: Ql and Kr alone (the
// token-by-token scan's sides, kernels/decay_scan.hpp; em and enm unread).
struct SplitFactorRow {
  float *Ql, *Kr, *Qe, *Kd;
  float *Kl = nullptr, *Kt = nullptr;
  float *El = nullptr, *Er = nullptr, *Eb = nullptr, *Ed = nullptr;
};
void split_factor_row(const SplitFactorRow& out, const float* q, const float* k, const float* b, const float* m,
                      const float* em, const float* enm, int64_t n);

// The delta rule's sides of one row and their gradients (n elements; the sides as split_factor_row
// forms them, or q and k themselves without a gate).
struct SplitSides {
  const float *Qe, *Ql, *Kt, *Kl, *Kr, *Kd;
};
// The chain rule back through split_factor_row for one row, with the score diagonal's terms:
//   dq = dQe Eb + dQl El + diag k,   dk = dKt Eb + dKl El + dKr Er + dKd Ed + diag q
// (factors null: all ones, the ungated rule).
void split_factor_row_backward(float* dq, float* dk, const SplitSides& grads, const float* El, const float* Er,
                               const float* Eb, const float* Ed, const float* q, const float* k, float diag, int64_t n);
// ∂L/∂b of one row in fp64, each side X = x e^{±b}·(column factor) contributing ±dX·X:
//   db = dQe Qe + dKt Kt + dQl Ql + dKl Kl − dKr Kr − dKd Kd (rounded to fp32),
// and dKd Kd also added to kd_sum (fp64); without with_kd the Kd pair is left out of both.
void split_gate_row(float* db, double* kd_sum, const SplitSides& sides, const SplitSides& grads, bool with_kd,
                    int64_t n);

// The gate's share of one chunk row in fp64: out[c] += q[c]·gq[c] − k[c]·gk[c] for c < n (k null: no
// key term), or with one gate per token (sum_columns) out[0] += the sum of them over c.
void add_gate_row(double* out, const float* q, const float* gq, const float* k, const float* gk, int64_t n,
                  bool sum_columns);

// A head's gate gradient from its per-token ∂L/∂b, a block of rows at a time from the sequence's end:
// going from the block's last row back, sum += g[t, :cols] (fp64, g's rows cols apart, each column
// summed in that order), dst(t, c) = float(sum[c]). sum: [cols], carried from the block after (zeros
// for the last). dst's rows `row` floats apart, its columns `col` apart.
void reverse_running_sums(float* dst, int64_t row, int64_t col, const double* g, int64_t rows, int64_t cols,
                          double* sum);

}  // namespace linattn::kernels
