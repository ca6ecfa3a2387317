// fp64 oracle of linear attention, straight from the defining sums, O(N²):
//   out_i = num_i / den_i,  num_i = Σ_j a_ij v_j + φ(q_i)ᵀS0,  den_i = Σ_j a_ij + φ(q_i)ᵀz0 + eps,
//   a_ij = φ(q_i)·φ(k_j), over the keys j that query i sees (key padding, causal bottom-right).
// Without the normaliser, out_i = num_i.
#include "core/sequences.hpp"
#include "core/validate.hpp"
#include "linattn/reference.hpp"
#include "ops/linear/linear_checks.hpp"

namespace linattn::reference {
namespace {

struct Sizes {
  int64_t B, Nq, Nk, H, D, E, M;
};

struct Features {
  std::vector<double> q, k;  // φ(q): [Nq, M], φ(k): [Nk, M] for one (b, h)
};

// The drivers' checks, on the tensors' shapes (q, k, v, options; dout when given; the initial
// state), then the sizes.
Sizes check_arguments(const char* op, const Tensor& q, const Tensor& k, const Tensor& v,
                      const LinearAttentionOptions& options, const State* initial, const Tensor* dout = nullptr) {
  const ConstTensorView qs = detail::shape_only(op, "q", q.extent, q.data.size());
  const ConstTensorView ks = detail::shape_only(op, "k", k.extent, k.data.size());
  const ConstTensorView vs = detail::shape_only(op, "v", v.extent, v.data.size());
  const int64_t M = detail::check_linear_arguments(op, qs, ks, vs, options);
  if (dout)
    detail::check_output_shape(op, "dout", detail::shape_only(op, "dout", dout->extent, dout->data.size()), qs, vs);
  const Sizes s{q.extent[0], q.extent[1], k.extent[1], q.extent[2], q.extent[3], v.extent[3], M};
  if (!initial) return s;
  if (!options.causal)
    detail::fail(op, "initial is given, expected causal = true (only a causal sum starts from a state)");
  detail::check_state_extents(op, "initial", {initial->batch, initial->heads, initial->feature_dim, initial->value_dim},
                              {s.B, s.H, s.M, s.E});
  detail::check_size(op, "initial.S", int64_t(initial->S.size()), s.B * s.H * s.M * s.E, "[B, H, M, E]");
  detail::check_size(op, "initial.z", int64_t(initial->z.size()), s.B * s.H * s.M, "[B, H, M]");
  return s;
}

// Rows of x[b, :, h, :] as a contiguous [N, D] matrix.
std::vector<double> rows_of(const Tensor& x, int64_t b, int64_t h) {
  const int64_t N = x.extent[1], D = x.extent[3];
  std::vector<double> rows(N * D);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t d = 0; d < D; ++d) rows[n * D + d] = x(b, n, h, d);
  return rows;
}

Features features_of(const Sizes& s, const LinearAttentionOptions& options, const Tensor& q, const Tensor& k, int64_t b,
                     int64_t h) {
  Features f{std::vector<double>(s.Nq * s.M), std::vector<double>(s.Nk * s.M)};
  options.feature_map->forward_reference(f.q.data(), rows_of(q, b, h).data(), s.Nq, s.D, FeatureRole::query);
  options.feature_map->forward_reference(f.k.data(), rows_of(k, b, h).data(), s.Nk, s.D, FeatureRole::key);
  return f;
}

// Whether query i of batch b sees key j: key padding, packed sequences (only its own), then bottom-right
// causal alignment.
bool visible(const Sizes& s, const LinearAttentionOptions& options, int64_t b, int64_t i, int64_t j) {
  const int64_t length = options.key_lengths.empty() ? s.Nk : options.key_lengths[b];
  if (j >= length) return false;
  const std::span<const int64_t> cu = options.cu_seqlens;
  if (!cu.empty() && detail::sequence_of(cu, i) != detail::sequence_of(cu, j)) return false;
  return !options.causal || j <= i + (s.Nk - s.Nq);
}

double dot(const double* a, const double* b, int64_t n) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

const double* state_S(const State* state, const Sizes& s, int64_t b, int64_t h) {
  return state ? state->S.data() + (b * s.H + h) * s.M * s.E : nullptr;
}
const double* state_z(const State* state, const Sizes& s, int64_t b, int64_t h) {
  return state ? state->z.data() + (b * s.H + h) * s.M : nullptr;
}

State zero_state(const Sizes& s) {
  return {s.B, s.H, s.M, s.E, std::vector<double>(s.B * s.H * s.M * s.E), std::vector<double>(s.B * s.H * s.M)};
}

// num_i and den_i for one query row (den_i = 1 without the normaliser).
void numerator_denominator(std::vector<double>& num, double& den, const Sizes& s, const LinearAttentionOptions& options,
                           const Features& f, const Tensor& v, const State* initial, int64_t b, int64_t h, int64_t i) {
  const double* phi_q = f.q.data() + i * s.M;
  num.assign(s.E, 0.0);
  den = 0;
  for (int64_t j = 0; j < s.Nk; ++j) {
    if (!visible(s, options, b, i, j)) continue;
    const double a = dot(phi_q, f.k.data() + j * s.M, s.M);
    for (int64_t e = 0; e < s.E; ++e) num[e] += a * v(b, j, h, e);
    den += a;
  }
  if (const double* S0 = state_S(initial, s, b, h)) {
    for (int64_t m = 0; m < s.M; ++m)
      for (int64_t e = 0; e < s.E; ++e) num[e] += phi_q[m] * S0[m * s.E + e];
    den += dot(phi_q, state_z(initial, s, b, h), s.M);
  }
  den = options.normalize ? den + double(options.eps) : 1.0;
}

}  // namespace

