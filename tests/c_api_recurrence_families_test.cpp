// The C API's recurrence families beyond the decayed family and the delta rule (issue 40): the DPLR delta
// rule (RWKV-7: linattn_dplr_forward, _backward, _recurrent_forward, _step) against the fp64 oracle and the
// C++ calls, and Mamba-2 as linattn_decayed_forward/backward's token-decay call with its groups as head
// stride 0 descriptors (linattn.h) against the operator table's mamba2 oracle; grouped value heads (issue 38)
// through every decayed and delta-rule entry point against the C++ calls; and the refusals. Linked to
// liblinattn_c (the C symbols) beside liblinattn (the oracles).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "linattn/decay.hpp"
#include "linattn/delta.hpp"
#include "linattn/dplr.hpp"
#include "linattn/linattn.h"
#include "operator_table.hpp"
#include "recurrence_rows.hpp"
#include "support/tensors.hpp"

namespace linattn {
namespace {

using testing::Layout;
using testing::random_tensor;
using testing::relative_error;
using testing::Tensor32;

linattn_tensor desc(TensorView v) {
  linattn_tensor t{v.data, LINATTN_F32, {}, {}};
  for (int i = 0; i < 4; ++i) t.extent[i] = v.extent[size_t(i)], t.stride[i] = v.stride[size_t(i)];
  return t;
}
std::vector<double> widen(const std::vector<float>& x) { return {x.begin(), x.end()}; }

// One DPLR problem: B 2, T 65, H 3, K 5, V 7 in the padded layout, RWKV-7-like a = −κ̂, b = κ̂·σ, log decays
// in [−1, 0), an initial state and a final state's gradient.
struct Dplr {
  static constexpr int64_t B = 2, T = 65, H = 3, K = 5, V = 7;
  std::mt19937_64 rng{40};
  Tensor32 q = random_tensor({B, T, H, K}, Layout::padded, rng), k = random_tensor({B, T, H, K}, Layout::padded, rng),
           v = random_tensor({B, T, H, V}, Layout::padded, rng), a = random_tensor({B, T, H, K}, Layout::padded, rng),
           b = random_tensor({B, T, H, K}, Layout::padded, rng),
           gk = random_tensor({B, T, H, K}, Layout::padded, rng, -1.0f, -0.0f),
           dout = random_tensor({B, T, H, V}, Layout::padded, rng);
  std::vector<float> initial, dfinal;
  linattn_dplr_options options{};
  linattn_tensor cq{}, ck{}, cv{}, ca{}, cb{}, cgk{};  // the C descriptors of q, k, v, a, b, gk
  Dplr() {
    for (int64_t bi = 0; bi < B; ++bi)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t h = 0; h < H; ++h) {
          double norm = 0;
          for (int64_t c = 0; c < K; ++c) norm += double(a.view(bi, t, h, c)) * a.view(bi, t, h, c);
          for (int64_t c = 0; c < K; ++c) {
            const float unit = float(a.view(bi, t, h, c) / std::sqrt(norm));
            a.view(bi, t, h, c) = -unit;
            b.view(bi, t, h, c) = unit / (1.0f + std::exp(-3.0f * b.view(bi, t, h, c)));
          }
        }
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (int i = 0; i < B * H * K * V; ++i) initial.push_back(u(rng)), dfinal.push_back(u(rng));
    linattn_dplr_options_init(&options);
    options.has_scale = 1, options.scale = 0.75f;
    cq = desc(q.view), ck = desc(k.view), cv = desc(v.view), ca = desc(a.view), cb = desc(b.view), cgk = desc(gk.view);
  }
  DplrOptions cpp_options() const { return {options.scale, {}}; }
  reference::Tensor r(const Tensor32& x) const { return reference::to_double(x.view); }
};

TEST(CApiDplr, ForwardMatchesTheOracleAndTheCppCall) {
  Dplr p;
  linattn_tensor &q = p.cq, &k = p.ck, &v = p.cv, &a = p.ca, &b = p.cb, &gk = p.cgk;
  Tensor32 out = testing::make_tensor({p.B, p.T, p.H, p.V}, Layout::bhnd);
  linattn_tensor o = desc(out.view);
  std::vector<float> final_state(p.initial.size());
  ASSERT_EQ(linattn_dplr_forward(&o, &q, &k, &v, &a, &b, &gk, &p.options, p.initial.data(), final_state.data(),
                                 int64_t(final_state.size())),
            LINATTN_OK)
      << linattn_last_error();
  const std::vector<double> initial = widen(p.initial);
  const reference::DecayedOutput want = reference::dplr_delta_rule_forward(
      p.r(p.q), p.r(p.k), p.r(p.v), p.r(p.a), p.r(p.b), p.r(p.gk), p.cpp_options(), &initial);
  EXPECT_LT(relative_error(out.view, want.out), 1e-5);
  EXPECT_LT(relative_error(final_state, want.final_state), 1e-5);

  // The C++ call on the same state, bit for bit; and the token-by-token C entry point, the same.
  std::vector<float> state = p.initial;
  Tensor32 cpp = testing::make_tensor({p.B, p.T, p.H, p.V}, Layout::bnhd);
  dplr_delta_rule_recurrent_forward(cpp.view, p.q.view, p.k.view, p.v.view, p.a.view, p.b.view, p.gk.view, state,
                                    p.cpp_options());
  EXPECT_EQ(relative_error(out.view, reference::to_double(cpp.view)), 0.0);
  EXPECT_EQ(state, final_state);
  std::vector<float> recurrent = p.initial;
  ASSERT_EQ(linattn_dplr_recurrent_forward(&o, &q, &k, &v, &a, &b, &gk, recurrent.data(), int64_t(recurrent.size()),
                                           &p.options),
            LINATTN_OK);
  EXPECT_EQ(recurrent, final_state);
  EXPECT_EQ(relative_error(out.view, reference::to_double(cpp.view)), 0.0);

  // Without states: from zero, and no final state wanted.
  ASSERT_EQ(linattn_dplr_forward(&o, &q, &k, &v, &a, &b, &gk, &p.options, nullptr, nullptr, 0), LINATTN_OK);
  EXPECT_LT(relative_error(out.view, reference::dplr_delta_rule_forward(p.r(p.q), p.r(p.k), p.r(p.v), p.r(p.a),
                                                                        p.r(p.b), p.r(p.gk), p.cpp_options())
                                         .out),
            1e-5);
}

TEST(CApiDplr, BackwardMatchesTheOracle) {
  Dplr p;
  linattn_tensor &q = p.cq, &k = p.ck, &v = p.cv, &a = p.ca, &b = p.cb, &gk = p.cgk, dout = desc(p.dout.view);
  std::vector<Tensor32> grads;
  for (int64_t cols : {p.K, p.K, p.V, p.K, p.K, p.K})
    grads.push_back(testing::make_tensor({p.B, p.T, p.H, cols}, Layout::bnhd));
  linattn_tensor d[6];
  for (int i = 0; i < 6; ++i) d[i] = desc(grads[size_t(i)].view);
  std::vector<float> dinitial(p.initial.size());
  ASSERT_EQ(linattn_dplr_backward(&d[0], &d[1], &d[2], &d[3], &d[4], &d[5], dinitial.data(), &dout, p.dfinal.data(), &q,
                                  &k, &v, &a, &b, &gk, &p.options, p.initial.data(), int64_t(p.initial.size())),
            LINATTN_OK)
      << linattn_last_error();
  const std::vector<double> initial = widen(p.initial), dfinal = widen(p.dfinal);
  const reference::DplrGradients want = reference::dplr_delta_rule_backward(
      p.r(p.dout), &dfinal, p.r(p.q), p.r(p.k), p.r(p.v), p.r(p.a), p.r(p.b), p.r(p.gk), p.cpp_options(), &initial);
  const reference::Tensor* wants[] = {&want.dq, &want.dk, &want.dv, &want.da, &want.db, &want.dgk};
  for (int i = 0; i < 6; ++i) EXPECT_LT(relative_error(grads[size_t(i)].view, *wants[i]), 1e-5) << i;
  EXPECT_LT(relative_error(dinitial, want.dinitial_state), 1e-5);
}

TEST(CApiDplr, StepDecodesTheSequenceTokenByToken) {
  Dplr p;
  linattn_state* state = nullptr;
  ASSERT_EQ(linattn_state_create(p.B, p.H, p.K, p.V, linattn_dplr_name(), &state), LINATTN_OK);
  float* S = nullptr;
  int64_t size = 0;
  ASSERT_EQ(linattn_state_data(state, &S, &size, nullptr, nullptr), LINATTN_OK);
  std::copy(p.initial.begin(), p.initial.end(), S);
  Tensor32 out = testing::make_tensor({p.B, p.T, p.H, p.V}, Layout::bnhd);
  const auto token = [](TensorView x, int64_t t) {
    x.data += t * x.stride[1];
    x.extent[1] = 1;
    return desc(x);
  };
  for (int64_t t = 0; t < p.T; ++t) {
    linattn_tensor o = token(out.view, t), q = token(p.q.view, t), k = token(p.k.view, t), v = token(p.v.view, t),
                   a = token(p.a.view, t), b = token(p.b.view, t), gk = token(p.gk.view, t);
    ASSERT_EQ(linattn_dplr_step(&o, &q, &k, &v, &a, &b, &gk, state, &p.options), LINATTN_OK) << linattn_last_error();
  }
  const std::vector<double> initial = widen(p.initial);
  const reference::DecayedOutput want = reference::dplr_delta_rule_forward(
      p.r(p.q), p.r(p.k), p.r(p.v), p.r(p.a), p.r(p.b), p.r(p.gk), p.cpp_options(), &initial);
  EXPECT_LT(relative_error(out.view, want.out), 1e-5);
  EXPECT_LT(relative_error(std::vector<float>(S, S + size), want.final_state), 1e-5);
  int64_t extents[4], position = 0;
  ASSERT_EQ(linattn_state_shape(state, extents, &position), LINATTN_OK);
  EXPECT_EQ(position, p.T);
  linattn_state_free(state);
}

void expect_refused(linattn_status got, linattn_status want, const char* needle) {
  EXPECT_EQ(got, want) << linattn_last_error();
  EXPECT_NE(std::string(linattn_last_error()).find(needle), std::string::npos) << linattn_last_error();
}

TEST(CApiDplr, RefusesByName) {
  Dplr p;
  linattn_tensor &q = p.cq, &k = p.ck, &v = p.cv, &a = p.ca, &b = p.cb, &gk = p.cgk;
  Tensor32 out = testing::make_tensor({p.B, p.T, p.H, p.V}, Layout::bnhd);
  linattn_tensor o = desc(out.view);
  std::vector<float> state(p.initial.size());
  const int64_t n = int64_t(state.size());
  linattn_tensor half = o;
  half.dtype = LINATTN_BF16;
  expect_refused(linattn_dplr_forward(&half, &q, &k, &v, &a, &b, &gk, &p.options, nullptr, nullptr, 0),
                 LINATTN_ERROR_UNSUPPORTED_DTYPE, "out.dtype is LINATTN_BF16");
  linattn_tensor half_a = a;
  half_a.dtype = LINATTN_BF16;
  expect_refused(linattn_dplr_recurrent_forward(&o, &q, &k, &v, &half_a, &b, &gk, state.data(), n, &p.options),
                 LINATTN_ERROR_INVALID_ARGUMENT, "a.dtype");
  expect_refused(linattn_dplr_forward(&o, &q, nullptr, &v, &a, &b, &gk, &p.options, nullptr, nullptr, 0),
                 LINATTN_ERROR_NULL_POINTER, "k is NULL");
  expect_refused(linattn_dplr_recurrent_forward(&o, &q, &k, &v, &a, &b, &gk, nullptr, 0, &p.options),
                 LINATTN_ERROR_NULL_POINTER, "state");
  expect_refused(linattn_dplr_recurrent_forward(&o, &q, &k, &v, &a, &b, &gk, state.data(), n - 1, &p.options),
                 LINATTN_ERROR_INVALID_ARGUMENT, "state");
  expect_refused(linattn_dplr_forward(&o, &q, &k, &v, &a, &b, &gk, &p.options, p.initial.data(), nullptr, 0),
                 LINATTN_ERROR_INVALID_ARGUMENT, "initial_state is a pointer with a count of 0");
  linattn_tensor short_gk = gk;
  short_gk.extent[3] = p.K - 1;
  expect_refused(linattn_dplr_forward(&o, &q, &k, &v, &a, &b, &short_gk, &p.options, nullptr, nullptr, 0),
                 LINATTN_ERROR_INVALID_ARGUMENT, "gk");
  linattn_dplr_options packed = p.options;
  const int64_t cu[] = {0, 3};
  packed.cu_seqlens = cu;
  expect_refused(linattn_dplr_forward(&o, &q, &k, &v, &a, &b, &gk, &packed, nullptr, nullptr, 0),
                 LINATTN_ERROR_INVALID_ARGUMENT, "options->cu_seqlens is a pointer with a count of 0");
  // A decoding state of another recurrence.
  linattn_state* gla = nullptr;
  ASSERT_EQ(linattn_state_create(p.B, p.H, p.K, p.V, linattn_decay_name(LINATTN_DECAY_KEY), &gla), LINATTN_OK);
  linattn_tensor one[7];
  TensorView views[] = {out.view, p.q.view, p.k.view, p.v.view, p.a.view, p.b.view, p.gk.view};
  for (int i = 0; i < 7; ++i) {
    views[i].extent[1] = 1;
    one[i] = desc(views[i]);
  }
  expect_refused(linattn_dplr_step(&one[0], &one[1], &one[2], &one[3], &one[4], &one[5], &one[6], gla, &p.options),
                 LINATTN_ERROR_INVALID_ARGUMENT, "dplr_delta_rule");
  linattn_state_free(gla);
}

// Mamba-2 through linattn_decayed_forward/backward as linattn.h says: q = C, k = B (group j's descriptor has
// head stride 0 and serves heads [j·H/G, (j + 1)·H/G)), v = dt·x, g = dt·A, scale 1, then y += D·x; dC and
// dB summed over each group's heads. Checked against the operator table's mamba2 oracle on the same inputs.
TEST(CApiMamba2, IsTheDecayedCallPerGroup) {
  const table::Operator& row = table::find("mamba2");
  table::Sizes s;
  s.batch = 2, s.seq_q = s.seq_k = 65, s.heads = 4, s.groups = 2, s.dim = 5, s.value_dim = 7;
  const table::Options o = row.options(s);
  const int64_t B = s.batch, T = s.seq_q, H = s.heads, G = s.groups, N = s.dim, P = s.value_dim, r = H / G;
  std::mt19937_64 rng(2);
  // C and B [B, T, G, N] (in the first G heads of the oracle's q and k), x, dt before softplus, dout.
  Tensor32 C = random_tensor({B, T, G, N}, Layout::bnhd, rng), Bm = random_tensor({B, T, G, N}, Layout::bnhd, rng),
           x = random_tensor({B, T, H, P}, Layout::bnhd, rng), raw = random_tensor({B, T, H, 1}, Layout::bnhd, rng),
           dout = random_tensor({B, T, H, P}, Layout::bnhd, rng);
  std::vector<float> v(size_t(B * T * H * P)), g(size_t(B * T * H));
  TensorView vv = bnhd(v.data(), B, T, H, P), gv = bnhd(g.data(), B, T, H, int64_t(1));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < H; ++h) {
        const float dt = std::log1p(std::exp(raw.view(b, t, h, 0) + (*o.dt_bias)[size_t(h)]));
        gv(b, t, h, 0) = dt * (*o.A)[size_t(h)];
        for (int64_t p = 0; p < P; ++p) vv(b, t, h, p) = dt * x.view(b, t, h, p);
      }
  linattn_decay_options options;
  linattn_decay_options_init(&options);
  options.decay = LINATTN_DECAY_TOKEN, options.has_scale = 1, options.scale = 1.0f;
  Tensor32 out = testing::make_tensor({B, T, H, P}, Layout::bnhd),
           dC = testing::make_tensor({B, T, H, N}, Layout::bnhd), dB = testing::make_tensor({B, T, H, N}, Layout::bnhd),
           dv = testing::make_tensor({B, T, H, P}, Layout::bnhd), dg = testing::make_tensor({B, T, H, 1}, Layout::bnhd);
  const auto heads = [](TensorView t, int64_t h0, int64_t count) {
    t.data += h0 * t.stride[2];
    t.extent[2] = count;
    return desc(t);
  };
  for (int64_t j = 0; j < G; ++j) {
    linattn_tensor q = heads(C.view, j, r), k = heads(Bm.view, j, r);
    q.stride[2] = k.stride[2] = 0;
    linattn_tensor y = heads(out.view, j * r, r), vj = heads(vv, j * r, r), gj = heads(gv, j * r, r),
                   dy = heads(dout.view, j * r, r), dq = heads(dC.view, j * r, r), dk = heads(dB.view, j * r, r),
                   dvj = heads(dv.view, j * r, r), dgj = heads(dg.view, j * r, r);
    ASSERT_EQ(linattn_decayed_forward(&y, &q, &k, &vj, &gj, &options, nullptr, nullptr, 0), LINATTN_OK)
        << linattn_last_error();
    ASSERT_EQ(
        linattn_decayed_backward(&dq, &dk, &dvj, &dgj, nullptr, &dy, nullptr, &q, &k, &vj, &gj, &options, nullptr, 0),
        LINATTN_OK)
        << linattn_last_error();
  }
  // The oracle's operands: C and B in the first G heads of [B, T, H, N] (the other heads unread).
  table::OracleInputs in;
  in.q = reference::Tensor({B, T, H, N}), in.k = reference::Tensor({B, T, H, N});
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t j = 0; j < G; ++j)
        for (int64_t n = 0; n < N; ++n) in.q(b, t, j, n) = C.view(b, t, j, n), in.k(b, t, j, n) = Bm.view(b, t, j, n);
  in.v = reference::to_double(x.view), in.g = reference::to_double(raw.view), in.dout = reference::to_double(dout.view);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t p = 0; p < P; ++p) out.view(b, t, h, p) += (*o.D)[size_t(h)] * x.view(b, t, h, p);
  EXPECT_LT(relative_error(out.view, row.oracle_forward(in, o).out), 1e-5);
  // dC, dB: the sums over each group's heads, against the oracle's (in its first G heads).
  const table::OracleBackward want = row.oracle_backward(in, o);
  reference::Tensor dCsum({B, T, H, N}), dBsum({B, T, H, N});
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t n = 0; n < N; ++n)
          dCsum(b, t, h / r, n) += dC.view(b, t, h, n), dBsum(b, t, h / r, n) += dB.view(b, t, h, n);
  EXPECT_LT(relative_error(dCsum, want.dq), 1e-5);
  EXPECT_LT(relative_error(dBsum, want.dk), 1e-5);
}

