// One token of causal linear attention against a RecurrentState: S += φ(k) vᵀ, z += φ(k), then
// out = Sᵀ φ(q) / (φ(q)·z + eps). Constant time and memory per token: it touches S once. q, k, v and
// out may be fp32, bf16 or f16: half rows are widened as they are packed and the output rounded as it
// is stored, so a half step reads its tensors in place (no fp32 copies, no conversion pass).
#include <algorithm>
#include <vector>

#include "core/threads.hpp"
#include "core/validate.hpp"
#include "kernels/half_views.hpp"
#include "kernels/rows.hpp"
#include "linattn/half_attention.hpp"
#include "linattn/limits.hpp"
#include "ops/linear/linear_common.hpp"

namespace linattn {
namespace {

// The checks of one token but the aliasing rule, which each caller runs on its own element type.
void check_step(const char* op, ConstTensorView q, ConstTensorView k, const RecurrentState& state,
                const detail::LinearProblem& p) {
  detail::check_extent(op, "q", q, 1, 1, "one token per step");
  detail::check_extent(op, "k", k, 1, 1, "one token per step");
  detail::check_state(op, "state", state, p, /*takes_bf16=*/true);
  // Before S changes: a loaded position of INT64_MAX overflowed here and then could not be saved.
  check_bounded("linattn::recurrent_step", "state.position()", state.position(), 0, limits::kMaxPosition - 1,
                "the step adds one token");
}

// Calls body(b, h, count) for the runs of heads [h, h + count) of one batch row that make up the
// (batch, head) pairs [first, last), flattened as b·H + h.
template <class Body>
void for_each_batch_run(int64_t first, int64_t last, int64_t H, Body&& body) {
  for (int64_t bh = first; bh < last;) {
    const int64_t count = std::min(last, (bh / H + 1) * H) - bh;
    body(bh / H, bh % H, count);
    bh += count;
  }
}

// The token for every (batch, head); T: the element type of q, k, v and out.
template <class T>
void step(View4<T> out, View4<const T> q, View4<const T> k, View4<const T> v, RecurrentState& state,
          const detail::LinearProblem& p) {
  const int64_t BH = p.B * p.H, M = p.M, E = p.E, D = p.D;
  // x: [BH, D] rows of q, then of k; φ(q), φ(k): [BH, M]; v and the numerators: [BH, E]; 1/den: [BH].
  float *x = detail::kept_scratch(size_t(BH * (D + 2 * M + 2 * E + 1))), *phi_q = x + BH * D, *phi_k = phi_q + BH * M,
        *vals = phi_k + BH * M, *num = vals + BH * E, *scale = num + BH * E;
  // Heads [first, last): loaded, mapped and stored by one thread, a batch row's heads in one call each.
  const auto heads = [&](int64_t first, int64_t last) {
    const auto runs = [&](auto&& body) { for_each_batch_run(first, last, p.H, body); };
    // φ of the thread's q and k rows at once: one feature-map call each.
    const auto map_rows = [&](View4<const T> src, float* phi, FeatureRole role) {
      runs([&](int64_t b, int64_t h, int64_t n) {
        kernels::pack_rows({x + (b * p.H + h) * D, D, n, D}, kernels::token_rows(src, b, 0, h), 0, n);
      });
      p.map->forward(phi + first * M, x + first * D, last - first, D, role);
    };
    map_rows(q, phi_q, FeatureRole::query);
    map_rows(k, phi_k, FeatureRole::key);
    runs([&](int64_t b, int64_t h, int64_t n) {
      // A padded token (key_lengths[b] == 0) adds nothing: its φ(k) and v count as 0.
      kernels::pack_rows({vals + (b * p.H + h) * E, E, n, E}, kernels::token_rows(v, b, 0, h), 0,
                         p.lengths[b] == 0 ? 0 : n);
      if (p.lengths[b] == 0) std::fill_n(phi_k + (b * p.H + h) * M, n * M, 0.0f);
    });
    for (int64_t bh = first; bh < last; ++bh) {
      const int64_t b = bh / p.H, h = bh % p.H;
      float* z = state.z(b, h);
      const float *pk = phi_k + bh * M, *pq = phi_q + bh * M;
      kernels::add_weighted_rows(z, pk, M, nullptr, 1, M);
      if (state.dtype() == DType::bf16)  // half the bytes of S: rows widened as loaded, rounded as stored
        kernels::rank1_update_readout(num + bh * E, state.S_bf16(b, h), pk, vals + bh * E, pq, M, E);
      else
        kernels::rank1_update_readout(num + bh * E, state.S(b, h), pk, vals + bh * E, pq, M, E);
      scale[bh] = 1.0f;
      if (p.normalize) {
        float den;
        kernels::row_dots(&den, pq, M, z, 1, M);
        scale[bh] = 1.0f / (den + p.eps);
      }
    }
    kernels::scale_rows(num + first * E, E, num + first * E, E, scale + first, last - first, E);
    runs([&](int64_t b, int64_t h, int64_t n) {
      const kernels::ConstTile rows{num + (b * p.H + h) * E, E, n, E};
      if constexpr (std::is_same_v<T, float>)
        kernels::unpack_rows(kernels::token_rows(out, b, 0, h), 0, rows, n);
      else
        kernels::unpack_rows(kernels::token_rows(out, b, 0, h), 0, rows);
    });
  };
  // Heads are independent; threads only pay off once the states are large, and each thread takes its own
  // heads' rows too (on a large state a serial load of every head's rows left the other thread waiting
  // for a quarter of the step). A small step enters no parallel region: its start and end cost about
  // what the step's arithmetic does.
  if (BH > 1 && BH * M * E >= detail::kRecurrentParallelWork) {
#pragma omp parallel
    {
      const auto [first, last] = detail::thread_share(BH);
      heads(first, last);
    }
  } else {
    heads(0, BH);
  }
  state.set_position(state.position() + 1);
}

}  // namespace

void recurrent_step(TensorView out, ConstTensorView q, ConstTensorView k, ConstTensorView v, RecurrentState& state,
                    const LinearAttentionOptions& options) {
  const char* op = "recurrent_step";
  // The state is written too: out and q, k, v must lie outside S and z.
  const detail::LinearProblem p =
      detail::check_linear_forward(op, out, q, k, v, options, detail::state_regions(&state, "state.S()", "state.z()"));
  check_step(op, q, k, state, p);
  step(out, q, k, v, state, p);
}

template <HalfType H>
void recurrent_step(View4<H> out, HalfIn<H> q, HalfIn<H> k, HalfIn<H> v, RecurrentState& state,
                    const LinearAttentionOptions& options) {
  const char* op = "recurrent_step";
  kernels::HalfCall<H> c(op);  // the aliasing rule on the half views themselves; nothing is copied
  c.in_place("q", q), c.in_place("k", k), c.in_place("v", v), c.out_in_place("out", out);
  c.out_state(state);
  c.out_region(boundary::region("state.z()", state.z()));
  c.check();
  using kernels::shape_view;
  const detail::LinearProblem p =
      detail::check_linear_forward_shapes(op, shape_view(out), shape_view(q), shape_view(k), shape_view(v), options);
  check_step(op, shape_view(q), shape_view(k), state, p);
  step(out, q, k, v, state, p);
}

template void recurrent_step<bf16>(View4<bf16>, View4<const bf16>, View4<const bf16>, View4<const bf16>,
                                   RecurrentState&, const LinearAttentionOptions&);
template void recurrent_step<f16>(View4<f16>, View4<const f16>, View4<const f16>, View4<const f16>, RecurrentState&,
                                  const LinearAttentionOptions&);

}  // namespace linattn
