#pragma once
// The token-by-token drivers of every recurrence family (their fused_recurrent_* forwards and decode
// steps): the split of a call into blocks of heads, and one token's rows of a block packed
// together. A decode step calls them once per token, so what a call costs beside its arithmetic counts.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <type_traits>
#include <utility>

#include "core/parallel_errors.hpp"
#include "core/threads.hpp"
#include "kernels/decay_factors.hpp"
#include "kernels/pack.hpp"
#include "kernels/rows.hpp"
#include "linattn/half.hpp"
#include "linattn/recurrent_state.hpp"
#include "linattn/view.hpp"
#include "ops/recurrence/recurrence_checks.hpp"
#include "ops/recurrence/sequences.hpp"

namespace linattn::detail {

// body(sequence, h0, n, scratch) over the heads [h0, h0 + n) of every sequence in [0, sequences), each block
// on one thread, which walks the block's tokens in order. A call below kRecurrentParallelWork takes each
// sequence's H heads as one block on the calling thread; a larger one splits each sequence's heads into
// enough blocks for two per thread, run over the threads. A block's heads are side by side in a token's
// rows ([B, T, H, K] storage: one stretch per token), which the hardware streams in; one head a block read
// a row every 2 KiB and waited on memory for most of its time. scratch: floats_per_head · n + floats_per_block
// floats of the running thread (kept_scratch).
template <class Body>
void for_each_head_block(int64_t sequences, int64_t H, int64_t work, size_t floats_per_head, size_t floats_per_block,
                         Body&& body) {
  if (sequences * H > 1 && work >= kRecurrentParallelWork) {
    const int64_t threads = omp_get_max_threads();
    const int64_t blocks = std::clamp<int64_t>((2 * threads + sequences - 1) / sequences, 1, H);
    const int64_t per_block = (H + blocks - 1) / blocks, tasks = sequences * blocks;
    ParallelErrors errors;  // out of memory included: nothing may leave the region
#pragma omp parallel
    {
      float* s = nullptr;
      errors.run([&] { s = kept_scratch(floats_per_head * size_t(per_block) + floats_per_block); });
#pragma omp for schedule(dynamic, 1)
      for (int64_t task = 0; task < tasks; ++task)
        errors.run([&] {
          const int64_t h0 = task % blocks * per_block;
          if (h0 < H) body(task / blocks, h0, std::min(per_block, H - h0), s);
        });
    }
    errors.rethrow();
  } else {
    float* s = kept_scratch(floats_per_head * size_t(H) + floats_per_block);
    for (int64_t n = 0; n < sequences; ++n) body(n, int64_t(0), H, s);
  }
}

// The states a token-by-token call advances ([N·H, K, V] of T: float, or bf16 for a decoding state kept in
// half the bytes): `to`, in place, or, with `from` given (fp32 only: the caller's initial states, the same size),
// out of place: each sequence's first token reads its state from `from` and writes the new one into `to` in the
// same sweep, so a decode step that keeps the caller's state copies nothing first (the copy was half the
// step's time); its later tokens run on `to`. An empty sequence's states pass from `from` to `to` as they are.
template <class T>
struct TokenStates {
  std::span<T> to;
  std::span<const T> from = {};  // empty: in place
  // Sequence s's head h (its state index s.n·H + h): where a token writes it, and where token t reads it.
  T* at(const Sequence& s, int64_t H, int64_t h, int64_t KV) const { return to.data() + (s.n * H + h) * KV; }
  const T* before(const Sequence& s, int64_t H, int64_t h, int64_t KV, int64_t t) const {
    return t == s.begin && !from.empty() ? from.data() + (s.n * H + h) * KV : at(s, H, h, KV);
  }
  // Heads [h0, h0 + n) of s when it has no token: `from`'s states into `to` (nothing in place).
  void pass_empty(const Sequence& s, int64_t H, int64_t h0, int64_t n, int64_t KV) const {
    if (s.begin == s.end && !from.empty())
      std::copy_n(from.data() + (s.n * H + h0) * KV, n * KV, to.data() + (s.n * H + h0) * KV);
  }
};
template <class T>
TokenStates(std::span<T>) -> TokenStates<T>;  // in place

// One token's rows of a block of n (value) heads, one head a row: q (times a factor), k, v, the gate g
// (cols a head: 0, 1 or K), the decay factors a = e^g ([n, K]; a driver with constant decays sets them
// once), the outputs o and a factor per row for the driver's use. With grouped value heads (group > 1)
// q and k hold the qk_rows q/k heads that the block's value heads read, each once: value head row r
// reads q_row(r), k_row(r).
struct TokenRows {
  int64_t n, K, V, cols, group;
  float *q, *k, *v, *a, *ones, *o, *g, *factors;
  int64_t first = 0, qk_rows = 0;  // the block's first value head, and its q/k heads (set by load)
  static size_t floats_per_head(int64_t K, int64_t V, int64_t cols) { return size_t(4 * K + 2 * V + cols + 1); }
  TokenRows(float* scratch, int64_t n_, int64_t K_, int64_t V_, int64_t cols_, int64_t group_ = 1)
      : n(n_),
        K(K_),
        V(V_),
        cols(cols_),
        group(group_),
        q(scratch),
        k(q + n * K),
        v(k + n * K),
        a(v + n * V),
        ones(a + n * K),
        o(ones + n * K),
        g(o + n * V),
        factors(g + n * cols) {
    if (cols > 1) std::fill_n(ones, n * K, 1.0f);  // the e^g of a gate per key (below)
  }
  // The q/k row of value head row r (of the block loaded last).
  int64_t qk_row(int64_t r) const { return (first + r) / group - first / group; }
  float* q_row(int64_t r) const { return q + qk_row(r) * K; }
  float* k_row(int64_t r) const { return k + qk_row(r) * K; }
  // Token t of batch row b, heads [h0, h0 + n); a from g when there is a gate. The same rows of token `next`
  // (when ≥ 0) are prefetched: the block's rows of each token lie apart from the last token's, and waiting
  // for them was a sixth of a long sequence's time. I: the views' element type (float, bf16 or f16; half
  // rows are widened as they are packed, so a half call copies nothing else).
  template <class I>
  void load(View4<const I> qv, View4<const I> kv, View4<const I> vv, View4<const I> gv, int64_t b, int64_t t,
            int64_t h0, float q_factor, int64_t next) {
    first = h0, qk_rows = (h0 + n - 1) / group - h0 / group + 1;
    const int64_t qk0 = h0 / group;
    if (next >= 0) {
      for (const auto& x : {qv, kv}) kernels::prefetch_rows(kernels::token_rows(x, b, next, qk0), 0, qk_rows, K);
      for (const auto& [x, width] : {std::pair{vv, V}, std::pair{gv, cols}})
        if (width > 0) kernels::prefetch_rows(kernels::token_rows(x, b, next, h0), 0, n, width);
    }
    load_queries(qv, b, t, q_factor);
    kernels::pack_rows({k, K, qk_rows, K}, kernels::token_rows(kv, b, t, qk0), 0, qk_rows);
    kernels::pack_rows({v, V, n, V}, kernels::token_rows(vv, b, t, h0), 0, n);
    if (cols == 0) return;
    kernels::pack_rows({g, cols, n, cols}, kernels::token_rows(gv, b, t, h0), 0, n);
    for (int64_t r = 0; r < n; ++r) {
      if (cols == 1)
        std::fill_n(a + r * K, K, std::exp(g[r]));
      else  // a = e^g, one head's row per call (the same bits as a call per head)
        kernels::mul_exp_difference(a + r * K, ones + r * K, g + r * K, nullptr, 1.0f, K);
    }
  }
  // Only q's rows of token t (of the block loaded last) from qv: with query groups, the next query head's
  // (qv a query_view of q).
  template <class I>
  void load_queries(View4<const I> qv, int64_t b, int64_t t, float q_factor) {
    kernels::pack_rows({q, K, qk_rows, K}, kernels::token_rows(qv, b, t, first / group), 0, qk_rows, q_factor);
  }
  // o into token t of out (rounded to nearest even for a half view).
  template <class O>
  void store(View4<O> out, int64_t b, int64_t t, int64_t h0) const {
    if constexpr (std::is_same_v<O, float>)
      kernels::unpack_rows(kernels::token_rows(out, b, t, h0), 0, {o, V, n, V}, n);
    else
      kernels::unpack_rows(kernels::token_rows(out, b, t, h0), 0, kernels::ConstTile{o, V, n, V});
  }
};

// o: [V] = qᵀ S of a state S: [K, V] after its token's update: on an fp32 state the same chain over S's rows
// as the update's own read-out (kernels::rank1_update_readout, delta_update_readout), the same bits; a bf16
// state's rows are read as stored, widened into `rows` ([K, V] floats).
inline void read_out(float* o, const float* S, const float* q, int64_t K, int64_t V, float*) {
  std::fill_n(o, V, 0.0f);
  kernels::add_weighted_rows(o, S, V, q, K, V);
}
inline void read_out(float* o, const bf16* S, const float* q, int64_t K, int64_t V, float* rows) {
  convert(std::span<float>(rows, size_t(K * V)), std::span<const bf16>(S, size_t(K * V)));
  read_out(o, rows, q, K, V, nullptr);
}
// The floats of read_out's rows a block needs: K · V for a bf16 state with query groups (queries > 1).
template <class T>
size_t widened_floats(int64_t queries, int64_t K, int64_t V) {
  return queries > 1 && !std::is_same_v<T, float> ? size_t(K * V) : 0;
}

// Query groups (q and out with queries · H heads): after token t has advanced the states of the block's k/v
// heads [h0, h0 + rows.n), with query head 0 of each read out in the update's sweep, each other query head
// i reads them: its q rows packed (times q_factor, then prepare(rows.q) for a family's own scaling), o = qᵀ S,
// stored into out's query head. widened: read_out's rows (widened_floats).
template <class I, class T, class Prepare>
void read_out_queries(TokenRows& rows, View4<const I> q, View4<I> out, const TokenStates<T>& states, const Sequence& s,
                      int64_t H, int64_t h0, int64_t t, int64_t queries, float q_factor, float* widened,
                      Prepare&& prepare) {
  const int64_t K = rows.K, V = rows.V;
  for (int64_t i = 1; i < queries; ++i) {
    rows.load_queries(query_view(q, queries, i), s.b, t, q_factor);
    prepare(rows.q);
    for (int64_t r = 0; r < rows.n; ++r)
      read_out(rows.o + r * V, states.at(s, H, h0 + r, K * V), rows.q_row(r), K, V, widened);
    rows.store(query_view(out, queries, i), s.b, t, h0);
  }
}

// The token-by-token sweep of every recurrence family: the call's heads in blocks over the threads
// (for_each_head_block), each sequence's tokens in order. Per block, begin(rows, h0, heads) once; per token the
// block's rows loaded (q times q_factor; the next token's prefetched), prepare(rows) for the family's own
// scaling, update(rows, r, S, before, b, t) advancing row r's state S (head h0 + r of batch row b; before: where
// an out-of-place call reads it from) and reading out its first query head into rows.o, the rows stored, then
// the other query heads read out (read_out_queries, with prepare_query(rows, x) for their q rows x). I: the
// views' element type; T: the states'.
template <class I, class T, class Begin, class Prepare, class Update, class PrepareQuery>
void token_sweep(const RecurrenceProblem& p, View4<I> out, View4<const I> q, View4<const I> k, View4<const I> v,
                 View4<const I> g, const TokenStates<T>& states, float q_factor, Begin&& begin, Prepare&& prepare,
                 Update&& update, PrepareQuery&& prepare_query) {
  const int64_t N = int64_t(p.sequences.size()), K = p.K, V = p.V, cols = p.gate_cols(), R = p.queries;
  const auto floats = TokenRows::floats_per_head(K, V, cols);
  for_each_head_block(N, p.H, N * p.H * p.T * K * V * (R + 1) / 2, floats, widened_floats<T>(R, K, V),
                      [&](int64_t n, int64_t h0, int64_t heads, float* scratch) {
                        const Sequence& s = p.sequences[size_t(n)];
                        TokenRows rows(scratch, heads, K, V, cols, p.group);
                        states.pass_empty(s, p.H, h0, heads, K * V);
                        begin(rows, h0, heads);
                        for (int64_t t = s.begin; t < s.end; ++t) {
                          rows.load(query_view(q, R, 0), k, v, g, s.b, t, h0, q_factor, t + 1 < s.end ? t + 1 : -1);
                          prepare(rows);
                          for (int64_t r = 0; r < heads; ++r)
                            update(rows, r, states.at(s, p.H, h0 + r, K * V), states.before(s, p.H, h0 + r, K * V, t),
                                   s.b, t);
                          rows.store(query_view(out, R, 0), s.b, t, h0);
                          read_out_queries(rows, q, out, states, s, p.H, h0, t, R, q_factor,
                                           scratch + floats * size_t(heads), [&](float* x) { prepare_query(rows, x); });
                        }
                      });
}

// A decode step's S, of either storage: its size and its region for the aliasing check.
struct DecodeState {
  bool bf16_storage;  // S kept as bf16 (S_bf16()), else fp32 (S())
  size_t size;
  boundary::Region region;
};

// The checks every decode step starts with (one sequence a batch row: no cu_seqlens; the state's kind, `name`,
// and shape against q and v) and its S. I: the element type of the step's views; an fp32 step names S "state",
// a half one "state.S()" or "state.S_bf16()", as each did before they shared this code.
template <class I>
DecodeState check_decode_step(const char* op, const RecurrentState& state, bool cu_seqlens, const std::string& name,
                              const char* name_call, ConstTensorView q_shape, ConstTensorView v_shape,
                              bool grouped = false) {
  if (cu_seqlens)
    fail(op, "options.cu_seqlens is given, expected none (a decoding state holds one sequence per batch row)");
  check_decode_state(op, state, name, name_call, q_shape, v_shape, grouped);
  const bool fp32 = std::is_same_v<I, float>;
  if (state.dtype() == DType::bf16)
    return {true, state.S_bf16().size(), boundary::region(fp32 ? "state" : "state.S_bf16()", state.S_bf16())};
  return {false, state.S().size(), boundary::region(fp32 ? "state" : "state.S()", state.S())};
}

// A decode step of element type I: its checks (check_decode_step, then check(S) for the family's own,
// which returns its problem), run(p, S) on the state of either storage (a span of float or of bf16), and
// the state's position advanced by q's tokens. grouped: the family takes grouped value heads.
template <class I, class Check, class Run>
void decode_step(const char* op, RecurrentState& state, bool cu_seqlens, const std::string& name, const char* name_call,
                 ConstTensorView q_shape, ConstTensorView v_shape, bool grouped, Check&& check, Run&& run) {
  const DecodeState S = check_decode_step<I>(op, state, cu_seqlens, name, name_call, q_shape, v_shape, grouped);
  const auto p = check(S);
  if (S.bf16_storage)
    run(p, state.S_bf16());
  else
    run(p, state.S());
  state.set_position(state.position() + q_shape.seq());
}

}  // namespace linattn::detail