Tensor linear_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                                const LinearAttentionOptions& options, const State* initial, State* final_state) {
  // final_state may be initial itself: each head's sums are read before they are added to.
  const char* op = "reference::linear_attention_forward";
  const Sizes s = check_arguments(op, q, k, v, options, initial);
  if (initial || final_state) detail::refuse_cu_seqlens(op, options.cu_seqlens, "the states are one per batch row");
  Tensor out({s.B, s.Nq, s.H, s.E});
  if (final_state) *final_state = initial ? *initial : zero_state(s);
  std::vector<double> num;
  double den = 0;
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.H; ++h) {
      const Features f = features_of(s, options, q, k, b, h);
      for (int64_t i = 0; i < s.Nq; ++i) {
        numerator_denominator(num, den, s, options, f, v, initial, b, h, i);
        for (int64_t e = 0; e < s.E; ++e) out(b, i, h, e) = num[e] / den;
      }
      if (!final_state) continue;
      // S += Σ_j φ(k_j) v_jᵀ, z += Σ_j φ(k_j) over the batch's keys j < key_lengths[b].
      const int64_t length = options.key_lengths.empty() ? s.Nk : options.key_lengths[b];
      double* S = final_state->S.data() + (b * s.H + h) * s.M * s.E;
      double* z = final_state->z.data() + (b * s.H + h) * s.M;
      for (int64_t j = 0; j < length; ++j)
        for (int64_t m = 0; m < s.M; ++m) {
          z[m] += f.k[j * s.M + m];
          for (int64_t e = 0; e < s.E; ++e) S[m * s.E + e] += f.k[j * s.M + m] * v(b, j, h, e);
        }
    }
  return out;
}