// Grouped value heads (linattn.h): q, k [B, T, H, K] against v, out, g, beta [B, T, HV, ·] and states
// [N, HV, K, V], HV = 3·H, value head j reading q/k head j / 3. One decayed gate (GLA: g per key dimension)
// and one delta gate (Gated DeltaNet: g per token) through the chunked forward and backward, the token-by-
// token forward and the decode step; each equals the C++ call bit for bit (the C layer sizes nothing by q's
// heads). The padded layout gives every tensor strides that differ from its extents.
struct Grouped {
  static constexpr int64_t B = 2, T = 65, H = 2, K = 5, V = 7;
  bool delta;
  int64_t HV;
  std::mt19937_64 rng{38};
  Tensor32 q = random_tensor({B, T, H, K}, Layout::padded, rng), k = random_tensor({B, T, H, K}, Layout::padded, rng),
           v = random_tensor({B, T, HV, V}, Layout::padded, rng),
           beta = random_tensor({B, T, HV, 1}, Layout::padded, rng, 0.1f, 1.0f),
           g = random_tensor({B, T, HV, delta ? 1 : K}, Layout::padded, rng, -1.0f, -0.0f),
           dout = random_tensor({B, T, HV, V}, Layout::padded, rng);
  std::vector<float> initial, dfinal;
  linattn_decay_options decay{};
  linattn_delta_options gate{};
  int64_t n_state = 0;  // the state buffers' count the C calls are told: [N, HV, K, V]
  explicit Grouped(bool is_delta, int64_t value_heads = 6) : delta(is_delta), HV(value_heads) {
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (int i = 0; i < B * HV * K * V; ++i) initial.push_back(u(rng)), dfinal.push_back(u(rng));
    n_state = int64_t(initial.size());
    linattn_decay_options_init(&decay);
    decay.decay = LINATTN_DECAY_KEY;
    linattn_delta_options_init(&gate);
    gate.gate = LINATTN_DELTA_TOKEN, gate.chunk_size = 16;
  }
  DecayedAttentionOptions cpp_decay() const { return {Decay::key, std::nullopt, {}, {}, decay.chunk_size}; }
  DeltaRuleOptions cpp_gate() const {
    DeltaRuleOptions o;
    o.gate = DeltaGate::token, o.chunk_size = gate.chunk_size;
    return o;
  }
  const char* name() const { return delta ? linattn_delta_name(gate.gate) : linattn_decay_name(decay.decay); }
  int64_t n() const { return n_state; }

