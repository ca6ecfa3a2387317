// One token of causal linear attention against a RecurrentState: S += φ(k) vᵀ, z += φ(k), then
// out = Sᵀ φ(q) / (φ(q)·z + eps). Constant time and memory per token: it touches S once.
#include <algorithm>
#include <vector>

#include "core/validate.hpp"
#include "kernels/rows.hpp"
#include "linattn/limits.hpp"
#include "ops/linear/linear_common.hpp"

namespace linattn {

void recurrent_step(TensorView out, ConstTensorView q, ConstTensorView k, ConstTensorView v, RecurrentState& state,
                    const LinearAttentionOptions& options) {
  const char* op = "recurrent_step";
  // The state is written too: out and q, k, v must lie outside S and z.
  const detail::LinearProblem p =
      detail::check_linear_forward(op, out, q, k, v, options, detail::state_regions(&state, "state.S()", "state.z()"));
  detail::check_extent(op, "q", q, 1, 1, "one token per step");
  detail::check_extent(op, "k", k, 1, 1, "one token per step");
  detail::check_state(op, "state", state, p, /*takes_bf16=*/true);
  // Before S changes: a loaded position of INT64_MAX overflowed here and then could not be saved.
  check_bounded("linattn::recurrent_step", "state.position()", state.position(), 0, limits::kMaxPosition - 1,
                "the step adds one token");
  const int64_t BH = p.B * p.H, M = p.M, E = p.E;
  // φ of every head's q and k row at once: one feature-map call each.
  std::vector<float> x(size_t(BH * p.D)), phi_q(size_t(BH * M)), phi_k(size_t(BH * M)), vals(size_t(BH * E)),
      num(size_t(BH * E));
  for (const auto& [src, phi, role] :
       {std::tuple{q, &phi_q, FeatureRole::query}, std::tuple{k, &phi_k, FeatureRole::key}}) {
    for (int64_t bh = 0; bh < BH; ++bh)
      kernels::pack_rows({x.data() + bh * p.D, p.D, 1, p.D}, detail::head_rows(src, bh / p.H, bh % p.H), 0, 1);
    p.map->forward(phi->data(), x.data(), BH, p.D, role);
  }
  for (int64_t bh = 0; bh < BH; ++bh) {
    kernels::pack_rows({vals.data() + bh * E, E, 1, E}, detail::head_rows(v, bh / p.H, bh % p.H), 0, 1);
  }
  // Heads are independent; threads only pay off once the states are large.
#pragma omp parallel for schedule(static) if (BH * M * E >= (1 << 18))
  for (int64_t bh = 0; bh < BH; ++bh) {
    float* z = state.z(bh / p.H, bh % p.H);
    const float* pk = phi_k.data() + bh * M;
    const float* pq = phi_q.data() + bh * M;
    // A padded token (key_lengths[b] == 0) adds nothing: its φ(k) and v count as 0.
    if (p.lengths[bh / p.H] == 0) {
      std::fill_n(phi_k.data() + bh * M, M, 0.0f);
      std::fill_n(vals.data() + bh * E, E, 0.0f);
    }
    for (int64_t m = 0; m < M; ++m) z[m] += pk[m];
    if (state.dtype() == DType::bf16)  // half the bytes of S: rows widened as loaded, rounded as stored
      kernels::rank1_update_readout(num.data() + bh * E, state.S_bf16(bh / p.H, bh % p.H), pk, vals.data() + bh * E, pq,
                                    M, E);
    else
      kernels::rank1_update_readout(num.data() + bh * E, state.S(bh / p.H, bh % p.H), pk, vals.data() + bh * E, pq, M,
                                    E);
    float* o = num.data() + bh * E;
    if (p.normalize) {
      float den = 0;
      for (int64_t m = 0; m < M; ++m) den += pq[m] * z[m];
      den += p.eps;
      for (int64_t e = 0; e < E; ++e) o[e] /= den;
    }
    kernels::unpack_rows(detail::head_rows(out, bh / p.H, bh % p.H), 0, {o, E, 1, E}, 1);
  }
  state.set_position(state.position() + 1);
}

}  // namespace linattn
