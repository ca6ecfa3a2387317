// The delta rule's rows (delta_rows.hpp): calls, oracle, flop, byte and working-memory models.
#include "delta_rows.hpp"

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <string>

#include "linattn/error.hpp"
#include "recurrence_rows.hpp"

namespace linattn::table::detail {
namespace {

double bh(const Sizes& s) { return double(s.batch) * double(s.heads); }
int64_t gate_cols(DeltaGate gate, const Sizes& s) {
  return gate == DeltaGate::token ? 1 : gate == DeltaGate::key ? s.dim : 0;
}

// ---- flops -------------------------------------------------------------------------------------
//
// The chunked form of src/ops/delta/delta_chunk.hpp, per (batch, head) and chunk of c tokens (K = D,
// V = E). A strictly lower c × c product has c(c−1)/2 pairs, a lower one with its diagonal
// c(c+1)/2; each pair of depth d is 2d flops.
//   load (forward, and twice per chunk in the backward):
//     c(c−1)·K          G = strict_lower(K Kᵀ) (the keys' scores, with the decay factors split in)
//     c(c+1)·K          P = lower(Q Kᵀ) (the queries' scores)
//     (c³ − c)/3        T = (I + diag(β) G)⁻¹ by forward substitution: row t costs t(t+1)
//     c(c+1)·(K + V)    [U | W] = T [β V | −β K]
//   forward: the load, then
//     6·c·K·V           N = U + W S, O = Q S, S += Kᵀ N
//     c(c+1)·V          O += P N
//     K·V               (gated) the state's decay across the chunk
//   backward: the load twice (sweep 1 for the state before each chunk, sweep 2 again), then
//     4·c·K·V + K·V     sweep 1's state update (N and S += Kᵀ N; gated: the decay), every chunk but the last
//     14·c·K·V          N again, dN = K dS, dQ = dO Sᵀ, dW = dN Sᵀ, dK = N dSᵀ, dS += Qᵀ dO + Wᵀ dN
//     2·c(c+1)·V        dN += Pᵀ dO, dP = lower(dO Nᵀ)
//     c(c+1)·(K + V)    d[βV | −βK] = Tᵀ d[U | W]
//     c(c−1)·(K + V)    dA = −strict_lower(d[βV | −βK] [U | W]ᵀ) (the inverse's gradient)
//     1.5·c(c−1)        dβ += Σ dA ⊙ G and dG = diag(β) dA (3 per strict pair)
//     4·c(c−1)·K        dK += dG K + dGᵀ K, dQ += dP K, dK += dPᵀ Q
//     3·K·V             (gated) dS's decay and the gate's share Σ dS ⊙ S
// Not counted, as the table counts no feature map: the l2norm of q and k, the decay factors and their
// exponentials, β's products with the rows of V and K, and the sums that gather dq, dk and dg: O(c·K)
// each per chunk. The kernels execute more than this count: the solve's rows run as full products
// over T's zero upper part (2t² for row t), and the triangles in strips padded to 16.
double chunk_load(double c, double K, double V) {
  return c * (c - 1) * K + c * (c + 1) * K + (c * c * c - c) / 3 + c * (c + 1) * (K + V);
}
template <bool kBackward>
double delta_count(const Sizes& s, bool gated) {
  const double K = double(s.dim), V = double(s.value_dim), KV = K * V;
  double per_bh = 0;
  for (int64_t t0 = 0; t0 < s.seq_q; t0 += s.chunk) {
    const double c = double(std::min(s.chunk, s.seq_q - t0));
    const bool last = t0 + s.chunk >= s.seq_q;
    if (!kBackward) {
      per_bh += chunk_load(c, K, V) + 6 * c * KV + c * (c + 1) * V + (gated ? KV : 0);
      continue;
    }
    per_bh += 2 * chunk_load(c, K, V) + (last ? 0 : 4 * c * KV + (gated ? KV : 0));
    per_bh += 14 * c * KV + 2 * c * (c + 1) * V + c * (c + 1) * (K + V) + c * (c - 1) * (K + V) + 1.5 * c * (c - 1) +
              4 * c * (c - 1) * K + (gated ? 3 * KV : 0);
  }
  return bh(s) * per_bh;
}

// ---- bytes and working memory ------------------------------------------------------------------

// Forward: q, k, v, β and g read, out written; the backward reads dO too and writes dq, dk, dv, dβ, dg.
double token_floats(const Sizes& s) { return double(s.seq_q) * double(2 * s.dim + s.value_dim); }
double delta_bytes(const Sizes& s, int64_t G, bool backward) {
  const double n = double(s.seq_q), inputs = token_floats(s) + n * double(1 + G);
  return 4.0 * bh(s) * (backward ? 2.0 * inputs + n * double(s.value_dim) : inputs + n * double(s.value_dim));
}
// The state and one chunk's scratch per head (the scratch is per thread: this errs high), β; the
// backward adds the state before every chunk, dS, its own scratch and dβ.
double delta_working(const Sizes& s, bool gated, bool backward) {
  const double K = double(s.dim), V = double(s.value_dim), C = double(s.chunk), n = double(s.seq_q);
  double per_head = K * V + C * (5 * K + 5 * V) + 3 * C * C + (gated ? 11 * C * K : 0);
  if (backward)
    per_head += (std::ceil(n / C) + 1) * K * V + 3 * K * V + C * (11 * K + 7 * V) + 2 * C * C + (gated ? C * K : 0);
  return bh(s) * (per_head + n * (backward ? 2.0 : 1.0));
}

// ---- calls -------------------------------------------------------------------------------------

// β's view for operands of [B, N, H, ·]: the options were made for the same sizes.
std::span<const float> checked(const std::vector<float>& x, ConstTensorView q, const char* name) {
  const int64_t want = q.batch() * q.extent[1] * q.heads();
  if (int64_t(x.size()) != want)
    throw Error(std::string("linattn: operator table: the delta row's ") + name + " holds " + std::to_string(x.size()) +
                " values, expected B·N·H = " + std::to_string(want) + " (options made for other sizes)");
  return x;
}
ConstTensorView beta_view(const Options& o, ConstTensorView q) {
  return bnhd(checked(*o.beta, q, "beta").data(), q.batch(), q.extent[1], q.heads(), 1);
}
TensorView dbeta_view(const Options& o, ConstTensorView q) {
  checked(*o.dbeta, q, "dbeta");
  return bnhd(o.dbeta->data(), q.batch(), q.extent[1], q.heads(), 1);
}

void delta_forward(const Operands& a, const Options& o) {
  delta_rule_forward(a.out, a.q, a.k, a.v, beta_view(o, a.q), a.g, o.delta);
}
void delta_backward(const Operands& a, const Options& o) {
  delta_rule_backward(a.dq, a.dk, a.dv, dbeta_view(o, a.q), a.dg, {}, a.dout, {}, a.q, a.k, a.v, beta_view(o, a.q), a.g,
                      o.delta);
}

reference::Tensor beta64(const Options& o, const reference::Tensor& q) {
  reference::Tensor beta({q.extent[0], q.extent[1], q.extent[2], 1});
  std::copy(o.beta->begin(), o.beta->end(), beta.data.begin());
  return beta;
}
const reference::Tensor* gate_of(const OracleInputs& in) { return in.g.data.empty() ? nullptr : &in.g; }
OracleForward delta_oracle_forward(const OracleInputs& in, const Options& o) {
  return {reference::delta_rule_forward(in.q, in.k, in.v, beta64(o, in.q), gate_of(in), o.delta).out, {}};
}
OracleBackward delta_oracle_backward(const OracleInputs& in, const Options& o) {
  reference::DeltaGradients g =
      reference::delta_rule_backward(in.dout, nullptr, in.q, in.k, in.v, beta64(o, in.q), gate_of(in), o.delta);
  return {std::move(g.dq), std::move(g.dk), std::move(g.dv), {}, {}, std::move(g.dg)};
}

// ---- the three rows ----------------------------------------------------------------------------

template <DeltaGate kGate>
struct Row {
  static constexpr bool gated = kGate != DeltaGate::none;
  static int64_t gate_dim(const Sizes& s) { return gate_cols(kGate, s); }
  static Options options(const Sizes& s) {
    Options o;
    o.delta.gate = kGate;
    o.delta.qk_l2norm = true;
    o.delta.chunk_size = s.chunk;
    o.delta.cu_seqlens = s.cu_seqlens;
    auto beta = std::make_shared<std::vector<float>>(draw_beta(s));
    o.dbeta = std::make_shared<std::vector<float>>(beta->size());
    o.beta = std::move(beta);
    return o;
  }
  static double forward_flops(const Sizes& s) { return delta_count<false>(s, gated); }
  static double backward_flops(const Sizes& s) { return delta_count<true>(s, gated); }
  static double forward_bytes(const Sizes& s) { return delta_bytes(s, gate_dim(s), false); }
  static double backward_bytes(const Sizes& s) { return delta_bytes(s, gate_dim(s), true); }
  static double working(const Sizes& s, bool backward) { return delta_working(s, gated, backward); }
};

template <DeltaGate kGate>
Operator row(const char* name, const char* summary, std::vector<TestCase> (*test_cases)(),
             std::vector<TestCase> (*gradient_cases)(), double bound) {
  using R = Row<kGate>;
  return recurrence_row(
      name, summary,
      {R::gate_dim, R::options, delta_forward, delta_backward, delta_oracle_forward, delta_oracle_backward},
      {R::forward_flops, R::backward_flops, R::forward_bytes, R::backward_bytes, R::working}, test_cases,
      gradient_cases, bound);
}

}  // namespace

std::vector<float> draw_beta(const Sizes& s) {
  std::mt19937_64 rng(0x5eedbe7a);
  std::normal_distribution<double> normal;
  std::vector<float> beta(size_t(s.batch * s.seq_q * s.heads));
  for (float& b : beta) b = float(1.0 / (1.0 + std::exp(-normal(rng))));
  return beta;
}

Operator delta_row(DeltaGate gate, std::vector<TestCase> (*test_cases)(), std::vector<TestCase> (*gradient_cases)(),
                   double bound) {
  switch (gate) {
    case DeltaGate::none:
      return row<DeltaGate::none>("delta_rule",
                                  "DeltaNet: the delta rule, β [B, N, H] drawn, q and k l2-normalised (chunked)",
                                  test_cases, gradient_cases, bound);
    case DeltaGate::token:
      return row<DeltaGate::token>(
          "gated_delta_rule",
          "Gated DeltaNet: the delta rule after a log decay per head and token, g [B, N, H, 1] (chunked)", test_cases,
          gradient_cases, bound);
    case DeltaGate::key:
      break;
  }
  return row<DeltaGate::key>(
      "kda", "Kimi Delta Attention: the delta rule after a log decay per key dim, g [B, N, H, D] (chunked)", test_cases,
      gradient_cases, bound);
}

}  // namespace linattn::table::detail
