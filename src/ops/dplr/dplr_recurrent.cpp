// The DPLR delta rule (RWKV-7) token by token in fp32, forward and backward. Per sequence, head and token:
//   s = Sᵀ a,   S ← diag(w) S + b sᵀ + k vᵀ (w = exp(gk)),   o = scale · Sᵀ q,
// two sweeps over S (kernels::rank2_update_readout: s; the rank-2 update with the readout). Threads over
// blocks of heads of every sequence (the decayed family's driver).
//
// The backward walks each sequence in reverse and needs every state S_{t−1}, which the transition cannot
// give back (diag(w) + b aᵀ may be singular). They are recomputed: a first forward sweep keeps the state at
// every C-th token (checkpoints), then each stretch of C tokens is replayed from its checkpoint, last
// stretch first, and walked backwards. C = ⌈√L⌉ for the longest sequence L: memory (L/C + C + 2) · K · V
// floats per thread, O(√L · K · V), for two forward sweeps' work.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/validate.hpp"
#include "kernels/decay_factors.hpp"
#include "kernels/low_rank_rows.hpp"
#include "kernels/pack.hpp"
#include "kernels/rows.hpp"
#include "linattn/dplr.hpp"
#include "ops/dplr/dplr_checks.hpp"
#include "ops/recurrence/recurrent_tasks.hpp"

