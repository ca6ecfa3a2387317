// The softmax drivers' shared plan (softmax_plan.hpp): the checks both directions run, and the key packs.
#include "ops/softmax/softmax_plan.hpp"

#include <cmath>

namespace linattn::detail::softmax {

// The checks both directions share: q, k, v and their agreement, options, lse's size.
Plan make_plan(const char* op, ConstTensorView q, ConstTensorView k, ConstTensorView v, size_t lse_size,
               const SoftmaxAttentionOptions& options) {
  detail::check_attention_inputs(op, q, k, v);
  detail::check_key_lengths(op, options.key_lengths, q.batch(), k.seq());
  detail::check_scale(op, options.scale);
  detail::refuse_cu_seqlens(
      op, options.cu_seqlens,
      "the planned drivers run one sequence per batch row; softmax_attention_forward/backward take packed sequences");
  Plan p;
  p.B = q.batch(), p.Nq = q.seq(), p.Nk = k.seq(), p.H = q.heads(), p.D = q.dim(), p.E = v.dim();
  p.Dp = round_up(p.D, kernels::kPad);
  p.Ep = round_up(p.E, kernels::kPad);
  p.q_tiles = ceil_div(p.Nq, kTileQ);
  p.k_tiles = ceil_div(p.Nk, kTileK);
  p.scale = options.scale ? *options.scale : float(1.0 / std::sqrt(double(p.D)));
  p.causal = options.causal;
  p.key_lengths = options.key_lengths;
  const int64_t rows = detail::checked_mul(op, "lse's size (B·H)", p.B, p.H);
  detail::check_size(op, "lse", int64_t(lse_size), detail::checked_mul(op, "lse's size (B·H·Nq)", rows, p.Nq),
                     "[B, H, Nq]");
  // Scratch is sized by one head's packed rows, each at most 2·(Dp + Ep) floats wide.
  detail::checked_mul(op, "one head's packed size ((Nq + Nk) · 2·(D + E), padded)",
                      round_up(p.Nq, kTileQ) + round_up(p.Nk, kTileK), 2 * (p.Dp + p.Ep));
  return p;
}

KeyPack::KeyPack(const Plan& p, bool backward_, bool streaming_)
    : backward(backward_),
      streaming(streaming_),
      kt_size(p.Dp * kTileK),
      v_size(p.Ep * kTileK),
      kr_size(backward ? kTileK * p.Dp : 0),
      tile_size(kt_size + v_size + kr_size),
      memory(zeros((streaming ? 1 : p.k_tiles) * tile_size)) {}

void KeyPack::pack(ConstTensorView k, ConstTensorView v_in, const Plan& p, int64_t b, int64_t h, int64_t t) const {
  const int64_t j0 = t * kTileK, count = p.key_rows(t);
  kernels::pack_rows_transposed({kt(t), kTileK, k.dim(), count}, kernels::head_rows(k, b, h), j0);
  if (!backward) {
    kernels::pack_rows({v(t), p.Ep, kTileK, v_in.dim()}, kernels::head_rows(v_in, b, h), j0, count);
    return;
  }
  kernels::pack_rows_transposed({v(t), kTileK, v_in.dim(), count}, kernels::head_rows(v_in, b, h), j0);
  kernels::pack_rows({kr(t), p.Dp, kTileK, k.dim()}, kernels::head_rows(k, b, h), j0, count);
}

}  // namespace linattn::detail::softmax
