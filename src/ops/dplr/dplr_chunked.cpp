// The DPLR delta rule's chunked forward: the boundary check, then per (sequence, head) a sweep of chunks
// (dplr_chunk.hpp) carrying the state S: [K, V] from chunk to chunk. Work is split over (sequence, head)
// only, so every head's arithmetic is the same for any thread count.
#include <omp.h>

#include <optional>
#include <vector>

#include "core/parallel_errors.hpp"
#include "linattn/dplr.hpp"
#include "ops/dplr/dplr_checks.hpp"
#include "ops/dplr/dplr_chunk.hpp"
#include "ops/recurrence/state_rows.hpp"

namespace linattn {

void dplr_delta_rule_forward(TensorView out, ConstTensorView q, ConstTensorView k, ConstTensorView v, ConstTensorView a,
                             ConstTensorView b, ConstTensorView gk, std::span<float> state,
                             const DplrOptions& options) {
  const detail::DplrProblem p =
      detail::check_dplr_forward("dplr_delta_rule_forward", out, q, k, v, a, b, gk, state, options);
  const int64_t tasks = int64_t(p.sequences.size()) * p.H;
  detail::ParallelErrors errors;  // out of memory included: nothing may leave the region
#pragma omp parallel if (tasks > 1)
  {
    // A thread's scratch, kept across its heads (a head allocates nothing).
    std::optional<detail::DplrChunk> chunk;
    std::vector<float> S;
    errors.run([&] { chunk.emplace(p, options.chunk_size), S.resize(size_t(p.K * chunk->Vp())); });
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < tasks; ++task)
      errors.run([&] {
        const detail::Sequence& s = p.sequences[size_t(task / p.H)];
        const detail::DplrHead x{q, k, v, a, b, gk, s.b, task % p.H};
        const int64_t index = s.n * p.H + x.h, Vp = chunk->Vp();
        detail::load_state_rows(S.data(), p.K, p.V, Vp, state, index);
        for (int64_t t = s.begin; t < s.end;) {
          const int64_t n = chunk->load(x, t, s.end);
          chunk->forward(S.data(), out, x, t);
          t += n;
        }
        detail::store_state_rows(state, S.data(), p.K, p.V, Vp, index);
      });
  }
  errors.rethrow();
}

}  // namespace linattn