  // The C entry points on this problem's tensors.
  linattn_status c_forward(TensorView out, float* final_state) const {
    linattn_tensor o = desc(out), cq = desc(q.view), ck = desc(k.view), cv = desc(v.view), cb = desc(beta.view),
                   cg = desc(g.view);
    return delta ? linattn_delta_forward(&o, &cq, &ck, &cv, &cb, &cg, &gate, initial.data(), final_state, n())
                 : linattn_decayed_forward(&o, &cq, &ck, &cv, &cg, &decay, initial.data(), final_state, n());
  }
  linattn_status c_backward(std::vector<Tensor32>& d, float* dinitial) const {
    linattn_tensor dq = desc(d[0].view), dk = desc(d[1].view), dv = desc(d[2].view), db = desc(d[3].view),
                   dg = desc(d[4].view), dy = desc(dout.view), cq = desc(q.view), ck = desc(k.view), cv = desc(v.view),
                   cb = desc(beta.view), cg = desc(g.view);
    return delta ? linattn_delta_backward(&dq, &dk, &dv, &db, &dg, dinitial, &dy, dfinal.data(), &cq, &ck, &cv, &cb,
                                          &cg, &gate, initial.data(), n())
                 : linattn_decayed_backward(&dq, &dk, &dv, &dg, dinitial, &dy, dfinal.data(), &cq, &ck, &cv, &cg,
                                            &decay, initial.data(), n());
  }
  linattn_status c_recurrent(TensorView out, std::vector<float>& state) const {
    linattn_tensor o = desc(out), cq = desc(q.view), ck = desc(k.view), cv = desc(v.view), cb = desc(beta.view),
                   cg = desc(g.view);
    return delta ? linattn_delta_recurrent_forward(&o, &cq, &ck, &cv, &cb, &cg, state.data(), n(), &gate)
                 : linattn_decayed_recurrent_forward(&o, &cq, &ck, &cv, &cg, state.data(), n(), &decay);
  }
  // Tokens [t0, t0 + count) of every operand.
  linattn_status c_step(TensorView out, int64_t t0, int64_t count, linattn_state* state) const {
    linattn_tensor o = desc(tokens(out, t0, count)), cq = desc(tokens(q.view, t0, count)),
                   ck = desc(tokens(k.view, t0, count)), cv = desc(tokens(v.view, t0, count)),
                   cb = desc(tokens(beta.view, t0, count)), cg = desc(tokens(g.view, t0, count));
    return delta ? linattn_delta_step(&o, &cq, &ck, &cv, &cb, &cg, state, &gate)
                 : linattn_decayed_step(&o, &cq, &ck, &cv, &cg, state, &decay);
  }
  static TensorView tokens(TensorView x, int64_t t0, int64_t count) {
    x.data += t0 * x.stride[1];
    x.extent[1] = count;
    return x;
  }

