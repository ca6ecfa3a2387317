// The decayed family token by token: per (sequence, head) and token, S = diag(a) S + k vᵀ and
// o = (scale · q)ᵀ S in one sweep over S (kernels::rank1_update_readout). Constant memory per token;
// the decode path and flash-linear-attention's fused_recurrent_*.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/validate.hpp"
#include "kernels/pack.hpp"
#include "kernels/rows.hpp"
#include "ops/decay/decay_checks.hpp"

namespace linattn {
namespace {

void recurrent(const char* op, TensorView out, ConstTensorView q, ConstTensorView k, ConstTensorView v,
               ConstTensorView g, std::span<float> state, const DecayedAttentionOptions& options) {
  const detail::DecayProblem p = detail::check_decay_arguments(op, q, k, v, g, options);
  detail::check_output_shape(op, "out", out, q, v);
  if (state.empty()) detail::fail_with(op, "state is empty, expected [N, H, K, V] = ", p.state_size(), " values");
  detail::check_decay_state(op, "state", state.size(), p);
  if (g.data)
    detail::check_outputs(
        op, {boundary::region("out", out), boundary::region("state", state)},
        {boundary::region("q", q), boundary::region("k", k), boundary::region("v", v), boundary::region("g", g)});
  else
    detail::check_outputs(op, {boundary::region("out", out), boundary::region("state", state)},
                          {boundary::region("q", q), boundary::region("k", k), boundary::region("v", v)});
  const int64_t tasks = int64_t(p.sequences.size()) * p.H, K = p.K, V = p.V;
#pragma omp parallel for schedule(dynamic, 1) if (tasks > 1 && p.T * K * V >= (1 << 16))
  for (int64_t task = 0; task < tasks; ++task) {
    const detail::DecaySequence& s = p.sequences[size_t(task / p.H)];
    const int64_t h = task % p.H;
    std::vector<float> qs(static_cast<size_t>(K)), ks(static_cast<size_t>(K)), vs(static_cast<size_t>(V)),
        o(static_cast<size_t>(V)), a(static_cast<size_t>(K)), gs(size_t(p.gate_cols()));
    std::fill(a.begin(), a.end(), float(std::exp(detail::constant_log_decay(options, h))));
    float* S = state.data() + (s.n * p.H + h) * K * V;
    const bool decays = p.decay != Decay::none;
    for (int64_t t = s.begin; t < s.end; ++t) {
      kernels::pack_rows({qs.data(), K, 1, K}, kernels::head_rows(q, s.b, h), t, 1, p.scale);
      kernels::pack_rows({ks.data(), K, 1, K}, kernels::head_rows(k, s.b, h), t, 1);
      kernels::pack_rows({vs.data(), V, 1, V}, kernels::head_rows(v, s.b, h), t, 1);
      if (p.gate_cols() > 0) {
        kernels::pack_rows({gs.data(), p.gate_cols(), 1, p.gate_cols()}, kernels::head_rows(g, s.b, h), t, 1);
        for (int64_t x = 0; x < K; ++x) a[size_t(x)] = std::exp(gs[size_t(p.decay == Decay::key ? x : 0)]);
      }
      kernels::rank1_update_readout(o.data(), S, ks.data(), vs.data(), qs.data(), K, V, decays ? a.data() : nullptr);
      kernels::unpack_rows(kernels::head_rows(out, s.b, h), t, {o.data(), V, 1, V}, 1);
    }
  }
}

}  // namespace

void decayed_recurrent_forward(TensorView out, ConstTensorView q, ConstTensorView k, ConstTensorView v,
                               ConstTensorView g, std::span<float> state, const DecayedAttentionOptions& options) {
  recurrent("decayed_recurrent_forward", out, q, k, v, g, state, options);
}

void decayed_step(TensorView out, ConstTensorView q, ConstTensorView k, ConstTensorView v, ConstTensorView g,
                  RecurrentState& state, const DecayedAttentionOptions& options) {
  const char* op = "decayed_step";
  if (!options.cu_seqlens.empty())
    detail::fail(op, "options.cu_seqlens is given, expected none (a decoding state holds one sequence per batch row)");
  const std::string name = decay_name(options.decay);
  if (state.feature_map() != name)
    detail::fail_with(op, "state is a '", state.feature_map(), "' state, expected a '", name,
                      "' state (RecurrentState(B, H, K, V, decay_name(options.decay)))");
  const std::array<int64_t, 4> seen{state.batch(), state.heads(), state.feature_dim(), state.value_dim()};
  const std::array<int64_t, 4> want{q.batch(), q.heads(), q.dim(), v.dim()};
  const char* what[] = {"batch()", "heads()", "feature_dim()", "value_dim()"};
  const char* because[] = {"q's batch", "q's heads", "q's head dim K", "v's value dim"};
  for (int i = 0; i < 4; ++i)
    if (seen[size_t(i)] != want[size_t(i)])
      detail::fail_with(op, "state.", what[i], " is ", seen[size_t(i)], ", expected ", want[size_t(i)], " (",
                        because[i], ")");
  recurrent(op, out, q, k, v, g, state.S(), options);
  state.set_position(state.position() + q.seq());
}

}  // namespace linattn
