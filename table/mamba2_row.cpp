// The mamba2 row (recurrence_rows.hpp): Mamba-2's SSD over the decayed family's chunked operator, its
// oracle over the decayed family's fp64 oracle, its flop, byte and working-memory models.
#include <algorithm>
#include <cmath>
#include <memory>
#include <string>

#include "linattn/decay.hpp"
#include "linattn/error.hpp"
#include "linattn/random.hpp"
#include "recurrence_rows.hpp"

namespace linattn::table::detail {

int64_t mamba2_groups(const Sizes& s) {
  const int64_t G = s.groups > 0 ? s.groups : s.heads;
  if (s.heads % G != 0)
    throw Error("linattn: operator table: mamba2's groups is " + std::to_string(G) +
                ", expected a divisor of heads = " + std::to_string(s.heads) +
                " (each group of B and C serves heads / groups heads)");
  return G;
}

namespace {

double bnh(const Sizes& s) { return double(s.batch) * double(s.seq_q) * double(s.heads); }

// mamba_ssm's softplus (x above 20 kept as is, as torch's), in fp64 for both the fast path and the oracle:
// the time steps are one value per token and head.
double softplus(double x) { return x > 20 ? x : std::log1p(std::exp(x)); }
double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// ---- options: Mamba-2's initialisation -------------------------------------------------------------

// dt_bias = softplus⁻¹(dt) for dt log-uniform in [0.001, 0.1]; A = −U(1, 16); D = U(0.5, 1.5) (Mamba-2
// starts D at 1; drawn here so that a D applied to the wrong head shows).
Options options(const Sizes& s) {
  Options o;
  o.groups = mamba2_groups(s);
  o.decayed.decay = Decay::token;
  o.decayed.scale = 1.0f;
  o.decayed.chunk_size = s.chunk;
  o.decayed.cu_seqlens = s.cu_seqlens;
  Random draws(0x5eedaa2b);
  const auto unit = [&draws] { return draws.uniform(); };
  auto A = std::make_shared<std::vector<float>>(), D = std::make_shared<std::vector<float>>(),
       bias = std::make_shared<std::vector<float>>();
  for (int64_t h = 0; h < s.heads; ++h) {
    const double dt = std::exp(std::log(0.001) + unit() * (std::log(0.1) - std::log(0.001)));
    bias->push_back(float(dt + std::log(-std::expm1(-dt))));
    A->push_back(float(-(1.0 + 15.0 * unit())));
    D->push_back(float(0.5 + unit()));
  }
  for (auto* grad : {&o.dA, &o.dD, &o.ddt_bias}) *grad = std::make_shared<std::vector<float>>(size_t(s.heads));
  o.A = std::move(A), o.D = std::move(D), o.dt_bias = std::move(bias);
  o.scratch = std::make_shared<std::vector<float>>();
  return o;
}

// ---- the fast path ---------------------------------------------------------------------------------

template <class T>
View4<T> heads_of(View4<T> x, int64_t h0, int64_t count) {
  x.data += h0 * x.stride[2];
  x.extent[2] = count;
  return x;
}
// Group j of C or B (head j of q or k) as the `count` heads that read it: head stride 0, no copy.
ConstTensorView group_view(ConstTensorView x, int64_t j, int64_t count) {
  x.data += j * x.stride[2];
  x.extent[2] = count;
  x.stride[2] = 0;
  return x;
}

void check_sizes(const Operands& a, const Options& o) {
  const int64_t H = a.v.heads();
  if (o.A == nullptr || int64_t(o.A->size()) != H)
    throw Error("linattn: operator table: mamba2's options hold " + std::to_string(o.A ? o.A->size() : 0) +
                " values of A, expected heads = " + std::to_string(H) + " (options made for other sizes)");
}

// The decayed call's inputs: v = dt·x [B, N, H, P] and g = dt·A [B, N, H, 1], in the options' scratch.
struct Mapped {
  TensorView v, g;
};
Mapped map_inputs(const Operands& a, const Options& o) {
  check_sizes(a, o);
  const int64_t B = a.v.batch(), N = a.v.seq(), H = a.v.heads(), P = a.v.dim();
  o.scratch->resize(size_t(B * N * H * (P + 1)));
  Mapped m{bnhd(o.scratch->data(), B, N, H, P), bnhd(o.scratch->data() + B * N * H * P, B, N, H, 1)};
  for (int64_t b = 0; b < B; ++b)
    for (int64_t n = 0; n < N; ++n)
      for (int64_t h = 0; h < H; ++h) {
        const float dt = float(softplus(double(a.g(b, n, h, 0)) + double((*o.dt_bias)[size_t(h)])));
        m.g(b, n, h, 0) = dt * (*o.A)[size_t(h)];
        const float* x = a.v.row(b, n, h);
        float* v = m.v.row(b, n, h);
        for (int64_t p = 0; p < P; ++p) v[p] = dt * x[p * a.v.stride[3]];
      }
  return m;
}

// body(j, h0, count) for each group j, read by heads [h0, h0 + count): one call when every head has its own
// group (a call per head would run each head alone).
template <class Body>
void for_each_group(const Operands& a, const Options& o, const Body& body) {
  const int64_t H = a.v.heads(), G = o.groups;
  if (G == H) return body(a.q, a.k, 0, H);
  for (int64_t j = 0; j < G; ++j) body(group_view(a.q, j, H / G), group_view(a.k, j, H / G), j * (H / G), H / G);
}

void forward(const Operands& a, const Options& o) {
  const Mapped m = map_inputs(a, o);
  for_each_group(a, o, [&](ConstTensorView C, ConstTensorView B, int64_t h0, int64_t count) {
    decayed_attention_forward(heads_of(a.out, h0, count), C, B, heads_of<const float>(m.v, h0, count),
                              heads_of<const float>(m.g, h0, count), o.decayed);
  });
  for (int64_t b = 0; b < a.out.batch(); ++b)
    for (int64_t n = 0; n < a.out.seq(); ++n)
      for (int64_t h = 0; h < a.out.heads(); ++h) {
        const float D = (*o.D)[size_t(h)];
        for (int64_t p = 0; p < a.out.dim(); ++p) a.out(b, n, h, p) += D * a.v(b, n, h, p);
      }
}

// Heads [0, G) of x receive the sums of their groups' heads (head j: heads [j·H/G, (j + 1)·H/G)); heads
// [G, H) are zeroed. In place, groups in order: head j (j ≥ 1) belongs to an earlier group, already summed.
void sum_groups(TensorView x, int64_t G) {
  const int64_t H = x.heads(), r = H / G, D = x.dim();
  if (r == 1) return;
  std::vector<float> sum(static_cast<size_t>(D));
  for (int64_t b = 0; b < x.batch(); ++b)
    for (int64_t n = 0; n < x.seq(); ++n) {
      for (int64_t j = 0; j < G; ++j) {
        std::fill(sum.begin(), sum.end(), 0.0f);
        for (int64_t h = j * r; h < (j + 1) * r; ++h)
          for (int64_t d = 0; d < D; ++d) sum[size_t(d)] += x(b, n, h, d);
        for (int64_t d = 0; d < D; ++d) x(b, n, j, d) = sum[size_t(d)];
      }
      for (int64_t h = G; h < H; ++h)
        for (int64_t d = 0; d < D; ++d) x(b, n, h, d) = 0.0f;
    }
}

void backward(const Operands& a, const Options& o) {
  const Mapped m = map_inputs(a, o);
  // The decayed backward: dC and dB per head into dq and dk, d(dt·x) into dv, d(dt·A) into dg.
  for_each_group(a, o, [&](ConstTensorView C, ConstTensorView B, int64_t h0, int64_t count) {
    decayed_attention_backward(heads_of(a.dq, h0, count), heads_of(a.dk, h0, count), heads_of(a.dv, h0, count),
                               heads_of(a.dg, h0, count), {}, heads_of(a.dout, h0, count), {}, C, B,
                               heads_of<const float>(m.v, h0, count), heads_of<const float>(m.g, h0, count), o.decayed);
  });
  const int64_t H = a.v.heads(), P = a.v.dim();
  sum_groups(a.dq, o.groups);
  sum_groups(a.dk, o.groups);
  // The chain rule through dt·x, dt·A, D·x and the softplus; per-head sums in fp64.
  std::vector<double> dA(static_cast<size_t>(H)), dD(dA), dbias(dA);
  for (int64_t b = 0; b < a.v.batch(); ++b)
    for (int64_t n = 0; n < a.v.seq(); ++n)
      for (int64_t h = 0; h < H; ++h) {
        const double u = double(a.g(b, n, h, 0)) + double((*o.dt_bias)[size_t(h)]);
        const float dt = float(softplus(u)), D = (*o.D)[size_t(h)];
        float x_dv = 0.0f, x_dout = 0.0f;
        for (int64_t p = 0; p < P; ++p) {
          const float x = a.v(b, n, h, p), dout = a.dout(b, n, h, p);
          float& dx = a.dv(b, n, h, p);  // d(dt·x) on entry
          x_dv += x * dx;
          x_dout += x * dout;
          dx = dt * dx + D * dout;
        }
        float& dg = a.dg(b, n, h, 0);  // d(dt·A) on entry
        const float ddt = x_dv + (*o.A)[size_t(h)] * dg;
        dA[size_t(h)] += double(dt) * double(dg);
        dD[size_t(h)] += double(x_dout);
        dg = float(double(ddt) * sigmoid(u));
        dbias[size_t(h)] += double(dg);
      }
  for (int64_t h = 0; h < H; ++h) {
    (*o.dA)[size_t(h)] = float(dA[size_t(h)]);
    (*o.dD)[size_t(h)] = float(dD[size_t(h)]);
    (*o.ddt_bias)[size_t(h)] = float(dbias[size_t(h)]);
  }
}

// ---- the oracle: the decayed family's fp64 oracle under the same mapping -----------------------------

struct Oracle {
  reference::Tensor C, B, v, g;  // per head: C, B [B, N, H, D]; v = dt·x; g = dt·A
  std::vector<double> u;         // g + dt_bias per (b, n, h), softplus's argument
};
Oracle oracle_inputs(const OracleInputs& in, const Options& o) {
  const auto [Bt, N, H, P] = in.v.extent;
  const int64_t G = o.groups, D = in.q.extent[3];
  Oracle r{reference::Tensor({Bt, N, H, D}),
           reference::Tensor({Bt, N, H, D}),
           reference::Tensor({Bt, N, H, P}),
           reference::Tensor({Bt, N, H, 1}),
           {}};
  for (int64_t b = 0; b < Bt; ++b)
    for (int64_t n = 0; n < N; ++n)
      for (int64_t h = 0; h < H; ++h) {
        for (int64_t d = 0; d < D; ++d) {
          r.C(b, n, h, d) = in.q(b, n, h / (H / G), d);
          r.B(b, n, h, d) = in.k(b, n, h / (H / G), d);
        }
        r.u.push_back(in.g(b, n, h, 0) + double((*o.dt_bias)[size_t(h)]));
        const double dt = softplus(r.u.back());
        r.g(b, n, h, 0) = dt * double((*o.A)[size_t(h)]);
        for (int64_t p = 0; p < P; ++p) r.v(b, n, h, p) = dt * in.v(b, n, h, p);
      }
  return r;
}

OracleForward oracle_forward(const OracleInputs& in, const Options& o) {
  const Oracle m = oracle_inputs(in, o);
  reference::Tensor out = reference::decayed_attention_forward(m.C, m.B, m.v, &m.g, o.decayed).out;
  for (size_t i = 0; i < out.data.size(); ++i) {
    const int64_t h = int64_t(i) / in.v.extent[3] % in.v.extent[2];
    out.data[i] += double((*o.D)[size_t(h)]) * in.v.data[i];
  }
  return {std::move(out), {}};
}

struct OracleGradients {
  OracleBackward tensors;
  Mamba2ParameterGradients parameters;
};
OracleGradients oracle_gradients(const OracleInputs& in, const Options& o) {
  const Oracle m = oracle_inputs(in, o);
  reference::DecayedGradients d =
      reference::decayed_attention_backward(in.dout, nullptr, m.C, m.B, m.v, &m.g, o.decayed);
  const auto [Bt, N, H, P] = in.v.extent;
  const int64_t G = o.groups, D = in.q.extent[3];
  OracleGradients r;
  OracleBackward& t = r.tensors;
  t.dq = reference::Tensor(in.q.extent), t.dk = reference::Tensor(in.k.extent);
  t.dv = reference::Tensor(in.v.extent), t.dg = reference::Tensor(in.g.extent);
  Mamba2ParameterGradients& p = r.parameters;
  p.dA.assign(size_t(H), 0.0), p.dD.assign(size_t(H), 0.0), p.ddt_bias.assign(size_t(H), 0.0);
  size_t i = 0;
  for (int64_t b = 0; b < Bt; ++b)
    for (int64_t n = 0; n < N; ++n)
      for (int64_t h = 0; h < H; ++h, ++i) {
        for (int64_t e = 0; e < D; ++e) {
          t.dq(b, n, h / (H / G), e) += d.dq(b, n, h, e);
          t.dk(b, n, h / (H / G), e) += d.dk(b, n, h, e);
        }
        const double dt = softplus(m.u[i]), A = (*o.A)[size_t(h)], Dh = (*o.D)[size_t(h)];
        double ddt = A * d.dg(b, n, h, 0);
        for (int64_t e = 0; e < P; ++e) {
          ddt += in.v(b, n, h, e) * d.dv(b, n, h, e);
          t.dv(b, n, h, e) = dt * d.dv(b, n, h, e) + Dh * in.dout(b, n, h, e);
          p.dD[size_t(h)] += in.v(b, n, h, e) * in.dout(b, n, h, e);
        }
        p.dA[size_t(h)] += dt * d.dg(b, n, h, 0);
        t.dg(b, n, h, 0) = ddt * sigmoid(m.u[i]);
        p.ddt_bias[size_t(h)] += t.dg(b, n, h, 0);
      }
  return r;
}
OracleBackward oracle_backward(const OracleInputs& in, const Options& o) { return oracle_gradients(in, o).tensors; }

// ---- models ------------------------------------------------------------------------------------------

// Forward: the decayed chunked count (K = N, V = P) and per token and head the time step (softplus and
// its bias: 3), dt·x (P), dt·A (1) and D·x added (2P).
double forward_flops(const Sizes& s) { return decayed_forward_count(s) + bnh(s) * double(3 * s.value_dim + 4); }
// Backward: the decayed chunked count, the time step, dt·x and dt·A again (P + 4), Σ x·d(dt·x) (2P), ddt
// (2), dA (2), the sigmoid and its product (4), ddt_bias (1), dD (2P), dx (3P); and the sums of dB and
// dC over each group's heads: 2·(H − G)·N per token.
double backward_flops(const Sizes& s) {
  const double tokens = double(s.batch) * double(s.seq_q);
  return decayed_backward_count(s) + bnh(s) * double(8 * s.value_dim + 13) +
         tokens * 2.0 * double(s.heads - mamba2_groups(s)) * double(s.dim);
}
// Forward: x, dt read and out written per head, B and C per group; the backward reads dout too and
// writes dx, ddt, dB and dC. A, D and dt_bias (3·H) are not counted.
double token_floats(const Sizes& s) {
  return double(s.heads) * double(s.value_dim + 1) + 2.0 * double(mamba2_groups(s)) * double(s.dim);
}
double forward_bytes(const Sizes& s) {
  return 4.0 * double(s.batch) * double(s.seq_q) * (token_floats(s) + double(s.heads * s.value_dim));
}
double backward_bytes(const Sizes& s) {
  return 4.0 * double(s.batch) * double(s.seq_q) * (2.0 * token_floats(s) + double(s.heads * s.value_dim));
}
// The decayed calls' working memory and the scratch of dt·x and dt·A.
double working(const Sizes& s, bool backward) {
  return decayed_working_floats(s, backward) + bnh(s) * double(s.value_dim + 1);
}

int64_t token_gate(const Sizes&) { return 1; }

}  // namespace

Mamba2ParameterGradients mamba2_oracle_parameter_gradients(const OracleInputs& in, const Options& o) {
  return oracle_gradients(in, o).parameters;
}

Operator mamba2_row(std::vector<TestCase> (*test_cases)(), std::vector<TestCase> (*gradient_cases)(), double bound) {
  return recurrence_row(
      "mamba2", "Mamba-2's SSD (x, dt, A, B and C in G groups, D), chunked through simple GLA's operator",
      {token_gate, options, forward, backward, oracle_forward, oracle_backward},
      {forward_flops, backward_flops, forward_bytes, backward_bytes, working}, test_cases, gradient_cases, bound);
}

}  // namespace linattn::table::detail