  // The same through C++.
  void cpp_forward(TensorView out, std::span<float> final_state) const {
    if (delta)
      delta_rule_forward(out, q.view, k.view, v.view, beta.view, g.view, cpp_gate(), initial, final_state);
    else
      decayed_attention_forward(out, q.view, k.view, v.view, g.view, cpp_decay(), initial, final_state);
  }
  void cpp_backward(std::vector<Tensor32>& d, std::span<float> dinitial) const {
    if (delta)
      delta_rule_backward(d[0].view, d[1].view, d[2].view, d[3].view, d[4].view, dinitial, dout.view, dfinal, q.view,
                          k.view, v.view, beta.view, g.view, cpp_gate(), initial);
    else
      decayed_attention_backward(d[0].view, d[1].view, d[2].view, d[4].view, dinitial, dout.view, dfinal, q.view,
                                 k.view, v.view, g.view, cpp_decay(), initial);
  }
  void cpp_recurrent(TensorView out, std::span<float> state) const {
    if (delta)
      delta_rule_recurrent_forward(out, q.view, k.view, v.view, beta.view, g.view, state, cpp_gate());
    else
      decayed_recurrent_forward(out, q.view, k.view, v.view, g.view, state, cpp_decay());
  }
  void cpp_step(TensorView out, int64_t t0, int64_t count, RecurrentState& state) const {
    const auto at = [&](TensorView x) { return tokens(x, t0, count); };
    if (delta)
      delta_rule_step(at(out), at(q.view), at(k.view), at(v.view), at(beta.view), at(g.view), state, cpp_gate());
    else
      decayed_step(at(out), at(q.view), at(k.view), at(v.view), at(g.view), state, cpp_decay());
  }

