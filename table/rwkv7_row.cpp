// The rwkv7 row (recurrence_rows.hpp): RWKV-7's DPLR delta rule token by token, its fp64 oracle, its flop,
// byte and working-memory models.
#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <string>

#include "linattn/error.hpp"
#include "linattn/random.hpp"
#include "recurrence_rows.hpp"

namespace linattn::table::detail {
namespace {

double bh(const Sizes& s) { return double(s.batch) * double(s.heads); }

// a = −κ̂ and b = κ̂ ⊙ σ(z) for κ and z standard normal, κ̂ = κ / |κ| per token and head: RWKV-7's
// "removal key" and its in-context learning rate (transformers' rwkv7: a = −kk, b = kk·a_gate). The
// transition diag(w) − κ̂ (κ̂ ⊙ σ(z))ᵀ then stays within about [−1, 1].
Options options(const Sizes& s) {
  Options o;
  o.dplr.scale = 1.0f;  // chunk_rwkv7's
  o.dplr.cu_seqlens = s.cu_seqlens;
  Random draws(0x5eed7a7e);
  const int64_t rows = s.batch * s.seq_q * s.heads, K = s.dim;
  auto a = std::make_shared<std::vector<float>>(size_t(rows * K));
  auto b = std::make_shared<std::vector<float>>(size_t(rows * K));
  std::vector<double> kappa(size_t(K), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    double norm = 0;
    for (double& x : kappa) x = draws.normal(), norm += x * x;
    norm = std::sqrt(norm);
    for (int64_t c = 0; c < K; ++c) {
      const double unit = kappa[size_t(c)] / norm;
      (*a)[size_t(r * K + c)] = float(-unit);
      (*b)[size_t(r * K + c)] = float(unit / (1.0 + std::exp(-draws.normal())));
    }
  }
  o.da = std::make_shared<std::vector<float>>(a->size());
  o.db = std::make_shared<std::vector<float>>(b->size());
  o.a = std::move(a), o.b = std::move(b);
  return o;
}

// a's (or b's, da's, db's) view for operands shaped like q: the options were made for the same sizes.
template <class Floats>
auto like_q(Floats& x, ConstTensorView q, const char* name) {
  const int64_t want = q.batch() * q.seq() * q.heads() * q.dim();
  if (int64_t(x.size()) != want)
    throw Error(std::string("linattn: operator table: the rwkv7 row's ") + name + " holds " + std::to_string(x.size()) +
                " values, expected B·N·H·D = " + std::to_string(want) + " (options made for other sizes)");
  return bnhd(x.data(), q.batch(), q.seq(), q.heads(), q.dim());
}

std::vector<float> zero_state(const Options& o, ConstTensorView q, ConstTensorView v) {
  const int64_t N = o.dplr.cu_seqlens.empty() ? q.batch() : int64_t(o.dplr.cu_seqlens.size()) - 1;
  return std::vector<float>(size_t(N * q.heads() * q.dim() * v.dim()), 0.0f);
}

void forward(const Operands& x, const Options& o) {
  std::vector<float> state = zero_state(o, x.q, x.v);
  dplr_delta_rule_recurrent_forward(x.out, x.q, x.k, x.v, like_q(*o.a, x.q, "a"), like_q(*o.b, x.q, "b"), x.g, state,
                                    o.dplr);
}
void backward(const Operands& x, const Options& o) {
  dplr_delta_rule_recurrent_backward(x.dq, x.dk, x.dv, like_q(*o.da, x.q, "da"), like_q(*o.db, x.q, "db"), x.dg, {},
                                     x.dout, {}, x.q, x.k, x.v, like_q(*o.a, x.q, "a"), like_q(*o.b, x.q, "b"), x.g,
                                     o.dplr);
}

reference::Tensor to64(const std::vector<float>& x, const reference::Tensor& q) {
  reference::Tensor t(q.extent);
  std::copy(x.begin(), x.end(), t.data.begin());
  return t;
}
OracleForward oracle_forward(const OracleInputs& in, const Options& o) {
  return {reference::dplr_delta_rule_forward(in.q, in.k, in.v, to64(*o.a, in.q), to64(*o.b, in.q), in.g, o.dplr).out,
          {}};
}
OracleBackward oracle_backward(const OracleInputs& in, const Options& o) {
  reference::DplrGradients g = reference::dplr_delta_rule_backward(in.dout, nullptr, in.q, in.k, in.v, to64(*o.a, in.q),
                                                                   to64(*o.b, in.q), in.g, o.dplr);
  return {std::move(g.dq), std::move(g.dk), std::move(g.dv), {}, {}, std::move(g.dgk)};
}

// Per token and head (K = D, V = E), the recurrence of src/ops/dplr/dplr_recurrent.cpp:
//   forward  9·K·V   s = Sᵀa (2KV), S ← diag(w) S + b sᵀ (3KV), S += k vᵀ (2KV), o = Sᵀ q (2KV)
//   backward 35·K·V  the state twice (checkpoints, then each stretch replayed: 2 × 7KV), then dS += q doᵀ,
//                    dv = dSᵀk, dq = S dout, s again, ds = dSᵀb, dk = dS v, db = dS s, dw = rowsum(dS ⊙ S),
//                    da = S ds (2KV each) and dS ← diag(w) dS + a dsᵀ (3KV)
// w = exp(gk) and the scale (O(K)) are not counted. The kernels execute more: every state update also reads
// out (2KV), which the forward's first update and the replays do not use.
double tokens(const Sizes& s) { return bh(s) * double(s.seq_q) * double(s.dim) * double(s.value_dim); }
double forward_flops(const Sizes& s) { return 9.0 * tokens(s); }
double backward_flops(const Sizes& s) { return 35.0 * tokens(s); }
// q, k, a, b, w and v read, out written; the backward reads dout too and writes the six gradients.
double forward_bytes(const Sizes& s) { return 4.0 * bh(s) * double(s.seq_q) * double(5 * s.dim + 2 * s.value_dim); }
double backward_bytes(const Sizes& s) { return 4.0 * bh(s) * double(s.seq_q) * double(10 * s.dim + 3 * s.value_dim); }
// The state per sequence and head, a and b; the backward adds da and db and per head its checkpoints and
// a replayed stretch (√L each, in states: 2·√L + 3 states errs high).
double working(const Sizes& s, bool backward) {
  const double KV = double(s.dim) * double(s.value_dim), ab = 2.0 * bh(s) * double(s.seq_q) * double(s.dim);
  if (!backward) return bh(s) * KV + ab;
  return bh(s) * KV * (2.0 * std::ceil(std::sqrt(double(s.seq_q))) + 4.0) + 2.0 * ab;
}

int64_t key_gate(const Sizes& s) { return s.dim; }

}  // namespace

Operator rwkv7_row(std::vector<TestCase> (*test_cases)(), std::vector<TestCase> (*gradient_cases)(), double bound) {
  return recurrence_row(
      "rwkv7", "RWKV-7: the DPLR delta rule, w [B, N, H, D] a log decay, a and b drawn (token by token)",
      {key_gate, options, forward, backward, oracle_forward, oracle_backward},
      {forward_flops, backward_flops, forward_bytes, backward_bytes, working}, test_cases, gradient_cases, bound);
}

}  // namespace linattn::table::detail
