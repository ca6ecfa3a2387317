#include "ops/delta/delta_checks.hpp"

#include <cmath>

#include "core/validate.hpp"
#include "linattn/limits.hpp"

namespace linattn {

std::string delta_name(DeltaGate gate) {
  switch (gate) {
    case DeltaGate::none:
      return "delta_rule";
    case DeltaGate::token:
      return "gated_delta_rule";
    case DeltaGate::key:
      return "kda";
  }
  return "unknown";
}

namespace detail {

DeltaProblem check_delta_arguments(const char* op, ConstTensorView q, ConstTensorView k, ConstTensorView v,
                                   ConstTensorView beta, ConstTensorView g, const DeltaRuleOptions& o) {
  check_attention_inputs(op, q, k, v);
  check_extent(op, "k", k, 1, q.seq(), "q's sequence length (the delta rule is causal: T keys for T queries)");
  check_scale(op, o.scale);
  // Before anything is allocated: a chunk's scratch is quadratic in its length (limits.hpp).
  check_bounded(op, "options.chunk_size", o.chunk_size, int64_t(1), limits::kMaxDeltaChunkSize,
                "a chunk's scratch holds [chunk_size, chunk_size] matrices per thread");
  DeltaProblem p{q.batch(), q.seq(), q.heads(), q.dim(), v.dim(), q.batch(), 1.0f, o.gate, o.qk_l2norm, {}};
  p.scale = o.scale ? *o.scale : float(1.0 / std::sqrt(double(p.K)));
  const char* axes[] = {"q's batch", "q's sequence length", "q's heads"};
  const int64_t want[] = {p.B, p.T, p.H};
  check_view(op, "beta", beta);
  for (int axis = 0; axis < 3; ++axis) check_extent(op, "beta", beta, axis, want[axis], axes[axis]);
  check_extent(op, "beta", beta, 3, 1, "one β per head and token");
  if (p.gate_cols() > 0) {
    check_view(op, "g", g);
    for (int axis = 0; axis < 3; ++axis) check_extent(op, "g", g, axis, want[axis], axes[axis]);
    check_extent(op, "g", g, 3, p.gate_cols(),
                 o.gate == DeltaGate::key ? "q's head dim (KDA: one log decay per key dimension)"
                                          : "gated delta rule: one log decay per head and token");
  } else if (g.data) {
    fail_with(op, "g is given for '", delta_name(o.gate),
              "', expected an empty view (only gated_delta_rule and kda take a gate tensor)");
  }
  p.sequences = packed_sequences(op, p.B, p.T, o.cu_seqlens);
  p.N = int64_t(p.sequences.size());
  checked_mul(op, "N × H × K × V", checked_mul(op, "N × H", p.N, p.H), checked_mul(op, "K × V", p.K, p.V));
  return p;
}

void check_delta_state(const char* op, const char* name, size_t size, const DeltaProblem& p) {
  if (size == 0) return;
  check_size(op, name, int64_t(size), p.state_size(), "[N, H, K, V]");
}

std::vector<boundary::Region> delta_input_regions(ConstTensorView q, ConstTensorView k, ConstTensorView v,
                                                  ConstTensorView beta, ConstTensorView g) {
  std::vector<boundary::Region> r = decay_input_regions(q, k, v, g);
  r.push_back(boundary::region("beta", beta));
  return r;
}

}  // namespace detail
}  // namespace linattn