Gradients linear_attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                                    const LinearAttentionOptions& options, const State* initial, State* dinitial) {
  const char* op = "reference::linear_attention_backward";
  const Sizes s = check_arguments(op, q, k, v, options, initial, &dout);
  if (initial || dinitial) detail::refuse_cu_seqlens(op, options.cu_seqlens, "the states are one per batch row");
  detail::check_outputs(op, {detail::object_region("dinitial", dinitial)}, {detail::object_region("initial", initial)});
  Gradients g{Tensor(q.extent), Tensor(k.extent), Tensor(v.extent)};
  if (dinitial) *dinitial = zero_state(s);
  std::vector<double> num, dnum(s.E);
  double den = 0;
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.H; ++h) {
      const Features f = features_of(s, options, q, k, b, h);
      std::vector<double> dphi_q(s.Nq * s.M, 0.0), dphi_k(s.Nk * s.M, 0.0);
      for (int64_t i = 0; i < s.Nq; ++i) {
        numerator_denominator(num, den, s, options, f, v, initial, b, h, i);
        // out = num / den: dnum = dout / den, dden = −dout·num / den² (0 without the normaliser)
        double dout_dot_num = 0;
        for (int64_t e = 0; e < s.E; ++e) {
          dnum[e] = dout(b, i, h, e) / den;
          dout_dot_num += dout(b, i, h, e) * num[e];
        }
        const double dden = options.normalize ? -dout_dot_num / (den * den) : 0.0;
        const double* phi_q = f.q.data() + i * s.M;
        double* dphi_qi = dphi_q.data() + i * s.M;
        for (int64_t j = 0; j < s.Nk; ++j) {
          if (!visible(s, options, b, i, j)) continue;
          const double* phi_k = f.k.data() + j * s.M;
          const double a = dot(phi_q, phi_k, s.M);
          // num += a_ij v_j, den += a_ij: da_ij = dnum·v_j + dden; dv_j += a_ij dnum
          double da = dden;
          for (int64_t e = 0; e < s.E; ++e) {
            da += dnum[e] * v(b, j, h, e);
            g.dv(b, j, h, e) += a * dnum[e];
          }
          // a_ij = φ(q_i)·φ(k_j)
          for (int64_t m = 0; m < s.M; ++m) {
            dphi_qi[m] += da * phi_k[m];
            dphi_k[j * s.M + m] += da * phi_q[m];
          }
        }
        // num += φ(q_i)ᵀS0, den += φ(q_i)ᵀz0 (causal; S0 = 0 when no initial state is given)
        if (const double* S0 = state_S(initial, s, b, h)) {
          const double* z0 = state_z(initial, s, b, h);
          for (int64_t m = 0; m < s.M; ++m) dphi_qi[m] += dot(S0 + m * s.E, dnum.data(), s.E) + z0[m] * dden;
        }
        if (dinitial && options.causal) {
          double* dS0 = dinitial->S.data() + (b * s.H + h) * s.M * s.E;
          double* dz0 = dinitial->z.data() + (b * s.H + h) * s.M;
          for (int64_t m = 0; m < s.M; ++m) {
            for (int64_t e = 0; e < s.E; ++e) dS0[m * s.E + e] += phi_q[m] * dnum[e];
            dz0[m] += phi_q[m] * dden;
          }
        }
      }
      // φ = map(x): dx = (∂φ/∂x)ᵀ dφ
      std::vector<double> dq_rows(s.Nq * s.D), dk_rows(s.Nk * s.D);
      options.feature_map->backward_reference(dq_rows.data(), dphi_q.data(), rows_of(q, b, h).data(), s.Nq, s.D,
                                              FeatureRole::query);
      options.feature_map->backward_reference(dk_rows.data(), dphi_k.data(), rows_of(k, b, h).data(), s.Nk, s.D,
                                              FeatureRole::key);
      for (int64_t n = 0; n < s.Nq; ++n)
        for (int64_t d = 0; d < s.D; ++d) g.dq(b, n, h, d) = dq_rows[n * s.D + d];
      for (int64_t n = 0; n < s.Nk; ++n)
        for (int64_t d = 0; d < s.D; ++d) g.dk(b, n, h, d) = dk_rows[n * s.D + d];
    }
  return g;
}

}  // namespace linattn::reference
