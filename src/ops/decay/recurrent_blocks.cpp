// The decayed family's token-by-token forward over blocks of tokens (see recurrent_blocks.hpp).
#include "ops/decay/recurrent_blocks.hpp"

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <utility>

#include "kernels/decay_factors.hpp"
#include "kernels/decay_scan.hpp"
#include "kernels/pack.hpp"
#include "kernels/rows.hpp"
#include "kernels/rows_ahead.hpp"
#include "ops/recurrence/state_rows.hpp"

namespace linattn::detail {
namespace {

using kernels::padded;
constexpr int64_t C = kScanBlockTokens;

// What the heads share, one head's block at a time: its q, k (where packed) and gates [C, Kp] (a constant
// decay's too, and their running sums once a scan has taken them), v (where packed) and o [C, Vp]; the factored
// sides Ql, Kr [C, Kp]; per key dimension lo, hi, mid, last, e^{mid}, e^{last − mid} and the start and end factors
// [Kp]; per token the factors of a decay per token [C] ×2. Each head keeps only its state R [K, Vp] of its own.
// With query groups q, o and Ql hold one block a query head of the group (Q = p.queries of them).
struct SharedScratch {
  float *q, *k, *g, *v, *o, *Ql, *Kr, *lo, *hi, *mid, *last, *e_mid, *e_last_mid, *start, *end, *fq, *fk;
  static size_t floats(int64_t K, int64_t V, int64_t Q) {
    return size_t((2 * Q + 3) * C * padded(K) + (Q + 1) * C * padded(V) + 8 * padded(K) + 2 * C);
  }
  SharedScratch(float* s, int64_t K, int64_t V, int64_t Q) {
    const int64_t Kp = padded(K), Vp = padded(V);
    for (auto [x, n] : {std::pair{&q, Q * C * Kp},
                        {&k, C * Kp},
                        {&g, C * Kp},
                        {&v, C * Vp},
                        {&o, Q * C * Vp},
                        {&Ql, Q * C * Kp},
                        {&Kr, C * Kp},
                        {&lo, Kp},
                        {&hi, Kp},
                        {&mid, Kp},
                        {&last, Kp},
                        {&e_mid, Kp},
                        {&e_last_mid, Kp},
                        {&start, Kp},
                        {&end, Kp},
                        {&fq, C},
                        {&fk, C}})
      *x = s, s += n;
  }
};

// Rows [t, t + n) of head h of x (cols each): in place where x is fp32 with its elements side by side (and,
// when whole_vectors, cols a multiple of kPad: the scan reads v's rows in whole vectors), else packed into
// tile (pitch ld; half rows widened).
template <class I>
kernels::ConstTile block_rows(View4<const I> x, int64_t b, int64_t h, int64_t t, int64_t n, int64_t cols, float* tile,
                              int64_t ld, bool whole_vectors) {
  if constexpr (std::is_same_v<I, float>)
    if (x.stride[3] == 1 && (!whole_vectors || cols % kernels::kPad == 0))
      return {kernels::head_rows(x, b, h).at(t), x.stride[1], n, cols};
  kernels::pack_rows({tile, ld, n, cols}, kernels::head_rows(x, b, h), t, n);
  return {tile, ld, n, cols};
}

}  // namespace

size_t scan_floats_per_head(const DecayProblem& p) { return size_t(p.K * padded(p.V)); }
size_t scan_floats_shared(const DecayProblem& p) { return SharedScratch::floats(p.K, p.V, p.queries); }

template <class I>
void scan_heads(const DecayProblem& p, const Sequence& s, int64_t h0, int64_t heads, View4<I> out, View4<const I> q,
                View4<const I> k, View4<const I> v, View4<const I> g, std::span<float> state,
                const DecayedAttentionOptions& options, float* scratch) {
  const int64_t K = p.K, V = p.V, Kp = padded(K), Vp = padded(V), cols = p.gate_cols(), Q = p.queries;
  const bool decays = p.decay != Decay::none, per_key = p.decay == Decay::key;
  const int64_t ld = per_key ? Kp : 1, width = per_key ? K : 1;    // b's pitch and columns
  const auto R = [&](int64_t j) { return scratch + j * K * Vp; };  // head j's state
  const SharedScratch x(scratch + heads * K * Vp, K, V, Q);
  for (int64_t j = 0; j < heads; ++j) load_state_rows(R(j), K, V, Vp, state, s.n * p.H + h0 + j);
  for (int64_t t = s.begin; t < s.end; t += C) {
    const int64_t n = std::min(C, s.end - t);
    for (int64_t j = 0; j < heads; ++j) {
      const int64_t h = h0 + j, hk = p.qk_head(h);  // the value head, and the q/k head it reads
      // Query head i of the group: its rows (in place, or packed one block apart), at qr + i · ldqh.
      const kernels::ConstTile qr = block_rows(query_view(q, Q, 0), s.b, hk, t, n, K, x.q, Kp, false),
                               kr = block_rows(k, s.b, hk, t, n, K, x.k, Kp, false),
                               vr = block_rows(v, s.b, h, t, n, V, x.v, Vp, true);
      int64_t ldqh = 0;  // the pitch between query heads: q's head stride in place, else one packed block
      for (int64_t i = 1; i < Q; ++i) {
        const float* rows = block_rows(query_view(q, Q, i), s.b, hk, t, n, K, x.q + i * C * Kp, Kp, false).data;
        if (i == 1) ldqh = rows - qr.data;
      }
      if (cols > 0) kernels::pack_rows({x.g, ld, n, cols}, kernels::head_rows(g, s.b, h), t, n);
      // The next block's rows of this head arrive while its scans run (fp32 views), its rows of out for writing.
      kernels::RowsAhead next[kernels::kScanAhead];
      if constexpr (std::is_same_v<I, float>)
        next[0] = kernels::head_rows_ahead(query_view(q, Q, 0), k, false, s.b, hk, t + C, C),
        next[1] = kernels::head_rows_ahead(v, query_view(out, Q, 0), true, s.b, h, t + C, C),
        next[2] = kernels::head_rows_ahead(g, {}, false, s.b, h, t + C, C);
      for (int64_t r = 0, m = 0; r < n; r += m) {
        // One scan: rows [r, r + m), as many as the decays allow.
        m = n - r;
        const float *Ql = qr.row(r), *Kr = kr.row(r);
        int64_t ldq = qr.ld, ldk = kr.ld, ldql = ldqh;
        if (decays) {
          // b: the gates' running sums over the scan's rows, in place (the rows after it are left as packed).
          float* b = x.g + r * ld;
          if (cols == 0) std::fill_n(b, m, float(constant_log_decay(options, h)));
          m = kernels::running_log_decays({b, ld, width, x.lo, x.hi, x.mid, x.last, x.e_mid, x.e_last_mid}, m,
                                          kScanMaxLogSpan, false, true);
          // Each query head's Ql, a block apart (Kr formed with each, the same values).
          for (int64_t qi = 0; qi < Q; ++qi) {
            const float* q_rows = Ql + qi * ldqh;
            float* Ql_rows = x.Ql + qi * C * Kp;
            if (per_key) {
              // Ql = q ⊙ e^{b − mid}, Kr = k ⊙ e^{mid − b}; R enters times e^{mid} and leaves times e^{last − mid}.
              for (int64_t i = 0; i < m; ++i)
                kernels::split_factor_row({.Ql = Ql_rows + i * Kp, .Kr = x.Kr + i * Kp, .Qe = nullptr, .Kd = nullptr},
                                          q_rows + i * ldq, Kr + i * ldk, b + i * Kp, x.mid, nullptr, nullptr, K);
            } else {  // the same factors, one a token
              for (int64_t i = 0; i < m; ++i) x.fq[i] = std::exp(b[i] - x.mid[0]), x.fk[i] = std::exp(x.mid[0] - b[i]);
              kernels::scale_rows(Ql_rows, Kp, q_rows, ldq, x.fq, m, K);
            }
          }
          if (per_key) {
            std::copy_n(x.e_mid, K, x.start), std::copy_n(x.e_last_mid, K, x.end);
          } else {
            kernels::scale_rows(x.Kr, Kp, Kr, ldk, x.fk, m, K);
            std::fill_n(x.start, K, x.e_mid[0]), std::fill_n(x.end, K, x.e_last_mid[0]);
          }
          Ql = x.Ql, Kr = x.Kr, ldq = ldk = Kp, ldql = C * Kp;
        }
        kernels::decay_scan_block({.o = x.o + r * Vp,
                                   .R = R(j),
                                   .Ql = Ql,
                                   .Kr = Kr,
                                   .v = vr.row(r),
                                   .start = decays ? x.start : nullptr,
                                   .end = decays ? x.end : nullptr,
                                   .ldq = ldq,
                                   .ldk = ldk,
                                   .ldv = vr.ld,
                                   .ldo = Vp,
                                   .ldr = Vp,
                                   .n = m,
                                   .K = K,
                                   .V = V,
                                   .queries = Q,
                                   .ldqh = ldql,
                                   .ldoh = C * Vp},
                                  next);
      }
      // o times the scale (q went in without it), each query head's into its head of out.
      for (int64_t qi = 0; qi < Q; ++qi) {
        float* o = x.o + qi * C * Vp;
        const auto rows = kernels::head_rows(query_view(out, Q, qi), s.b, h);
        if constexpr (std::is_same_v<I, float>) {
          kernels::unpack_rows(rows, t, {o, Vp, n, V}, n, p.scale);
        } else {
          std::fill_n(x.fq, n, p.scale);
          kernels::scale_rows(o, Vp, o, Vp, x.fq, n, V);
          kernels::unpack_rows(rows, t, kernels::ConstTile{o, Vp, n, V});
        }
      }
    }
  }
  for (int64_t j = 0; j < heads; ++j) store_state_rows(state, R(j), K, V, Vp, s.n * p.H + h0 + j);
}

#define LINATTN_SCAN_HEADS(I)                                                                                   \
  template void scan_heads<I>(const DecayProblem&, const Sequence&, int64_t, int64_t, View4<I>, View4<const I>, \
                              View4<const I>, View4<const I>, View4<const I>, std::span<float>,                 \
                              const DecayedAttentionOptions&, float*);
LINATTN_SCAN_HEADS(float)
LINATTN_SCAN_HEADS(bf16)
LINATTN_SCAN_HEADS(f16)
#undef LINATTN_SCAN_HEADS

}  // namespace linattn::detail
