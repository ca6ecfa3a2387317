// fp64 oracle of exact softmax attention, straight from softmax(q kᵀ·scale) v, O(N²).
#include <cmath>
#include <limits>

#include "core/sequences.hpp"
#include "core/validate.hpp"
#include "linattn/reference.hpp"

namespace linattn::reference {
namespace {

struct Sizes {
  int64_t B, Nq, Nk, H, D, E;
  double scale;
};

Sizes sizes_of(const Tensor& q, const Tensor& k, const Tensor& v, const SoftmaxAttentionOptions& options) {
  Sizes s{q.extent[0], q.extent[1], k.extent[1], q.extent[2], q.extent[3], v.extent[3], 0.0};
  s.scale = options.scale ? double(*options.scale) : 1.0 / std::sqrt(double(s.D));
  return s;
}

// Whether query i of batch b sees key j: key padding, packed sequences (only its own), then bottom-right
// causal alignment.
bool visible(const Sizes& s, const SoftmaxAttentionOptions& options, int64_t b, int64_t i, int64_t j) {
  const int64_t length = options.key_lengths.empty() ? s.Nk : options.key_lengths[b];
  if (j >= length) return false;
  const std::span<const int64_t> cu = options.cu_seqlens;
  if (!cu.empty() && detail::sequence_of(cu, i) != detail::sequence_of(cu, j)) return false;
  return !options.causal || j <= i + (s.Nk - s.Nq);
}

// p[j] = softmax_j(scale · q_i·k_j) over visible keys (0 elsewhere); returns the row's lse.
double probabilities(std::vector<double>& p, const Sizes& s, const SoftmaxAttentionOptions& options, const Tensor& q,
                     const Tensor& k, int64_t b, int64_t h, int64_t i) {
  const double neg_inf = -std::numeric_limits<double>::infinity();
  std::vector<double> score(s.Nk, neg_inf);
  double max_score = neg_inf;
  for (int64_t j = 0; j < s.Nk; ++j) {
    if (!visible(s, options, b, i, j)) continue;
    double dot = 0;
    for (int64_t d = 0; d < s.D; ++d) dot += q(b, i, h, d) * k(b, j, h, d);
    score[j] = s.scale * dot;
    max_score = std::max(max_score, score[j]);
  }
  p.assign(s.Nk, 0.0);
  if (max_score == neg_inf) return neg_inf;  // a row that sees no key
  double sum = 0;
  for (int64_t j = 0; j < s.Nk; ++j)
    if (score[j] != neg_inf) sum += p[j] = std::exp(score[j] - max_score);
  for (double& x : p) x /= sum;
  return max_score + std::log(sum);
}

// The drivers' checks, on the tensors' shapes: q, k, v agreeing, key_lengths and scale.
void check_arguments(const char* op, const Tensor& q, const Tensor& k, const Tensor& v,
                     const SoftmaxAttentionOptions& options) {
  // One statement each: the checks run, and name the arguments, in order.
  const ConstTensorView qs = detail::shape_only(op, "q", q.extent, q.data.size());
  const ConstTensorView ks = detail::shape_only(op, "k", k.extent, k.data.size());
  const ConstTensorView vs = detail::shape_only(op, "v", v.extent, v.data.size());
  detail::check_attention_inputs(op, qs, ks, vs);
  detail::check_key_lengths(op, options.key_lengths, q.extent[0], k.extent[1]);
  detail::check_scale(op, options.scale);
  if (!options.cu_seqlens.empty())
    detail::check_cu_seqlens(op, options.cu_seqlens, options.key_lengths, q.extent[0], q.extent[1], k.extent[1]);
}

}  // namespace

Tensor softmax_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                                 const SoftmaxAttentionOptions& options, std::vector<double>* lse) {
  const char* op = "reference::softmax_attention_forward";
  check_arguments(op, q, k, v, options);
  using detail::object_region;
  detail::check_outputs(op, {object_region("lse", lse)},
                        {object_region("q", &q.data), object_region("k", &k.data), object_region("v", &v.data)});
  const Sizes s = sizes_of(q, k, v, options);
  Tensor out({s.B, s.Nq, s.H, s.E});
  if (lse) lse->assign(s.B * s.H * s.Nq, 0.0);
  std::vector<double> p;
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.H; ++h)
      for (int64_t i = 0; i < s.Nq; ++i) {
        const double row_lse = probabilities(p, s, options, q, k, b, h, i);
        if (lse) (*lse)[(b * s.H + h) * s.Nq + i] = row_lse;
        for (int64_t j = 0; j < s.Nk; ++j)
          for (int64_t e = 0; e < s.E; ++e) out(b, i, h, e) += p[j] * v(b, j, h, e);
      }
  return out;
}

// out_i = Σ_j p_ij v_j, p_ij = softmax_j(s_ij), s_ij = scale · q_i·k_j.
Gradients softmax_attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                                     const SoftmaxAttentionOptions& options) {
  const char* op = "reference::softmax_attention_backward";
  check_arguments(op, q, k, v, options);
  detail::check_output_shape(op, "dout", detail::shape_only(op, "dout", dout.extent, dout.data.size()),
                             detail::shape_only(q.extent), detail::shape_only(v.extent));
  const Sizes s = sizes_of(q, k, v, options);
  Gradients g{Tensor(q.extent), Tensor(k.extent), Tensor(v.extent)};
  std::vector<double> p, dp(s.Nk);
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.H; ++h)
      for (int64_t i = 0; i < s.Nq; ++i) {
        probabilities(p, s, options, q, k, b, h, i);
        // dv_j += p_ij dout_i; dp_ij = dout_i·v_j
        double p_dot_dp = 0;
        for (int64_t j = 0; j < s.Nk; ++j) {
          double dot = 0;
          for (int64_t e = 0; e < s.E; ++e) {
            g.dv(b, j, h, e) += p[j] * dout(b, i, h, e);
            dot += dout(b, i, h, e) * v(b, j, h, e);
          }
          dp[j] = dot;
          p_dot_dp += p[j] * dot;
        }
        // ds_ij = p_ij (dp_ij − Σ_l p_il dp_il); dq_i += scale ds_ij k_j; dk_j += scale ds_ij q_i
        for (int64_t j = 0; j < s.Nk; ++j) {
          if (p[j] == 0.0) continue;
          const double ds = s.scale * p[j] * (dp[j] - p_dot_dp);
          for (int64_t d = 0; d < s.D; ++d) {
            g.dq(b, i, h, d) += ds * k(b, j, h, d);
            g.dk(b, j, h, d) += ds * q(b, i, h, d);
          }
        }
      }
  return g;
}

}  // namespace linattn::reference
