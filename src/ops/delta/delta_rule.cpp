// The delta rule's chunked drivers: the boundary check, then per (sequence, head) a sweep of chunks
// (delta_chunk.hpp). The forward carries the state S: [K, V] from chunk to chunk, a sequence's heads in
// lockstep (the shared driver, recurrence/chunked_driver.hpp); the backward runs each head's chunks forward
// once for the state before each, then in reverse with the state's gradient, one head at a time (a head's
// stash of states is the sequence's length: lockstep would hold one per head of a group). Work is split over
// (sequence, head) only, so every head's arithmetic is the same for any thread count.
#include <omp.h>

#include <algorithm>
#include <optional>
#include <utility>
#include <vector>

#include "core/parallel_errors.hpp"
#include "core/validate.hpp"
#include "ops/delta/delta_checks.hpp"
#include "ops/delta/delta_chunk.hpp"
#include "ops/recurrence/state_rows.hpp"

namespace linattn {
namespace {

using detail::DeltaChunk;
using detail::DeltaProblem;
using detail::RecurrenceHead;

// A backward thread's scratch, kept across its heads (a head allocates nothing).
struct Scratch {
  // Constructed in place by std::optional::emplace (clang 14 has no parenthesised aggregate initialisation).
  explicit Scratch(DeltaChunk c) : chunk(std::move(c)) {}
  DeltaChunk chunk;
  std::vector<float> dS, states;      // [K, Vp]: the state's gradient; the state before each chunk, [chunks, K, Vp]
  std::vector<int64_t> starts;        // the chunk starts, then the sequence's end
  std::vector<float> dq_sum, dk_sum;  // half precision, grouped value heads: the group's dq, dk rows [tokens, K]
};

// Runs the backward's body(scratch, sequence, head) for every (sequence, value head), over the threads; a task
// takes `together` consecutive value heads (a divisor of H) in order on one thread.
template <class Body>
void for_each_head(const DeltaProblem& p, int64_t chunk_size, int64_t together, Body body) {
  const int64_t blocks = p.H / together, tasks = int64_t(p.sequences.size()) * blocks;
  detail::ParallelErrors errors;  // out of memory included: nothing may leave the region
#pragma omp parallel if (tasks > 1)
  {
    std::optional<Scratch> scratch;
    errors.run([&] {
      scratch.emplace(DeltaChunk(p, chunk_size, true));
      scratch->dS.resize(size_t(p.K * scratch->chunk.Vp()));
    });
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < tasks; ++task)
      errors.run([&] {
        for (int64_t h = task % blocks * together, end = h + together; h < end; ++h)
          body(*scratch, p.sequences[size_t(task / blocks)], h);
      });
  }
  errors.rethrow();
}

}  // namespace

template <class E>
void detail::delta_forward_chunks(const DeltaProblem& p, int64_t chunk_size, View4<E> out, View4<const E> q,
                                  View4<const E> k, View4<const E> v, View4<const E> beta, View4<const E> g,
                                  std::span<const float> initial_state, std::span<float> final_state,
                                  View4<const float> g_wide) {
  detail::lockstep_forward<DeltaChunk>(
      p, chunk_size, detail::RecurrenceHeadOf<E>{q, k, v, g, beta, 0, 0, p.group, p.queries, g_wide}, out,
      initial_state, final_state, [&p, chunk_size] { return DeltaChunk(p, chunk_size, false); });
}
#define LINATTN_DELTA_FORWARD(E)                                                                                \
  template void detail::delta_forward_chunks<E>(const DeltaProblem&, int64_t, View4<E>, View4<const E>,         \
                                                View4<const E>, View4<const E>, View4<const E>, View4<const E>, \
                                                std::span<const float>, std::span<float>, View4<const float>);
LINATTN_DELTA_FORWARD(float)
LINATTN_DELTA_FORWARD(bf16)
LINATTN_DELTA_FORWARD(f16)
#undef LINATTN_DELTA_FORWARD