  Tensor32 output() const { return testing::make_tensor({B, T, HV, V}, Layout::bnhd); }
  // dq, dk [B, T, H, K] (the sums over each group), dv, dbeta, dg with v's heads.
  std::vector<Tensor32> gradients() const {
    std::vector<Tensor32> d;
    for (auto e : std::vector<std::array<int64_t, 4>>{
             {B, T, H, K}, {B, T, H, K}, {B, T, HV, V}, {B, T, HV, 1}, {B, T, HV, delta ? 1 : K}})
      d.push_back(testing::make_tensor(e, Layout::bnhd));
    return d;
  }
};

bool same(const Tensor32& a, const Tensor32& b) { return relative_error(a.view, reference::to_double(b.view)) == 0.0; }

class CApiGroupedHeads : public ::testing::TestWithParam<bool> {};

TEST_P(CApiGroupedHeads, EveryEntryPointEqualsTheCppCall) {
  const Grouped p(GetParam());
  SCOPED_TRACE(p.name());
  // Chunked forward with an initial and a final state.
  Tensor32 out = p.output(), cpp = p.output();
  std::vector<float> final_state(p.initial.size()), cpp_final(p.initial.size());
  ASSERT_EQ(p.c_forward(out.view, final_state.data()), LINATTN_OK) << linattn_last_error();
  p.cpp_forward(cpp.view, cpp_final);
  EXPECT_TRUE(same(out, cpp));
  EXPECT_EQ(final_state, cpp_final);

  // Chunked backward: dq, dk of q's heads, every gradient and dinitial_state as the C++ call's.
  std::vector<Tensor32> d = p.gradients(), cpp_d = p.gradients();
  std::vector<float> dinitial(p.initial.size()), cpp_dinitial(p.initial.size());
  ASSERT_EQ(p.c_backward(d, dinitial.data()), LINATTN_OK) << linattn_last_error();
  p.cpp_backward(cpp_d, cpp_dinitial);
  for (size_t i = 0; i < d.size(); ++i)
    if (p.delta || i != 3) {  // the decayed family has no beta
      EXPECT_TRUE(same(d[i], cpp_d[i])) << "gradient " << i;
    }
  EXPECT_EQ(dinitial, cpp_dinitial);

  // Token by token, the state in place.
  std::vector<float> state = p.initial, cpp_state = p.initial;
  ASSERT_EQ(p.c_recurrent(out.view, state), LINATTN_OK) << linattn_last_error();
  p.cpp_recurrent(cpp.view, cpp_state);
  EXPECT_TRUE(same(out, cpp));
  EXPECT_EQ(state, cpp_state);

  // Decoding a linattn_state made with v's heads: one token, then the other 64 in one call.
  linattn_state* decoder = nullptr;
  ASSERT_EQ(linattn_state_create(p.B, p.HV, p.K, p.V, p.name(), &decoder), LINATTN_OK) << linattn_last_error();
  float* S = nullptr;
  int64_t size = 0;
  ASSERT_EQ(linattn_state_data(decoder, &S, &size, nullptr, nullptr), LINATTN_OK);
  ASSERT_EQ(size, p.n());
  std::copy(p.initial.begin(), p.initial.end(), S);
  RecurrentState cpp_decoder(p.B, p.HV, p.K, p.V, p.name());
  std::copy(p.initial.begin(), p.initial.end(), cpp_decoder.S().begin());
  for (auto [t0, count] : {std::pair<int64_t, int64_t>{0, 1}, {1, p.T - 1}}) {
    ASSERT_EQ(p.c_step(out.view, t0, count, decoder), LINATTN_OK) << linattn_last_error();
    p.cpp_step(cpp.view, t0, count, cpp_decoder);
  }
  EXPECT_TRUE(same(out, cpp));
  EXPECT_EQ(std::vector<float>(S, S + size), std::vector<float>(cpp_decoder.S().begin(), cpp_decoder.S().end()));
  linattn_state_free(decoder);
}

