#include "ops/dplr/dplr_checks.hpp"

#include <algorithm>
#include <cmath>
#include <utility>

#include "core/validate.hpp"

namespace linattn::detail {

int64_t DplrProblem::longest() const {
  int64_t n = 0;
  for (const DecaySequence& s : sequences) n = std::max(n, s.end - s.begin);
  return n;
}

DplrProblem check_dplr_arguments(const char* op, ConstTensorView q, ConstTensorView k, ConstTensorView v,
                                 ConstTensorView a, ConstTensorView b, ConstTensorView gk, const DplrOptions& o) {
  check_attention_inputs(op, q, k, v);
  check_extent(op, "k", k, 1, q.seq(), "q's sequence length (the recurrence is causal: T keys for T queries)");
  check_scale(op, o.scale);
  // a, b and gk: one value per key dimension of each head and token, like k.
  check_like(op, "a", a, k, "k");
  check_like(op, "b", b, k, "k");
  check_like(op, "gk", gk, k, "k");
  DplrProblem p{q.batch(), q.seq(), q.heads(), q.dim(), v.dim(), q.batch(), 1.0f, {}};
  p.scale = o.scale ? *o.scale : float(1.0 / std::sqrt(double(p.K)));
  p.sequences = packed_sequences(op, p.B, p.T, o.cu_seqlens);
  p.N = int64_t(p.sequences.size());
  checked_mul(op, "N × H × K × V", checked_mul(op, "N × H", p.N, p.H), checked_mul(op, "K × V", p.K, p.V));
  return p;
}

void check_dplr_state(const char* op, const char* name, size_t size, const DplrProblem& p) {
  if (size == 0) return;
  check_size(op, name, int64_t(size), p.state_size(), "[N, H, K, V]");
}

std::vector<boundary::Region> dplr_input_regions(ConstTensorView q, ConstTensorView k, ConstTensorView v,
                                                 ConstTensorView a, ConstTensorView b, ConstTensorView gk) {
  std::vector<boundary::Region> r = decay_input_regions(q, k, v, {});  // q, k, v
  for (const auto& [name, x] : {std::pair{"a", a}, std::pair{"b", b}, std::pair{"gk", gk}})
    r.push_back(boundary::region(name, x));
  return r;
}

}  // namespace linattn::detail
