#include "ops/decay/decay_checks.hpp"

#include <algorithm>
#include <array>
#include <cmath>

#include "core/validate.hpp"
#include "linattn/limits.hpp"

namespace linattn {

std::string decay_name(Decay decay) {
  switch (decay) {
    case Decay::none:
      return "linear";
    case Decay::retention:
      return "retention";
    case Decay::head:
      return "lightning";
    case Decay::token:
      return "simple_gla";
    case Decay::key:
      return "gla";
  }
  return "unknown";
}

float retention_log_decay(int64_t head) { return float(std::log1p(-std::exp2(-5.0 - double(head)))); }

namespace detail {

double constant_log_decay(const DecayedAttentionOptions& options, int64_t h) {
  switch (options.decay) {
    case Decay::retention:
      return std::log1p(-std::exp2(-5.0 - double(h)));
    case Decay::head:
      return double(options.g_gamma[size_t(h)]);
    default:
      return 0.0;
  }
}

DecayProblem check_decay_arguments(const char* op, ConstTensorView q, ConstTensorView k, ConstTensorView v,
                                   ConstTensorView g, const DecayedAttentionOptions& o) {
  check_attention_inputs(op, q, k, v);
  check_extent(op, "k", k, 1, q.seq(), "q's sequence length (the decayed family is causal: T keys for T queries)");
  check_scale(op, o.scale);
  // Before anything is allocated: a chunk's scratch is quadratic in its length (limits.hpp).
  check_bounded(op, "options.chunk_size", o.chunk_size, int64_t(1), limits::kMaxDecayChunkSize,
                "a chunk's scratch holds [chunk_size, chunk_size] matrices per thread");
  DecayProblem p{q.batch(), q.seq(), q.heads(), q.dim(), v.dim(), q.batch(), 1.0f, o.decay, {}};
  p.scale = o.scale ? *o.scale : float(1.0 / std::sqrt(double(p.K)));
  const std::string name = decay_name(o.decay);
  if (p.gate_cols() > 0) {
    check_view(op, "g", g);
    const char* because[] = {"q's batch", "q's sequence length", "q's heads",
                             o.decay == Decay::key ? "q's head dim (GLA: one log decay per key dimension)"
                                                   : "simple GLA: one log decay per head and token"};
    const int64_t want[] = {p.B, p.T, p.H, p.gate_cols()};
    for (int axis = 0; axis < 4; ++axis) check_extent(op, "g", g, axis, want[axis], because[axis]);
  } else if (g.data) {
    fail_with(op, "g is given for decay '", name,
              "', expected an empty view (only simple_gla and gla take a gate tensor)");
  }
  if (o.decay == Decay::head)
    check_size(op, "options.g_gamma", int64_t(o.g_gamma.size()), p.H, "[H], one log decay per head");
  else if (!o.g_gamma.empty())
    fail_with(op, "options.g_gamma is given for decay '", name, "', expected it only with Decay::head");
  p.sequences = packed_sequences(op, p.B, p.T, o.cu_seqlens);
  p.N = int64_t(p.sequences.size());
  checked_mul(op, "N × H × K × V", checked_mul(op, "N × H", p.N, p.H), checked_mul(op, "K × V", p.K, p.V));
  return p;
}

int64_t chunk_rows(const std::vector<DecaySequence>& sequences, int64_t chunk_size) {
  int64_t longest = 1;
  for (const DecaySequence& s : sequences) longest = std::max(longest, s.end - s.begin);
  return std::min(chunk_size, longest);
}

std::vector<DecaySequence> packed_sequences(const char* op, int64_t B, int64_t T, std::span<const int64_t> cu) {
  std::vector<DecaySequence> sequences;
  if (cu.empty()) {
    for (int64_t b = 0; b < B; ++b) sequences.push_back({b, 0, T, b});
    return sequences;
  }
  if (B != 1)
    fail_with(op, "q's batch is ", B, " with cu_seqlens, expected 1 (pack the sequences along the time axis)");
  if (cu.size() < 2) fail_with(op, "cu_seqlens has ", cu.size(), " values, expected N + 1 ≥ 2 (0, then each end)");
  if (cu.front() != 0) fail_with(op, "cu_seqlens[0] is ", cu.front(), ", expected 0");
  if (cu.back() != T) fail_with(op, "cu_seqlens[", cu.size() - 1, "] is ", cu.back(), ", expected T = ", T);
  for (size_t i = 1; i < cu.size(); ++i) {
    if (cu[i] < cu[i - 1])
      fail_with(op, "cu_seqlens[", i, "] is ", cu[i], ", less than cu_seqlens[", i - 1, "] = ", cu[i - 1],
                ", expected ascending offsets");
    sequences.push_back({0, cu[i - 1], cu[i], int64_t(i - 1)});
  }
  return sequences;
}

std::vector<boundary::Region> decay_input_regions(ConstTensorView q, ConstTensorView k, ConstTensorView v,
                                                  ConstTensorView g) {
  std::vector<boundary::Region> r{boundary::region("q", q), boundary::region("k", k), boundary::region("v", v)};
  if (g.data) r.push_back(boundary::region("g", g));
  return r;
}

void check_decode_state(const char* op, const RecurrentState& state, const std::string& name, const char* name_call,
                        ConstTensorView q, ConstTensorView v) {
  if (state.dtype() != DType::f32 && state.dtype() != DType::bf16)
    fail_with(op, "state.dtype() is ", dtype_name(state.dtype()), ", expected f32 or bf16");
  if (state.feature_map() != name)
    fail_with(op, "state is a '", state.feature_map(), "' state, expected a '", name,
              "' state (RecurrentState(B, H, K, V, ", name_call, "))");
  const std::array<int64_t, 4> seen{state.batch(), state.heads(), state.feature_dim(), state.value_dim()};
  const std::array<int64_t, 4> want{q.batch(), q.heads(), q.dim(), v.dim()};
  const char* what[] = {"batch()", "heads()", "feature_dim()", "value_dim()"};
  const char* because[] = {"q's batch", "q's heads", "q's head dim K", "v's value dim"};
  for (int i = 0; i < 4; ++i)
    if (seen[size_t(i)] != want[size_t(i)])
      fail_with(op, "state.", what[i], " is ", seen[size_t(i)], ", expected ", want[size_t(i)], " (", because[i], ")");
  // Refused before the state changes: a position past the bound could not be saved.
  check_bounded(op, "state.position()", state.position(), 0, limits::kMaxPosition - q.seq(),
                "the step adds q's tokens");
}

void check_decay_state(const char* op, const char* name, size_t size, const DecayProblem& p) {
  if (size == 0) return;
  check_size(op, name, int64_t(size), p.state_size(), "[N, H, K, V]");
}

}  // namespace detail
}  // namespace linattn