namespace linattn {
namespace {

using detail::DplrProblem;
using detail::Sequence;

// Tokens a head advances in turn, its state kept in L1 (16 KiB at K = V = 64), after the block's rows of
// that many tokens are packed. A token at a time, each head's state came back from L2 at every token (a
// block's states outgrow L1), and the first sweep waited on it for half the kernel's time. While a run's
// tokens advance, the next run's rows are prefetched (head r of token i as head r advances token i): the
// inputs stream from memory at about the pace of the arithmetic, and packing a run that had not been
// prefetched took 40% of the time.
constexpr int64_t kTokenRun = 16;

void forward_tokens(const DplrProblem& p, TensorView out, ConstTensorView q, ConstTensorView k, ConstTensorView v,
                    ConstTensorView a, ConstTensorView b, ConstTensorView gk, std::span<float> state) {
  const int64_t N = p.N, K = p.K, V = p.V, run = std::clamp<int64_t>(detail::longest(p.sequences), 1, kTokenRun);
  // Per head and token of a run: TokenRows' q, k, v, g (= gk), its e^g (= w) and o, then a and b.
  const size_t rows_floats = detail::TokenRows::floats_per_head(K, V, K), token_floats = rows_floats + size_t(2 * K);
  detail::for_each_head_block(
      N, p.H, N * p.H * p.T * K * V, token_floats * size_t(run), 0,
      [&](int64_t n, int64_t h0, int64_t heads, float* scratch) {
        const Sequence& seq = p.sequences[size_t(n)];
        const auto ab = [&](int64_t i) { return scratch + (token_floats * size_t(i) + rows_floats) * size_t(heads); };
        std::vector<detail::TokenRows> rows;  // token i of a run
        for (int64_t i = 0; i < run; ++i) rows.emplace_back(scratch + token_floats * size_t(i * heads), heads, K, V, K);
        for (int64_t t0 = seq.begin; t0 < seq.end; t0 += run) {
          const int64_t tokens = std::min(run, seq.end - t0);
          for (int64_t i = 0, t = t0; i < tokens; ++i, ++t) {
            rows[size_t(i)].load(q, k, v, gk, seq.b, t, h0, p.scale, -1);
            kernels::pack_rows({ab(i), K, heads, K}, kernels::token_rows(a, seq.b, t, h0), 0, heads);
            kernels::pack_rows({ab(i) + heads * K, K, heads, K}, kernels::token_rows(b, seq.b, t, h0), 0, heads);
          }
          for (int64_t r = 0; r < heads; ++r) {
            float* S = state.data() + (seq.n * p.H + h0 + r) * K * V;
            for (int64_t i = 0; i < tokens; ++i) {
              if (t0 + run + i < seq.end)
                for (ConstTensorView in : {q, k, v, gk, a, b})
                  kernels::prefetch_rows(kernels::token_rows(in, seq.b, t0 + run + i, h0 + r), 0, 1, in.dim());
              const detail::TokenRows& x = rows[size_t(i)];
              kernels::rank2_update_readout(x.o + r * V, S, ab(i) + r * K, ab(i) + (heads + r) * K, x.k + r * K,
                                            x.v + r * V, x.q + r * K, x.a + r * K, K, V);
            }
          }
          for (int64_t i = 0; i < tokens; ++i) rows[size_t(i)].store(out, seq.b, t0 + i, h0);
        }
      });
}

// The packed rows of one token of one head, and the gradients the reverse sweep forms for it.
struct HeadToken {
  int64_t K, V;
  float *q, *k, *a, *b, *gk, *w, *ones, *v, *dout, *s, *ds;  // inputs and scratch
  float *dq, *dk, *da, *db, *dgk, *dv;                       // this token's gradients
  static size_t floats(int64_t K, int64_t V) { return size_t(12 * K + 5 * V); }
  HeadToken(float* f, int64_t K_, int64_t V_) : K(K_), V(V_) {
    float** ks[] = {&q, &k, &a, &b, &gk, &w, &ones, &dq, &dk, &da, &db, &dgk};
    for (float** x : ks) *x = f, f += K;
    float** vs[] = {&v, &dout, &s, &ds, &dv};
    for (float** x : vs) *x = f, f += V;
    std::fill_n(ones, K, 1.0f);
  }
  // Token t of batch row bi, head h: q (times scale), k, a, b, w = exp(gk), v and (when given) dout.
  void load(ConstTensorView qv, ConstTensorView kv, ConstTensorView vv, ConstTensorView av, ConstTensorView bv,
            ConstTensorView gv, ConstTensorView dv_out, int64_t bi, int64_t t, int64_t h, float scale) {
    const auto row = [&](float* dst, ConstTensorView x, int64_t width, float factor = 1.0f) {
      kernels::pack_rows({dst, width, 1, width}, kernels::token_rows(x, bi, t, h), 0, 1, factor);
    };
    row(q, qv, K, scale), row(k, kv, K), row(a, av, K), row(b, bv, K), row(gk, gv, K), row(v, vv, V);
    if (dv_out.data) row(dout, dv_out, V);
    // w = exp(gk) by the call TokenRows makes in the forward: the replayed states are the forward's, bit for bit.
    kernels::mul_exp_difference(w, ones, gk, nullptr, 1.0f, K);
  }
};

struct Grads {
  TensorView dq, dk, dv, da, db, dgk;
};

// One token backwards: dS holds ∂L/∂S_t from the later tokens on entry and ∂L/∂S_{t−1} on return; St and
// Sp are S_t and S_{t−1}. Writes the token's gradients to g.
void backward_token(HeadToken& x, float* dS, const float* St, const float* Sp, float scale, const Grads& g, int64_t bi,
                    int64_t t, int64_t h) {
  const int64_t K = x.K, V = x.V;
  // o = Sᵀ (scale·q): dS += (scale·q) doutᵀ; dq = scale · S_t dout. Then dv = dSᵀ k (the readout).
  kernels::rank1_update_readout(x.dv, dS, x.q, x.dout, x.k, K, V);
  kernels::row_dots(x.dq, St, V, x.dout, K, V);
  for (int64_t c = 0; c < K; ++c) x.dq[c] *= scale;
  // S_t = diag(w) S_{t−1} + b sᵀ + k vᵀ with s = S_{t−1}ᵀ a: dk = dS v, db = dS s, ds = dSᵀ b.
  std::fill_n(x.s, V, 0.0f), std::fill_n(x.ds, V, 0.0f);
  kernels::add_weighted_rows(x.s, Sp, V, x.a, K, V);
  kernels::add_weighted_rows(x.ds, dS, V, x.b, K, V);
  kernels::row_dots(x.dk, dS, V, x.v, K, V);
  kernels::row_dots(x.db, dS, V, x.s, K, V);
  // dgk = w ⊙ rowsum(dS ⊙ S_{t−1}) (∂w/∂gk = w); da = S_{t−1} ds.
  for (int64_t c = 0; c < K; ++c) {
    kernels::row_dots(x.dgk + c, dS + c * V, V, Sp + c * V, 1, V);
    x.dgk[c] *= x.w[c];
  }
  kernels::row_dots(x.da, Sp, V, x.ds, K, V);
  const auto store = [&](TensorView dst, const float* src, int64_t width) {
    kernels::unpack_rows(kernels::token_rows(dst, bi, t, h), 0, {src, width, 1, width}, 1);
  };
  store(g.dq, x.dq, K), store(g.dk, x.dk, K), store(g.dv, x.dv, V), store(g.da, x.da, K), store(g.db, x.db, K),
      store(g.dgk, x.dgk, K);
  // dS_{t−1} = diag(w) dS + a dsᵀ (the readout into s, which is not read again).
  kernels::rank1_update_readout(x.s, dS, x.a, x.ds, x.a, K, V, x.w);
}

// The checkpoint interval for sequences of at most L tokens: ⌈√L⌉ (at least 1).
int64_t checkpoint_interval(int64_t L) {
  int64_t C = std::max<int64_t>(1, int64_t(std::ceil(std::sqrt(double(L)))));
  while ((C - 1) * (C - 1) >= L && C > 1) --C;  // exact for a perfect square despite rounding
  return C;
}

void backward_tokens(const DplrProblem& p, const Grads& g, std::span<float> dinitial_state, ConstTensorView dout,
                     std::span<const float> dfinal_state, ConstTensorView q, ConstTensorView k, ConstTensorView v,
                     ConstTensorView a, ConstTensorView b, ConstTensorView gk, std::span<const float> initial_state) {
  const int64_t K = p.K, V = p.V, KV = K * V, C = checkpoint_interval(detail::longest(p.sequences));
  const int64_t checkpoints = (detail::longest(p.sequences) + C - 1) / C;
  // One head at a time per block: checkpoints, the replayed stretch (C + 1 states), dS, a token's rows.
  const size_t per_block = size_t((checkpoints + C + 2) * KV) + HeadToken::floats(K, V);
  detail::for_each_head_block(
      p.N, p.H, 2 * p.N * p.H * p.T * KV, 0, per_block, [&](int64_t n, int64_t h0, int64_t heads, float* scratch) {
        const Sequence& seq = p.sequences[size_t(n)];
        float* saved = scratch;                     // [checkpoints, K, V]: S before tokens 0, C, 2C, …
        float* stretch = saved + checkpoints * KV;  // [C + 1, K, V]: S before each token of a stretch, and after
        float* dS = stretch + (C + 1) * KV;         // [K, V]
        HeadToken x(dS + KV, K, V);
        const int64_t L = seq.end - seq.begin;
        for (int64_t h = h0; h < h0 + heads; ++h) {
          const int64_t index = seq.n * p.H + h;
          const auto load_state = [&](float* S, std::span<const float> from) {
            if (from.empty())
              std::fill_n(S, KV, 0.0f);
            else
              std::copy_n(from.data() + index * KV, KV, S);
          };
          const auto replay = [&](float* S, int64_t i) {  // S ← the state after token i of the sequence
            x.load(q, k, v, a, b, gk, {}, seq.b, seq.begin + i, h, 1.0f);
            kernels::rank2_update_readout(nullptr, S, x.a, x.b, x.k, x.v, nullptr, x.w, K, V);
          };
          // Sweep 1: the checkpoints.
          load_state(stretch, initial_state);
          for (int64_t i = 0; i < L; ++i) {
            if (i % C == 0) std::copy_n(stretch, KV, saved + i / C * KV);
            replay(stretch, i);
          }
          // Sweep 2, in reverse, one stretch at a time from its checkpoint.
          load_state(dS, dfinal_state);
          for (int64_t c = checkpoints - 1; c >= 0; --c) {
            const int64_t i0 = c * C, i1 = std::min(L, i0 + C);
            if (i0 >= L) continue;
            std::copy_n(saved + c * KV, KV, stretch);
            for (int64_t i = i0; i < i1; ++i) {
              std::copy_n(stretch + (i - i0) * KV, KV, stretch + (i - i0 + 1) * KV);
              replay(stretch + (i - i0 + 1) * KV, i);
            }
            for (int64_t i = i1 - 1; i >= i0; --i) {
              x.load(q, k, v, a, b, gk, dout, seq.b, seq.begin + i, h, p.scale);
              backward_token(x, dS, stretch + (i - i0 + 1) * KV, stretch + (i - i0) * KV, p.scale, g, seq.b,
                             seq.begin + i, h);
            }
          }
          if (!dinitial_state.empty()) std::copy_n(dS, KV, dinitial_state.data() + index * KV);
        }
      });
}

// The checks of a forward whose state (in and out) is `state`, then the tokens.
void checked_forward(const char* op, TensorView out, ConstTensorView q, ConstTensorView k, ConstTensorView v,
                     ConstTensorView a, ConstTensorView b, ConstTensorView gk, std::span<float> state,
                     const DplrOptions& options) {
  forward_tokens(detail::check_dplr_forward(op, out, q, k, v, a, b, gk, state, options), out, q, k, v, a, b, gk, state);
}

}  // namespace

void dplr_delta_rule_recurrent_forward(TensorView out, ConstTensorView q, ConstTensorView k, ConstTensorView v,
                                       ConstTensorView a, ConstTensorView b, ConstTensorView gk, std::span<float> state,
                                       const DplrOptions& options) {
  checked_forward("dplr_delta_rule_recurrent_forward", out, q, k, v, a, b, gk, state, options);
}

void dplr_delta_rule_step(TensorView out, ConstTensorView q, ConstTensorView k, ConstTensorView v, ConstTensorView a,
                          ConstTensorView b, ConstTensorView gk, RecurrentState& state, const DplrOptions& options) {
  const char* op = "dplr_delta_rule_step";
  const detail::DecodeState S =
      detail::check_decode_step<float>(op, state, !options.cu_seqlens.empty(), kDplrName, "kDplrName", q, v);
  if (S.bf16_storage)
    detail::fail(op,
                 "state.dtype() is bf16, expected f32 (the DPLR step keeps its state in fp32: RecurrentState(B, "
                 "H, K, V, kDplrName))");
  checked_forward(op, out, q, k, v, a, b, gk, state.S(), options);
  state.set_position(state.position() + q.seq());
}

void dplr_delta_rule_recurrent_backward(TensorView dq, TensorView dk, TensorView dv, TensorView da, TensorView db,
                                        TensorView dgk, std::span<float> dinitial_state, ConstTensorView dout,
                                        std::span<const float> dfinal_state, ConstTensorView q, ConstTensorView k,
                                        ConstTensorView v, ConstTensorView a, ConstTensorView b, ConstTensorView gk,
                                        const DplrOptions& options, std::span<const float> initial_state) {
  const char* op = "dplr_delta_rule_recurrent_backward";
  const DplrProblem p = detail::check_dplr_arguments(op, q, k, v, a, b, gk, options);
  // No gate of the shared kinds (gk is shaped like k), so no dg.
  detail::check_recurrence_backward(op, p, {}, dout, q, k, v, {{"a", a}, {"b", b}, {"gk", gk}},
                                    {{"dq", dq, k, "k"},
                                     {"dk", dk, k, "k"},
                                     {"da", da, k, "k"},
                                     {"db", db, k, "k"},
                                     {"dgk", dgk, k, "k"},
                                     {"dv", dv, v, "v"}},
                                    {}, dinitial_state, dfinal_state, initial_state);
  backward_tokens(p, {dq, dk, dv, da, db, dgk}, dinitial_state, dout, dfinal_state, q, k, v, a, b, gk, initial_state);
}

}  // namespace linattn
