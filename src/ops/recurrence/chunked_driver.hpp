#pragma once
// The chunked driver every chunked recurrence family runs (the decayed family, the delta rule): the
// (sequence, head) sweeps over the threads, a sequence's heads in lockstep groups, and the forward's sweep
// with its state stash and prefetch. A family supplies its chunk: the scratch of one thread, with
//   int64_t load(const RecurrenceHeadOf<E>& x, int64_t t0, int64_t end)   tokens [t0, t0 + n) of head x, n
//   void forward(float* S, View4<E> out, x, int64_t t0, const NextChunk*) the chunk's out, S advanced
//   int64_t Vp() const                                                     the state's padded row pitch
//
// Why lockstep: on [B, T, H, K] storage a chunk's rows of one head lie H·K elements apart. The heads of a
// group advance window by window of C tokens (every head's chunks of the window before the next window), so
// that a window's rows of all the group's heads are read in memory order, and each chunk's products
// prefetch the rows the next one reads (docs/decisions.md, "Tiles are walked in memory order": the causal
// linear forward on [B, N, H, D] went from 126 to 77 ms). Work splits over (sequence, group of heads); a
// head's arithmetic does not depend on its group or the thread count.
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "core/parallel_errors.hpp"
#include "kernels/gemm.hpp"
#include "kernels/pack.hpp"
#include "kernels/rows_ahead.hpp"
#include "ops/recurrence/recurrence_checks.hpp"
#include "ops/recurrence/state_rows.hpp"

namespace linattn::detail {

// The rows of the chunk a thread takes next, for this chunk's products to prefetch while they run: its
// q and k during the read-out, its v and g during the state's update.
struct NextChunk {
  kernels::RowsAhead qk, vg;
};
// Tokens [t0, t0 + n) of head x (n ≤ 0: nothing to fetch); views whose rows are not contiguous are left out,
// as are half-precision ones (RowsAhead counts floats).
template <class E>
NextChunk next_chunk_rows(const RecurrenceHeadOf<E>& x, int64_t t0, int64_t n) {
  if constexpr (std::is_same_v<E, float>) {
    // q's first query head of x at head x.qk() of its view, beside k's rows (the same head without query groups).
    return {kernels::head_rows_ahead(query_view(x.q, x.queries, 0), x.k, false, x.b, x.qk(), t0, n),
            kernels::head_rows_ahead(x.v, x.g, false, x.b, x.h, t0, n)};
  } else {
    return {};
  }
}

// f(head x.h's rows of the log decays): g_wide where the call gave them in fp32 beside half tensors, else g.
template <class E, class F>
void with_gate_rows(const RecurrenceHeadOf<E>& x, F&& f) {
  if (x.g_wide.data)
    f(kernels::head_rows(x.g_wide, x.b, x.h));
  else
    f(kernels::head_rows(x.g, x.b, x.h));
}

// What a head's sweep keeps: its tensors (x), its state's index among the [N, H, K, V] states, the next token
// (t) and the state (S: [K, Vp]). A family's backward extends it with what its sweeps keep.
template <class E>
struct HeadSweep {
  RecurrenceHeadOf<E> x;
  int64_t index = 0;
  int64_t t = 0;
  std::vector<float> S;
};

// The rows that follow runs[i]'s chunk ending at t in the lockstep order of the window [w, w_end) (every head
// enters a window at its start): the rest of its window, else the next head's share of it, else the first
// head's next window.
template <class Run>
NextChunk next_in_lockstep(const std::vector<Run>& runs, size_t i, int64_t t, int64_t w, int64_t w_end, int64_t end,
                           int64_t C) {
  if (t < w_end) return next_chunk_rows(runs[i].x, t, w_end - t);
  if (i + 1 < runs.size()) return next_chunk_rows(runs[i + 1].x, w, w_end - w);
  return next_chunk_rows(runs[0].x, w_end, std::min(C, end - w_end));
}

// Runs body(chunk, sequence, runs) for every group of heads of every sequence, over the threads, each thread
// with its own chunk (make_chunk()) and runs (Run: a HeadSweep or one extending it, its x, index and t set
// from `tensors`, a head of which each run is). A group takes a share of the heads only when there are fewer
// sequences than threads; its shares are whole units of `unit` heads, in order (a backward's group of value
// heads reading one q/k head, whose chunks add to the same rows of dq and dk).
template <class Chunk, class Run, class E, class MakeChunk, class Body>
void for_each_head_group(const RecurrenceProblem& p, int64_t unit, const RecurrenceHeadOf<E>& tensors,
                         MakeChunk make_chunk, Body body) {
  const int64_t sequences = int64_t(p.sequences.size()), threads = std::max(1, omp_get_max_threads());
  const int64_t units = p.H / unit;
  const int64_t groups = std::clamp<int64_t>((threads + sequences - 1) / std::max<int64_t>(sequences, 1), 1, units);
  const int64_t per_group = (units + groups - 1) / groups * unit, tasks = sequences * groups;
  ParallelErrors errors;  // out of memory included: nothing may leave the region
#pragma omp parallel if (tasks > 1)
  {
    std::optional<Chunk> chunk;
    std::vector<Run> runs;
    errors.run([&] { chunk.emplace(make_chunk()); });
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < tasks; ++task)
      errors.run([&] {
        const Sequence& s = p.sequences[size_t(task / groups)];
        const int64_t h0 = task % groups * per_group, h1 = std::min(p.H, h0 + per_group);
        if (h0 >= h1) return;
        runs.resize(size_t(h1 - h0));
        for (int64_t h = h0; h < h1; ++h) {
          Run& r = runs[size_t(h - h0)];
          r.x = tensors, r.x.b = s.b, r.x.h = h, r.index = s.n * p.H + h, r.t = s.begin;
        }
        body(*chunk, s, runs);
      });
  }
  errors.rethrow();
}

// The chunked forward: each head's state from initial_state (empty: zero), every chunk's out, the final
// state into final_state (empty: not wanted). C: the lockstep window, the chunk size asked for.
template <class Chunk, class E, class MakeChunk>
void lockstep_forward(const RecurrenceProblem& p, int64_t C, const RecurrenceHeadOf<E>& tensors, View4<E> out,
                      std::span<const float> initial_state, std::span<float> final_state, MakeChunk make_chunk) {
  for_each_head_group<Chunk, HeadSweep<E>>(
      p, 1, tensors, make_chunk, [&](Chunk& chunk, const Sequence& s, std::vector<HeadSweep<E>>& runs) {
        for (HeadSweep<E>& r : runs) {
          r.S.resize(size_t(p.K * chunk.Vp()));
          load_state_rows(r.S.data(), p.K, p.V, chunk.Vp(), initial_state, r.index);
        }
        for (int64_t w = s.begin; w < s.end; w += C) {
          const int64_t w_end = std::min(w + C, s.end);
          for (size_t i = 0; i < runs.size(); ++i) {
            HeadSweep<E>& r = runs[i];
            while (r.t < w_end) {
              const int64_t n = chunk.load(r.x, r.t, w_end);
              const NextChunk next = next_in_lockstep(runs, i, r.t + n, w, w_end, s.end, C);
              chunk.forward(r.S.data(), out, r.x, r.t, &next);
              r.t += n;
            }
          }
        }
        for (HeadSweep<E>& r : runs) store_state_rows(final_state, r.S.data(), p.K, p.V, chunk.Vp(), r.index);
      });
}

}  // namespace linattn::detail
