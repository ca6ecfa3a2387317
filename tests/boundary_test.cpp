// The one boundary check, tripped once per operator: an output with stride 0 (two heads writing the
// same floats), an output whose rows overlap, one buffer passed as two outputs, and an output that is
// an input are each refused with a message naming the output and the other argument (or the axis and
// stride); disjoint slices of one fused buffer, inputs that alias each other and broadcast (stride 0)
// inputs are accepted.
#include <gtest/gtest.h>

#include <functional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "linattn/error.hpp"
#include "linattn/linear_attention.hpp"
#include "linattn/linformer.hpp"
#include "linattn/performer.hpp"
#include "linattn/reference.hpp"
#include "linattn/softmax_attention.hpp"
#include "support/temp_dir.hpp"

namespace linattn {
namespace {

using testing::error_of;

constexpr int64_t B = 2, H = 2, D = 4;  // E = D: an output can stand where an input is
constexpr int64_t kLong = 20;           // more than the 16 queries of softmax's decode path

// Filled buffers for q [B, Nq, H, D], k and v [B, Nk, H, D], and the outputs of either direction.
struct Buffers {
  int64_t Nq, Nk;
  std::vector<float> q, k, v, dout, out, lse, dq, dk, dv;
  Buffers(int64_t Nq_, int64_t Nk_) : Nq(Nq_), Nk(Nk_) {
    std::mt19937_64 rng(uint64_t(Nq * 100 + Nk));
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (auto* x : {&q, &dout, &out, &dq}) x->resize(size_t(B * Nq * H * D));
    for (auto* x : {&k, &v, &dk, &dv}) x->resize(size_t(B * Nk * H * D));
    lse.resize(size_t(B * H * Nq));
    for (auto* x : {&q, &k, &v, &dout})
      for (float& e : *x) e = u(rng);
  }
  TensorView Q() { return bnhd(q.data(), B, Nq, H, D); }
  TensorView K() { return bnhd(k.data(), B, Nk, H, D); }
  TensorView V() { return bnhd(v.data(), B, Nk, H, D); }
  TensorView dO() { return bnhd(dout.data(), B, Nq, H, D); }
  TensorView O() { return bnhd(out.data(), B, Nq, H, D); }
  TensorView dQ() { return bnhd(dq.data(), B, Nq, H, D); }
  TensorView dK() { return bnhd(dk.data(), B, Nk, H, D); }
  TensorView dV() { return bnhd(dv.data(), B, Nk, H, D); }
};

// x with head stride 0: the heads of one token write the same D floats.
TensorView heads_stride_zero(TensorView x) {
  x.stride[2] = 0;
  return x;
}
// x with a head stride of D/2: the rows of neighbouring heads share half their floats.
TensorView head_rows_overlapping(TensorView x) { return {x.data, x.extent, {x.extent[1] * H * D, H * D, D / 2, 1}}; }
// x laid out [B, H, N, D] with a token stride of D/2: consecutive tokens share half their floats.
TensorView token_rows_overlapping(TensorView x) {
  return {x.data, x.extent, {H * x.extent[1] * D, D / 2, x.extent[1] * D, 1}};
}

void expect_accepted(const std::string& message, const char* what) { EXPECT_EQ(message, "<no error>") << what; }
void expect_message(const std::string& message, const std::string& want, const char* what) {
  EXPECT_NE(message.find(want), std::string::npos) << what << ": got \"" << message << "\", want \"" << want << "\"";
}

// out and (when the operator has one) lse, then q, k, v.
using Forward = std::function<void(TensorView, std::span<float>, ConstTensorView, ConstTensorView, ConstTensorView)>;

void expect_forward_boundary(const char* op, Buffers& x, bool has_lse, const Forward& f) {
  const std::span<float> lse = has_lse ? std::span<float>(x.lse) : std::span<float>();
  const auto run = [&](TensorView out, std::span<float> l, ConstTensorView q, ConstTensorView k, ConstTensorView v) {
    return error_of([&] { f(out, l, q, k, v); });
  };
  expect_accepted(run(x.O(), lse, x.Q(), x.K(), x.V()), op);
  expect_message(run(heads_stride_zero(x.O()), lse, x.Q(), x.K(), x.V()), "out.stride[2] (heads) is 0, expected ≥", op);
  expect_message(run(head_rows_overlapping(x.O()), lse, x.Q(), x.K(), x.V()),
                 "out.stride[2] (heads) is 2, expected ≥ 4", op);
  if (x.Nq > 1)
    expect_message(run(token_rows_overlapping(x.O()), lse, x.Q(), x.K(), x.V()),
                   "out.stride[1] (sequence) is 2, expected ≥ 4", op);
  expect_message(run(x.Q(), lse, x.Q(), x.K(), x.V()), "out overlaps q", op);
  if (x.Nq == x.Nk) expect_message(run(x.V(), lse, x.Q(), x.K(), x.V()), "out overlaps v", op);
  if (has_lse) {
    const std::span<float> in_out(x.out.data() + 3, x.lse.size());
    expect_message(run(x.O(), in_out, x.Q(), x.K(), x.V()), "lse overlaps out", op);
    expect_message(run(x.O(), std::span<float>(x.k.data(), x.lse.size()), x.Q(), x.K(), x.V()), "lse overlaps k", op);
  }
  // Inputs may share memory with each other, and be broadcast along an axis.
  expect_accepted(run(x.O(), lse, x.Q(), x.K(), x.K()), op);
  expect_accepted(run(x.O(), lse, x.Q(), heads_stride_zero(x.K()), heads_stride_zero(x.V())), op);
}

// dq, dk, dv, then dout, q, k, v.
using Backward = std::function<void(TensorView, TensorView, TensorView, ConstTensorView, ConstTensorView,
                                    ConstTensorView, ConstTensorView)>;

void expect_backward_boundary(const char* op, Buffers& x, const Backward& f) {
  const auto run = [&](TensorView dq, TensorView dk, TensorView dv) {
    return error_of([&] { f(dq, dk, dv, x.dO(), x.Q(), x.K(), x.V()); });
  };
  expect_accepted(run(x.dQ(), x.dK(), x.dV()), op);
  expect_message(run(heads_stride_zero(x.dQ()), x.dK(), x.dV()), "dq.stride[2] (heads) is 0, expected ≥", op);
  expect_message(run(x.dQ(), head_rows_overlapping(x.dK()), x.dV()), "dk.stride[2] (heads) is 2, expected ≥ 4", op);
  expect_message(run(x.dQ(), x.dK(), token_rows_overlapping(x.dV())), "dv.stride[1] (sequence) is 2, expected ≥ 4", op);
  expect_message(run(x.dQ(), x.dK(), x.dK()), "dk overlaps dv", op);
  expect_message(run(x.dQ(), x.K(), x.dV()), "dk overlaps k", op);
  if (x.Nq == x.Nk) {
    expect_message(run(x.dQ(), x.dQ(), x.dV()), "dq overlaps dk", op);
    expect_message(run(x.dQ(), x.dK(), x.dO()), "dv overlaps dout", op);
    // dq, dk, dv as the three parts of one [B, N, 3, H, D] buffer: disjoint, so accepted.
    std::vector<float> fused(size_t(B * x.Nq * 3 * H * D));
    TensorView part[3];
    for (int i = 0; i < 3; ++i)
      part[i] = {fused.data() + i * H * D, {B, x.Nq, H, D}, {x.Nq * 3 * H * D, 3 * H * D, D, 1}};
    expect_accepted(run(part[0], part[1], part[2]), op);
    // dk shifted by one float: its last element of each token is dv's first.
    part[1].data += 1;
    expect_message(run(part[0], part[1], part[2]), "dk overlaps dv", op);
  }
}

TEST(Boundary, SoftmaxForward) {
  Buffers x(kLong, kLong);
  expect_forward_boundary("softmax_attention_forward", x, true,
                          [](TensorView out, std::span<float> lse, ConstTensorView q, ConstTensorView k,
                             ConstTensorView v) { softmax_attention_forward(out, lse, q, k, v); });
}

TEST(Boundary, SoftmaxDecode) {
  Buffers x(1, kLong);  // one query: the decode kernels
  expect_forward_boundary("softmax decode", x, true,
                          [](TensorView out, std::span<float> lse, ConstTensorView q, ConstTensorView k,
                             ConstTensorView v) { softmax_attention_forward(out, lse, q, k, v); });
}

TEST(Boundary, SoftmaxBackward) {
  Buffers x(kLong, kLong);
  softmax_attention_forward(x.O(), x.lse, x.Q(), x.K(), x.V());
  const ConstTensorView out = x.O();
  const std::span<const float> lse = x.lse;
  expect_backward_boundary(
      "softmax_attention_backward", x,
      [&](TensorView dq, TensorView dk, TensorView dv, ConstTensorView dout, ConstTensorView q, ConstTensorView k,
          ConstTensorView v) { softmax_attention_backward(dq, dk, dv, dout, q, k, v, out, lse); });
  expect_message(
      error_of([&] { softmax_attention_backward(x.dQ(), x.dK(), x.dV(), x.dO(), x.Q(), x.K(), x.V(), x.dQ(), lse); }),
      "dq overlaps out", "softmax_attention_backward");
}

TEST(Boundary, LinearForward) {
  for (bool causal : {false, true}) {
    Buffers x(kLong, kLong);
    LinearAttentionOptions o;
    o.causal = causal;
    expect_forward_boundary(causal ? "linear_attention_forward causal" : "linear_attention_forward", x, false,
                            [&](TensorView out, std::span<float>, ConstTensorView q, ConstTensorView k,
                                ConstTensorView v) { linear_attention_forward(out, q, k, v, o); });
  }
}

TEST(Boundary, LinearBackward) {
  for (bool causal : {false, true}) {
    Buffers x(kLong, kLong);
    LinearAttentionOptions o;
    o.causal = causal;
    expect_backward_boundary(
        causal ? "linear_attention_backward causal" : "linear_attention_backward", x,
        [&](TensorView dq, TensorView dk, TensorView dv, ConstTensorView dout, ConstTensorView q, ConstTensorView k,
            ConstTensorView v) { linear_attention_backward(dq, dk, dv, dout, q, k, v, o); });
  }
}

TEST(Boundary, CausalLinearWithStates) {
  Buffers x(kLong, kLong);
  expect_forward_boundary("causal_linear_attention_forward", x, false,
                          [](TensorView out, std::span<float>, ConstTensorView q, ConstTensorView k,
                             ConstTensorView v) { causal_linear_attention_forward(out, q, k, v); });
  expect_backward_boundary(
      "causal_linear_attention_backward", x,
      [](TensorView dq, TensorView dk, TensorView dv, ConstTensorView dout, ConstTensorView q, ConstTensorView k,
         ConstTensorView v) { causal_linear_attention_backward(dq, dk, dv, dout, q, k, v); });
  // Two tokens, so that an output fits inside a state's S ([B, H, M, E] = 64 floats).
  Buffers s(2, 2);
  RecurrentState initial(B, H, D, D), final_state, dinitial;
  causal_linear_attention_forward(s.O(), s.Q(), s.K(), s.V(), {}, nullptr, &initial);
  const char* op = "causal_linear_attention_forward";
  const auto forward = [&](TensorView out, RecurrentState* to) {
    return error_of([&] { causal_linear_attention_forward(out, s.Q(), s.K(), s.V(), {}, &initial, to); });
  };
  expect_accepted(forward(s.O(), &final_state), op);
  expect_accepted(forward(s.O(), &initial), op);  // the state carried on in place
  expect_message(forward(bnhd(initial.S().data(), B, 2, H, D), &final_state), "out overlaps initial.S()", op);
  expect_message(forward(bnhd(final_state.S().data(), B, 2, H, D), &final_state), "out overlaps final_state.S()", op);
  op = "causal_linear_attention_backward";
  const auto backward = [&](TensorView dq, RecurrentState* to) {
    return error_of(
        [&] { causal_linear_attention_backward(dq, s.dK(), s.dV(), s.dO(), s.Q(), s.K(), s.V(), {}, &initial, to); });
  };
  expect_accepted(backward(s.dQ(), &dinitial), op);
  expect_message(backward(s.dQ(), &initial), "dinitial.S() overlaps initial.S()", op);
  expect_message(backward(bnhd(dinitial.S().data(), B, 2, H, D), &dinitial), "dq overlaps dinitial.S()", op);
  expect_message(backward(bnhd(initial.S().data() + 8, B, 2, H, D), &dinitial), "dq overlaps initial.S()", op);
}

TEST(Boundary, RecurrentStep) {
  Buffers x(1, 1);
  RecurrentState state(B, H, D, D);
  expect_forward_boundary("recurrent_step", x, false,
                          [&](TensorView out, std::span<float>, ConstTensorView q, ConstTensorView k,
                              ConstTensorView v) { recurrent_step(out, q, k, v, state); });
  const char* op = "recurrent_step";
  const auto step = [&](TensorView out, ConstTensorView q) {
    return error_of([&] { recurrent_step(out, q, x.K(), x.V(), state); });
  };
  expect_message(step(bnhd(state.S().data() + 5, B, 1, H, D), x.Q()), "out overlaps state.S()", op);
  expect_message(step(bnhd(state.z().data(), B, 1, H, D), x.Q()), "out overlaps state.z()", op);
  expect_message(step(x.O(), bnhd<const float>(state.S().data(), B, 1, H, D)), "state.S() overlaps q", op);
}

// E, F: [H, P, N_max] mean-pooling projections.
struct Projections {
  LinformerOptions o;
  std::vector<float> E, F, dE, dF;
  explicit Projections(int64_t N) {
    o.projected_length = 3, o.max_length = N;
    E.assign(size_t(H * 3 * N), 1.0f / float(N)), F = E, dE = E, dF = E;
  }
};

TEST(Boundary, LinformerForward) {
  Buffers x(kLong, kLong);
  Projections p(kLong);
  const char* op = "linformer_attention_forward";
  expect_forward_boundary(
      op, x, true, [&](TensorView out, std::span<float> lse, ConstTensorView q, ConstTensorView k, ConstTensorView v) {
        linformer_attention_forward(out, lse, q, k, v, p.E, p.F, p.o);
      });
  expect_message(error_of([&] {
                   linformer_attention_forward(x.O(), std::span<float>(p.E).first(x.lse.size()), x.Q(), x.K(), x.V(),
                                               p.E, p.F, p.o);
                 }),
                 "lse overlaps E", op);
  expect_message(error_of([&] {
                   linformer_attention_forward(bnhd(p.F.data(), B, 1, H, D), std::span<float>(x.lse).first(B * H),
                                               bnhd<const float>(x.q.data(), B, 1, H, D), x.K(), x.V(), p.E, p.F, p.o);
                 }),
                 "out overlaps F", op);
}

TEST(Boundary, LinformerBackward) {
  Buffers x(kLong, kLong);
  Projections p(kLong);
  linformer_attention_forward(x.O(), x.lse, x.Q(), x.K(), x.V(), p.E, p.F, p.o);
  const ConstTensorView out = x.O();
  const char* op = "linformer_attention_backward";
  const auto backward = [&](std::span<float> dE, std::span<float> dF) {
    return error_of([&] {
      linformer_attention_backward(x.dQ(), x.dK(), x.dV(), dE, dF, x.dO(), x.Q(), x.K(), x.V(), p.E, p.F, out, x.lse,
                                   p.o);
    });
  };
  expect_backward_boundary(op, x,
                           [&](TensorView dq, TensorView dk, TensorView dv, ConstTensorView dout, ConstTensorView q,
                               ConstTensorView k, ConstTensorView v) {
                             linformer_attention_backward(dq, dk, dv, p.dE, p.dF, dout, q, k, v, p.E, p.F, out, x.lse,
                                                          p.o);
                           });
  expect_accepted(backward(p.dE, p.dF), op);
  expect_message(backward(p.dE, p.dE), "dE overlaps dF", op);
  expect_message(backward(p.E, p.dF), "dE overlaps E", op);
  expect_message(backward(p.dE, std::span<float>(x.dv).first(p.dF.size())), "dv overlaps dF", op);
  expect_message(backward(p.dE, std::span<float>(x.dout).first(p.dF.size())), "dF overlaps dout", op);
}

TEST(Boundary, FeatureMapRows) {
  const int64_t rows = 6;
  for (const FeatureMapPtr& map : {elu_feature_map(), relu_feature_map(), identity_feature_map(),
                                   favor_feature_map(D, {8, 1, true}), random_fourier_feature_map(D, 8, 2)}) {
    const int64_t M = map->feature_dim(D);
    std::vector<float> x(size_t(rows * std::max(M, D)), 0.5f), phi(size_t(rows * M)), dx(size_t(rows * D));
    const std::string name = map->name();
    const auto forward = [&](float* to) {
      return error_of([&] { map->forward(to, x.data(), rows, D, FeatureRole::key); });
    };
    const auto backward = [&](float* to, const float* dphi) {
      return error_of([&] { map->backward(to, dphi, x.data(), rows, D, FeatureRole::key); });
    };
    expect_accepted(forward(phi.data()), name.c_str());
    expect_accepted(backward(dx.data(), phi.data()), name.c_str());
    expect_message(forward(x.data()), "FeatureMap::forward: phi overlaps x", name.c_str());
    expect_message(forward(x.data() + 1), "phi overlaps x", name.c_str());
    expect_message(backward(phi.data(), phi.data()), "FeatureMap::backward: dx overlaps dphi", name.c_str());
    expect_message(backward(x.data(), phi.data()), "dx overlaps x", name.c_str());
  }
}

TEST(Boundary, OracleEntryPoints) {
  Buffers x(3, 3);
  reference::Tensor q = reference::to_double(x.Q()), k = reference::to_double(x.K()), v = reference::to_double(x.V());
  const reference::Tensor dout = reference::to_double(x.dO());
  std::vector<double> lse;
  expect_accepted(error_of([&] { reference::softmax_attention_forward(q, k, v, {}, &lse); }), "reference softmax");
  expect_message(error_of([&] { reference::softmax_attention_forward(q, k, v, {}, &q.data); }), "lse overlaps q",
                 "reference softmax");
  reference::Tensor short_q = q;
  short_q.data.pop_back();
  expect_message(error_of([&] { reference::softmax_attention_backward(dout, short_q, k, v); }),
                 "q.data has 47 elements, expected 48", "reference softmax backward");
  const reference::Tensor wide({B, 3, H, D + 1});
  expect_message(error_of([&] { reference::linear_attention_backward(wide, q, k, v); }),
                 "dout.extent[3] (dim) is 5, expected 4 (v's value dim)", "reference linear backward");

  LinearAttentionOptions causal;
  causal.causal = true;
  reference::State initial, dinitial;
  reference::linear_attention_forward(q, k, v, causal, nullptr, &initial);
  expect_accepted(error_of([&] { reference::linear_attention_forward(q, k, v, causal, &initial, &initial); }),
                  "reference linear, state in place");
  expect_accepted(error_of([&] { reference::linear_attention_backward(dout, q, k, v, causal, &initial, &dinitial); }),
                  "reference linear backward");
  expect_message(error_of([&] { reference::linear_attention_backward(dout, q, k, v, causal, &initial, &initial); }),
                 "dinitial overlaps initial", "reference linear backward");
  expect_message(error_of([&] { reference::linear_attention_forward(q, k, v, {}, &initial); }),
                 "initial is given, expected causal = true", "reference linear");

  LinformerOptions o;
  o.projected_length = 2, o.max_length = 3;
  std::vector<double> E(size_t(H * 2 * 3), 0.25), F = E;
  expect_accepted(error_of([&] { reference::linformer_attention_forward(q, k, v, E, F, o, &lse); }),
                  "reference linformer");
  expect_message(error_of([&] { reference::linformer_attention_forward(q, k, v, E, F, o, &E); }), "lse overlaps E",
                 "reference linformer");
  o.max_length = 2;
  expect_message(error_of([&] { reference::linformer_attention_backward(dout, q, k, v, E, F, o); }),
                 "k.extent[1] (sequence) is 3, expected ≤ 2", "reference linformer backward");
}

}  // namespace
}  // namespace linattn