template <class E>
void detail::delta_backward_chunks(const DeltaProblem& p, int64_t chunk_size, View4<E> dq, View4<E> dk, View4<E> dv,
                                   View4<E> dbeta, View4<E> dg, std::span<float> dinitial_state, View4<const E> dout,
                                   std::span<const float> dfinal_state, View4<const E> q, View4<const E> k,
                                   View4<const E> v, View4<const E> beta, View4<const E> g,
                                   std::span<const float> initial_state, View4<const float> g_wide,
                                   View4<float> dg_wide) {
  // With grouped value heads, the value heads of one q/k head all write that head's rows of dq and dk: one
  // task takes a whole group, in order, the first head writing the rows and the others adding to them. No
  // two threads touch the same rows (packed sequences hold disjoint tokens), nothing is locked or reduced
  // afterwards, and the sum's order is fixed, so the result is the same for any thread count. In half
  // precision the group sums its rows in fp32 (the thread's dq_sum, dk_sum) and rounds them once at its end.
  const bool group_sums = HalfType<E> && p.group > 1;
  for_each_head(p, chunk_size, p.group, [&](Scratch& scratch, const detail::Sequence& s, int64_t h) {
    DeltaChunk::Grads<E> grads{dq, dk, dv, dbeta, dg, dg_wide};
    const int64_t tokens = s.end - s.begin;
    if (group_sums) {
      scratch.dq_sum.resize(size_t(tokens * p.K)), scratch.dk_sum.resize(size_t(tokens * p.K));
      grads.dq_sum = {scratch.dq_sum.data(), s.begin, p.K}, grads.dk_sum = {scratch.dk_sum.data(), s.begin, p.K};
    }
    DeltaChunk& chunk = scratch.chunk;
    std::vector<float>&states = scratch.states, &dS = scratch.dS;
    std::vector<int64_t>& starts = scratch.starts;
    const detail::RecurrenceHeadOf<E> x{q, k, v, g, beta, s.b, h, p.group, 1, g_wide};
    const int64_t index = s.n * p.H + h, Vp = chunk.Vp(), KVp = p.K * Vp;
    // Sweep 1, forward: the state before each chunk, and each chunk's start (chunks may end early).
    states.resize(size_t(KVp));
    starts.assign(1, s.begin);
    detail::load_state_rows(states.data(), p.K, p.V, Vp, initial_state, index);
    while (starts.back() < s.end) {
      const int64_t n = chunk.load(x, starts.back(), s.end);
      if (starts.back() + n < s.end) {
        states.resize(states.size() + size_t(KVp));
        std::copy_n(states.end() - 2 * KVp, KVp, states.end() - KVp);
        chunk.advance(states.data() + states.size() - KVp);
      }
      starts.push_back(starts.back() + n);
    }
    // Sweep 2, in reverse: the state's gradient from dfinal_state back to dinitial_state.
    detail::load_state_rows(dS.data(), p.K, p.V, Vp, dfinal_state, index);
    for (int64_t i = int64_t(starts.size()) - 2; i >= 0; --i) {
      const int64_t t0 = starts[size_t(i)];
      chunk.load(x, t0, s.end, starts[size_t(i) + 1] - t0);
      chunk.backward(states.data() + i * KVp, dS.data(), dout, grads, x, t0);
    }
    detail::store_state_rows(dinitial_state, dS.data(), p.K, p.V, Vp, index);
    if (group_sums && h % p.group == p.group - 1) {  // the group's last value head: its sums rounded once
      detail::store_group_sum(dq, s.b, h / p.group, grads.dq_sum, tokens);
      detail::store_group_sum(dk, s.b, h / p.group, grads.dk_sum, tokens);
    }
  });
}
#define LINATTN_DELTA_BACKWARD(E)                                                                             \
  template void detail::delta_backward_chunks<E>(                                                             \
      const DeltaProblem&, int64_t, View4<E>, View4<E>, View4<E>, View4<E>, View4<E>, std::span<float>,       \
      View4<const E>, std::span<const float>, View4<const E>, View4<const E>, View4<const E>, View4<const E>, \
      View4<const E>, std::span<const float>, View4<const float>, View4<float>);
LINATTN_DELTA_BACKWARD(float)
LINATTN_DELTA_BACKWARD(bf16)
LINATTN_DELTA_BACKWARD(f16)
#undef LINATTN_DELTA_BACKWARD

void delta_rule_forward(TensorView out, ConstTensorView q, ConstTensorView k, ConstTensorView v, ConstTensorView beta,
                        ConstTensorView g, const DeltaRuleOptions& options, std::span<const float> initial_state,
                        std::span<float> final_state) {
  const char* op = "delta_rule_forward";
  const DeltaProblem p = detail::check_delta_arguments(op, q, k, v, beta, g, options);
  detail::check_recurrence_forward_shapes(op, p, out, q, v, initial_state.size(), final_state.size());
  std::vector<boundary::Region> inputs = detail::input_regions(q, k, v, {{"g", g}, {"beta", beta}});
  inputs.push_back(boundary::region("initial_state", initial_state));
  const boundary::Region outputs[] = {boundary::region("out", out), boundary::region("final_state", final_state)};
  detail::check_outputs(op, outputs, inputs);
  detail::delta_forward_chunks(p, options.chunk_size, out, q, k, v, beta, g, initial_state, final_state);
}

void delta_rule_backward(TensorView dq, TensorView dk, TensorView dv, TensorView dbeta, TensorView dg,
                         std::span<float> dinitial_state, ConstTensorView dout, std::span<const float> dfinal_state,
                         ConstTensorView q, ConstTensorView k, ConstTensorView v, ConstTensorView beta,
                         ConstTensorView g, const DeltaRuleOptions& options, std::span<const float> initial_state) {
  const char* op = "delta_rule_backward";
  const DeltaProblem p = detail::check_delta_arguments(op, q, k, v, beta, g, options);
  detail::check_recurrence_backward(
      op, p, detail::delta_signature(beta, g, options), dout, q, k, v, {{"g", g}, {"beta", beta}},
      {{"dq", dq, q, "q"}, {"dk", dk, k, "k"}, {"dv", dv, v, "v"}, {"dbeta", dbeta, beta, "beta"}}, dg, dinitial_state,
      dfinal_state, initial_state);
  detail::delta_backward_chunks(p, options.chunk_size, dq, dk, dv, dbeta, dg, dinitial_state, dout, dfinal_state, q, k,
                                v, beta, g, initial_state);
}

}  // namespace linattn