// Every entry point of p refused with why (the decode step with step_why, on a state of decoder_heads).
void expect_every_entry_point_refused(const Grouped& p, const char* why, int64_t decoder_heads, const char* step_why) {
  SCOPED_TRACE(p.name());
  Tensor32 out = p.output();
  std::vector<float> state(size_t(p.n_state));
  expect_refused(p.c_forward(out.view, state.data()), LINATTN_ERROR_INVALID_ARGUMENT, why);
  std::vector<Tensor32> d = p.gradients();
  expect_refused(p.c_backward(d, state.data()), LINATTN_ERROR_INVALID_ARGUMENT, why);
  expect_refused(p.c_recurrent(out.view, state), LINATTN_ERROR_INVALID_ARGUMENT, why);
  linattn_state* decoder = nullptr;
  ASSERT_EQ(linattn_state_create(p.B, decoder_heads, p.K, p.V, p.name(), &decoder), LINATTN_OK) << linattn_last_error();
  expect_refused(p.c_step(out.view, 0, 1, decoder), LINATTN_ERROR_INVALID_ARGUMENT, step_why);
  linattn_state_free(decoder);
}

TEST_P(CApiGroupedHeads, RefusesValueHeadsNotAMultipleOfTheQueryHeads) {
  // v, out, g, beta and the states with 5 heads against q's 2: every entry point names v's heads and q's.
  const char* why = "v.extent[2] (heads) is 5, expected a multiple of 2 (q's heads";
  expect_every_entry_point_refused(Grouped(GetParam(), 5), why, 5, why);
}

TEST_P(CApiGroupedHeads, RefusesStatesOfTheQueryHeads) {
  // States sized by q's heads where a grouped call's have v's HV: refused naming v's heads and the extents.
  Grouped p(GetParam());
  p.n_state = p.B * p.H * p.K * p.V;
  expect_every_entry_point_refused(p, "has 140 elements, expected 420 ([N, HV, K, V] = [2, 6, 5, 7], HV v's heads)",
                                   p.H, "state.heads() is 2, expected 6 (v's heads)");
}

INSTANTIATE_TEST_SUITE_P(DecayedAndDelta, CApiGroupedHeads, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& param) { return param.param ? "delta" : "decayed"; });

}  // namespace
}  // namespace linattn
