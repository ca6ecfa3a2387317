// The decayed family's chunked drivers: the boundary check, then per (sequence, head) a sweep of
// chunks (decay_chunk.hpp), a sequence's heads in lockstep (the shared driver, recurrence/chunked_driver.hpp). The
// forward carries the state S: [K, V] from chunk to chunk; the backward runs the chunks forward once for the state
// before each, then in reverse with the state's gradient, and forms dg from each token's ∂L/∂b by a reverse cumulative
// sum. Work is split over (sequence, head) only, so every head's arithmetic is the same for any thread count. With
// grouped value heads (v with HV heads, q and k with HV / group) a head is a value head, reading q and k at its group's
// head. With query groups (q and out with R·H heads over k's and v's H) a head is a k/v head: its state advances once a
// chunk, after each of its R query heads has read it out (the forward; the backward refuses them).
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/validate.hpp"
#include "kernels/decay_factors.hpp"
#include "kernels/pack.hpp"
#include "ops/decay/decay_checks.hpp"
#include "ops/decay/decay_chunk.hpp"
#include "ops/recurrence/state_rows.hpp"

namespace linattn {
namespace {

using detail::DecayChunk;
using detail::DecayProblem;
using detail::RecurrenceHead;

void load_state(float* S, int64_t Vp, std::span<const float> from, const DecayProblem& p, int64_t index) {
  detail::load_state_rows(S, p.K, p.V, Vp, from, index);
}
void store_state(std::span<float> to, const float* S, int64_t Vp, const DecayProblem& p, int64_t index) {
  detail::store_state_rows(to, S, p.K, p.V, Vp, index);
}

// out[c] (or out[0], one gate per token) += Σ_v dS_T ⊙ a_T S_{T−1}: the last token's gate gradient from
// the final state. S_last: the state before the last chunk, which starts at t_last.
template <class E>
void final_gate_share(DecayChunk& chunk, const detail::RecurrenceHeadOf<E>& x, const detail::Sequence& s,
                      const float* S_last, int64_t t_last, const float* dS, double* out) {
  const DecayProblem& p = chunk.problem();
  const int64_t Vp = chunk.Vp(), T = s.end - 1;
  std::vector<float> S(S_last, S_last + p.K * Vp);
  if (T > t_last) {  // the last chunk's tokens before T
    chunk.load(x, t_last, T, T - t_last, DecayChunk::Sides::state);
    chunk.advance(S.data());
  }
  detail::with_gate_rows(x, [&](auto g) {
    for (int64_t c = 0; c < p.K; ++c) {
      const double a = std::exp(double(kernels::widened(g.at(T)[(p.decay == Decay::key ? c : 0) * g.col])));
      double sum = 0;
      for (int64_t e = 0; e < p.V; ++e) sum += double(dS[c * Vp + e]) * S[size_t(c * Vp + e)];
      out[p.decay == Decay::key ? c : 0] += a * sum;
    }
  });
}

// One head of a lockstep group (recurrence/chunked_driver.hpp) and what the backward's sweeps keep.
template <class E = float>
struct HeadRun : detail::HeadSweep<E> {
  std::vector<float> dS;            // [K, Vp]: the state's gradient
  std::vector<float> states;        // the state before each chunk, [chunks + 1, K, Vp]
  std::vector<int64_t> starts;      // each chunk's first token, then the sequence's end
  std::vector<double> gate_grad;    // the chunk's per-token ∂L/∂b, [C, gate columns]
  std::vector<double> gate_sum;     // Σ_{u ≥ t} ∂L/∂b_u so far, [gate columns]
  std::vector<double> final_share;  // the final state's part of the last token's ∂L/∂b
  std::vector<float> gate_rows;     // half dg: the chunk's dg in fp32, [C, gate columns]
  std::vector<float> group_sum;     // half, grouped value heads, a group's first head: its dq, dk sums [2, T, K]
};

// dg_t = Σ_{u ≥ t} ∂L/∂b_u for the chunk's n tokens from t0 (b_u is the sum of g up to u): the chunks come
// from the end, so the sums carry from one to the one before it (r.gate_sum). Half dg: formed in fp32, then
// rounded once. T: dg's element type (fp32 beside half gradients where the gate came in fp32).
template <class T, class E>
void store_gate_grads(View4<T> dg, HeadRun<E>& r, int64_t b, int64_t t0, int64_t n, int64_t cols) {
  if constexpr (std::is_same_v<T, float>) {
    kernels::reverse_running_sums(dg.data + dg.offset(b, t0, r.x.h, 0), dg.stride[1], dg.stride[3], r.gate_grad.data(),
                                  n, cols, r.gate_sum.data());
  } else {
    r.gate_rows.resize(size_t(n * cols));
    kernels::reverse_running_sums(r.gate_rows.data(), cols, 1, r.gate_grad.data(), n, cols, r.gate_sum.data());
    kernels::store_rows(kernels::head_rows(dg, b, r.x.h), t0, {r.gate_rows.data(), cols, n, cols});
  }
}

// The chunked drivers' view of a call's tensors, and a thread's chunk.
template <class E>
detail::RecurrenceHeadOf<E> call_tensors(const DecayProblem& p, View4<const E> q, View4<const E> k, View4<const E> v,
                                         View4<const E> g, View4<const float> g_wide) {
  return {q, k, v, g, {}, 0, 0, p.group, p.queries, g_wide};
}
auto chunk_maker(const DecayProblem& p, const DecayedAttentionOptions& options, bool backward) {
  return [&p, &options, backward] { return DecayChunk(p, options, backward); };
}

}  // namespace

template <class E>
void detail::decayed_forward_chunks(const DecayProblem& p, const DecayedAttentionOptions& options, View4<E> out,
                                    View4<const E> q, View4<const E> k, View4<const E> v, View4<const E> g,
                                    std::span<const float> initial_state, std::span<float> final_state,
                                    View4<const float> g_wide) {
  detail::lockstep_forward<DecayChunk>(p, options.chunk_size, call_tensors(p, q, k, v, g, g_wide), out, initial_state,
                                       final_state, chunk_maker(p, options, false));
}
#define LINATTN_DECAYED_FORWARD(E)                                                                                \
  template void detail::decayed_forward_chunks<E>(const DecayProblem&, const DecayedAttentionOptions&, View4<E>,  \
                                                  View4<const E>, View4<const E>, View4<const E>, View4<const E>, \
                                                  std::span<const float>, std::span<float>, View4<const float>);
LINATTN_DECAYED_FORWARD(float)
LINATTN_DECAYED_FORWARD(bf16)
LINATTN_DECAYED_FORWARD(f16)
#undef LINATTN_DECAYED_FORWARD

template <class E>
void detail::decayed_backward_chunks(const DecayProblem& p, const DecayedAttentionOptions& options, View4<E> dq,
                                     View4<E> dk, View4<E> dv, View4<E> dg, std::span<float> dinitial_state,
                                     View4<const E> dout, std::span<const float> dfinal_state, View4<const E> q,
                                     View4<const E> k, View4<const E> v, View4<const E> g,
                                     std::span<const float> initial_state, View4<const float> g_wide,
                                     View4<float> dg_wide) {
  const int64_t cols = p.gate_cols();
  const int64_t C = options.chunk_size;
  // In half precision with grouped value heads, a group's first head keeps the group's dq and dk rows summed in
  // fp32 (group_rows.hpp), rounded once after the reverse sweep.
  const bool group_sums = HalfType<E> && p.group > 1;
  // The backward's shares are whole groups of value heads (p.group of them reading one q/k head), in order:
  // their chunks add to the same rows of dq and dk (recurrence/group_rows.hpp).
  detail::for_each_head_group<DecayChunk, HeadRun<E>>(
      p, p.group, call_tensors(p, q, k, v, g, g_wide), chunk_maker(p, options, true),
      [&](DecayChunk& chunk, const detail::Sequence& s, std::vector<HeadRun<E>>& runs) {
        const int64_t KVp = p.K * chunk.Vp();
        // Sweep 1, forward: the state before each chunk (and after the last), and each chunk's start.
        for (HeadRun<E>& r : runs) {
          r.states.clear();
          r.states.reserve(size_t((s.end - s.begin) / C + 2) * KVp);
          r.states.resize(size_t(KVp));
          r.starts.assign(1, s.begin);
          load_state(r.states.data(), chunk.Vp(), initial_state, p, r.index);
        }
        for (int64_t w = s.begin; w < s.end; w += C) {
          const int64_t w_end = std::min(w + C, s.end);
          for (HeadRun<E>& r : runs)
            while (r.starts.back() < w_end) {
              r.starts.push_back(r.starts.back() +
                                 chunk.load(r.x, r.starts.back(), w_end, 0, DecayChunk::Sides::state));
              r.states.resize(r.states.size() + size_t(KVp));
              std::copy_n(r.states.end() - 2 * KVp, KVp, r.states.end() - KVp);
              chunk.advance(r.states.data() + r.states.size() - KVp);
            }
        }
        // Sweep 2, in reverse: the state's gradient from dfinal_state back to dinitial_state.
        for (HeadRun<E>& r : runs) {
          r.dS.resize(size_t(KVp));
          load_state(r.dS.data(), chunk.Vp(), dfinal_state, p, r.index);
          r.gate_grad.resize(size_t(C * cols)), r.gate_sum.assign(size_t(cols), 0.0);
          r.final_share.assign(size_t(cols), 0.0);
          // The final state's part of ∂L/∂b at the last token T: Σ_v dS_T ⊙ a_T S_{T−1}, with a_T S_{T−1}
          // formed directly (S_T − k_T v_Tᵀ would cancel two O(1) terms under strong decay).
          const size_t last = r.starts.size() - 2;
          if (cols > 0 && r.starts.size() >= 2)
            final_gate_share(chunk, r.x, s, r.states.data() + last * size_t(KVp), r.starts[last], r.dS.data(),
                             r.final_share.data());
          r.t = int64_t(last);  // the chunk the reverse sweep takes next
        }
        const int64_t tokens = s.end - s.begin;
        // The sums a run adds its dq (part 0) or dk (part 1) rows to: its group's first run's (none in fp32).
        auto group_sum = [&](size_t run, int64_t part) -> detail::GroupSum {
          if (!group_sums) return {};
          return {runs[run - run % size_t(p.group)].group_sum.data() + part * tokens * p.K, s.begin, p.K};
        };
        for (size_t run = 0; group_sums && run < runs.size(); run += size_t(p.group))
          runs[run].group_sum.resize(size_t(2 * tokens * p.K));
        for (int64_t w = s.begin + (s.end - s.begin - 1) / C * C; w >= s.begin && s.end > s.begin; w -= C)
          for (size_t run = 0; run < runs.size(); ++run) {
            HeadRun<E>& r = runs[run];
            for (; r.t >= 0 && r.starts[size_t(r.t)] >= w; --r.t) {
              const size_t i = size_t(r.t);
              const int64_t t0 = r.starts[i];
              const int64_t n = chunk.load(r.x, t0, s.end, r.starts[i + 1] - t0);
              const bool final_chunk = i + 2 == r.starts.size();
              std::fill_n(r.gate_grad.begin(), n * cols, 0.0);
              if (final_chunk)
                std::copy(r.final_share.begin(), r.final_share.end(), r.gate_grad.begin() + (n - 1) * cols);
              chunk.backward(r.states.data() + i * size_t(KVp), r.dS.data(), dout, dq, dk, dv, r.gate_grad.data(),
                             final_chunk, r.x, t0, group_sum(run, 0), group_sum(run, 1));
              if (cols > 0 && dg_wide.data)
                store_gate_grads(dg_wide, r, s.b, t0, n, cols);
              else if (cols > 0)
                store_gate_grads(dg, r, s.b, t0, n, cols);
            }
          }
        for (size_t run = 0; run < runs.size(); ++run) {
          const HeadRun<E>& r = runs[run];
          store_state(dinitial_state, r.dS.data(), chunk.Vp(), p, r.index);
          if (group_sums && r.x.h % p.group == 0) {  // a group's sums, rounded once
            detail::store_group_sum(dq, s.b, r.x.qk(), group_sum(run, 0), tokens);
            detail::store_group_sum(dk, s.b, r.x.qk(), group_sum(run, 1), tokens);
          }
        }
      });
}
#define LINATTN_DECAYED_BACKWARD(E)                                                                                  \
  template void detail::decayed_backward_chunks<E>(                                                                  \
      const DecayProblem&, const DecayedAttentionOptions&, View4<E>, View4<E>, View4<E>, View4<E>, std::span<float>, \
      View4<const E>, std::span<const float>, View4<const E>, View4<const E>, View4<const E>, View4<const E>,        \
      std::span<const float>, View4<const float>, View4<float>);
LINATTN_DECAYED_BACKWARD(float)
LINATTN_DECAYED_BACKWARD(bf16)
LINATTN_DECAYED_BACKWARD(f16)
#undef LINATTN_DECAYED_BACKWARD

void decayed_attention_forward(TensorView out, ConstTensorView q, ConstTensorView k, ConstTensorView v,
                               ConstTensorView g, const DecayedAttentionOptions& options,
                               std::span<const float> initial_state, std::span<float> final_state) {
  const char* op = "decayed_attention_forward";
  const DecayProblem p = detail::check_decay_arguments(op, q, k, v, g, options);
  detail::check_recurrence_forward_shapes(op, p, out, q, v, initial_state.size(), final_state.size());
  std::vector<boundary::Region> inputs = detail::input_regions(q, k, v, {{"g", g}});
  inputs.push_back(boundary::region("initial_state", initial_state));
  const boundary::Region outputs[] = {boundary::region("out", out), boundary::region("final_state", final_state)};
  detail::check_outputs(op, outputs, inputs);
  detail::decayed_forward_chunks(p, options, out, q, k, v, g, initial_state, final_state);
}

void decayed_attention_backward(TensorView dq, TensorView dk, TensorView dv, TensorView dg,
                                std::span<float> dinitial_state, ConstTensorView dout,
                                std::span<const float> dfinal_state, ConstTensorView q, ConstTensorView k,
                                ConstTensorView v, ConstTensorView g, const DecayedAttentionOptions& options,
                                std::span<const float> initial_state) {
  const char* op = "decayed_attention_backward";
  const DecayProblem p = detail::check_decay_arguments(op, q, k, v, g, options);
  detail::check_recurrence_backward(op, p, detail::decay_signature(g, options), dout, q, k, v, {{"g", g}},
                                    {{"dq", dq, q, "q"}, {"dk", dk, k, "k"}, {"dv", dv, v, "v"}}, dg, dinitial_state,
                                    dfinal_state, initial_state);
  detail::decayed_backward_chunks(p, options, dq, dk, dv, dg, dinitial_state, dout, dfinal_state, q, k, v, g,
                                  initial_state);
}

}  // namespace linattn
