// Every boundary check of the linear attention operators trips with linattn::Error, and the message
// names the argument, the value seen and the value expected.
#include <gtest/gtest.h>

#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "linattn/error.hpp"
#include "linattn/linear_attention.hpp"

namespace linattn {
namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

#define EXPECT_ERROR(call, text)                                   \
  do {                                                             \
    const std::string message_ = error_of([&] { call; });          \
    EXPECT_NE(message_.find(text), std::string::npos) << message_; \
  } while (0)

// Contiguous buffers for q, k: [B, N, H, D], v, out: [B, N, H, E], and gradients.
struct Problem {
  int64_t B = 2, N = 5, H = 3, D = 4, E = 6;
  std::vector<float> q, k, v, out, dout, dq, dk, dv;
  Problem() : q(B * N * H * D, 0.5f), k(q), v(B * N * H * E, 0.5f), out(v), dout(v), dq(q), dk(q), dv(v) {}
  TensorView Q() { return bnhd(q.data(), B, N, H, D); }
  TensorView K() { return bnhd(k.data(), B, N, H, D); }
  TensorView V() { return bnhd(v.data(), B, N, H, E); }
  TensorView O() { return bnhd(out.data(), B, N, H, E); }
  TensorView dO() { return bnhd(dout.data(), B, N, H, E); }
  TensorView dQ() { return bnhd(dq.data(), B, N, H, D); }
  TensorView dK() { return bnhd(dk.data(), B, N, H, D); }
  TensorView dV() { return bnhd(dv.data(), B, N, H, E); }
};

TensorView with_extent(TensorView x, int axis, int64_t value) {
  x.extent[axis] = value;
  return x;
}

TEST(LinearErrors, ValidProblemRuns) {
  Problem p;
  EXPECT_EQ(error_of([&] { linear_attention_forward(p.O(), p.Q(), p.K(), p.V()); }), "<no error>");
  EXPECT_EQ(error_of([&] { linear_attention_backward(p.dQ(), p.dK(), p.dV(), p.dO(), p.Q(), p.K(), p.V()); }),
            "<no error>");
}

TEST(LinearErrors, ViewsAreChecked) {
  Problem p;
  TensorView null_q = p.Q();
  null_q.data = nullptr;
  EXPECT_ERROR(linear_attention_forward(p.O(), null_q, p.K(), p.V()), "q.data is null");
  EXPECT_ERROR(linear_attention_forward(p.O(), p.Q(), with_extent(p.K(), 1, 0), p.V()),
               "k.extent[1] (sequence) is 0, expected ≥ 1");
  TensorView negative = p.V();
  negative.stride[3] = -1;
  EXPECT_ERROR(linear_attention_forward(p.O(), p.Q(), p.K(), negative), "v.stride[3] (dim) is -1");
  TensorView huge = p.O();
  huge.extent[0] = int64_t(1) << 40;
  huge.extent[1] = int64_t(1) << 40;
  EXPECT_ERROR(linear_attention_forward(huge, p.Q(), p.K(), p.V()), "overflows int64");
}

TEST(LinearErrors, ExtentsMustAgree) {
  Problem p;
  // The data is big enough for every shrunken view below; only the extents disagree.
  EXPECT_ERROR(linear_attention_forward(p.O(), p.Q(), with_extent(p.K(), 0, 1), p.V()),
               "k.extent[0] (batch) is 1, expected 2 (q's batch)");
  EXPECT_ERROR(linear_attention_forward(p.O(), p.Q(), with_extent(p.K(), 2, 2), p.V()),
               "k.extent[2] (heads) is 2, expected 3 (q's heads)");
  EXPECT_ERROR(linear_attention_forward(p.O(), p.Q(), with_extent(p.K(), 3, 3), p.V()),
               "k.extent[3] (dim) is 3, expected 4 (q's head dim)");
  EXPECT_ERROR(linear_attention_forward(p.O(), p.Q(), p.K(), with_extent(p.V(), 0, 1)),
               "v.extent[0] (batch) is 1, expected 2 (q's batch)");
  EXPECT_ERROR(linear_attention_forward(p.O(), p.Q(), p.K(), with_extent(p.V(), 1, 4)),
               "v.extent[1] (sequence) is 4, expected 5 (k's sequence length)");
  EXPECT_ERROR(linear_attention_forward(p.O(), p.Q(), p.K(), with_extent(p.V(), 2, 1)),
               "v.extent[2] (heads) is 1, expected 3 (q's heads)");
  EXPECT_ERROR(linear_attention_forward(with_extent(p.O(), 0, 1), p.Q(), p.K(), p.V()),
               "out.extent[0] (batch) is 1, expected 2 (q's batch)");
  EXPECT_ERROR(linear_attention_forward(with_extent(p.O(), 1, 4), p.Q(), p.K(), p.V()),
               "out.extent[1] (sequence) is 4, expected 5 (q's sequence length)");
  EXPECT_ERROR(linear_attention_forward(with_extent(p.O(), 2, 1), p.Q(), p.K(), p.V()),
               "out.extent[2] (heads) is 1, expected 3 (q's heads)");
  EXPECT_ERROR(linear_attention_forward(with_extent(p.O(), 3, 5), p.Q(), p.K(), p.V()),
               "out.extent[3] (dim) is 5, expected 6 (v's value dim)");
}

TEST(LinearErrors, OutputMayNotOverlapInputs) {
  Problem p;
  EXPECT_ERROR(linear_attention_forward(bnhd(p.q.data(), p.B, p.N, p.H, p.E), p.Q(), p.K(), p.V()), "out overlaps q");
  EXPECT_ERROR(linear_attention_forward(bnhd(p.k.data(), p.B, p.N, p.H, p.E), p.Q(), p.K(), p.V()), "out overlaps k");
  EXPECT_ERROR(linear_attention_forward(p.V(), p.Q(), p.K(), p.V()), "out overlaps v");
}

TEST(LinearErrors, OptionsAreChecked) {
  Problem p;
  LinearAttentionOptions o;
  o.feature_map = nullptr;
  EXPECT_ERROR(linear_attention_forward(p.O(), p.Q(), p.K(), p.V(), o), "options.feature_map is null");
  for (float eps : {-1.0f, std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    LinearAttentionOptions e;
    e.eps = eps;
    EXPECT_ERROR(linear_attention_forward(p.O(), p.Q(), p.K(), p.V(), e), "expected a finite value ≥ 0");
  }
  const std::vector<int64_t> too_few{5}, too_long{5, 6}, negative{-1, 2};
  LinearAttentionOptions l;
  l.key_lengths = too_few;
  EXPECT_ERROR(linear_attention_forward(p.O(), p.Q(), p.K(), p.V(), l), "key_lengths has 1 entries, expected 2");
  l.key_lengths = too_long;
  EXPECT_ERROR(linear_attention_forward(p.O(), p.Q(), p.K(), p.V(), l),
               "key_lengths[1] is 6, expected a value in [0, 5]");
  l.key_lengths = negative;
  EXPECT_ERROR(linear_attention_backward(p.dQ(), p.dK(), p.dV(), p.dO(), p.Q(), p.K(), p.V(), l),
               "key_lengths[0] is -1");
  LinearAttentionOptions c;
  c.causal = true;
  c.chunk_size = 0;
  EXPECT_ERROR(linear_attention_forward(p.O(), p.Q(), p.K(), p.V(), c), "options.chunk_size is 0, expected ≥ 1");
  EXPECT_ERROR(linear_attention_backward(p.dQ(), p.dK(), p.dV(), p.dO(), p.Q(), p.K(), p.V(), c),
               "options.chunk_size is 0");
  EXPECT_ERROR(causal_linear_attention_forward(p.O(), p.Q(), p.K(), p.V(), c), "options.chunk_size is 0");
  EXPECT_ERROR(causal_linear_attention_backward(p.dQ(), p.dK(), p.dV(), p.dO(), p.Q(), p.K(), p.V(), c),
               "options.chunk_size is 0");
}

// A map whose feature dim is whatever the test says.
class SizedMap final : public FeatureMap {
 public:
  explicit SizedMap(int64_t m) : m_(m) {}
  std::string name() const override { return "sized"; }
  int64_t feature_dim(int64_t) const override { return m_; }
  void forward(float*, const float*, int64_t, int64_t, FeatureRole) const override {}
  void backward(float*, const float*, const float*, int64_t, int64_t, FeatureRole) const override {}
  void forward_reference(double*, const double*, int64_t, int64_t, FeatureRole) const override {}
  void backward_reference(double*, const double*, const double*, int64_t, int64_t, FeatureRole) const override {}

 private:
  int64_t m_;
};

TEST(LinearErrors, FeatureDimIsChecked) {
  Problem p;
  LinearAttentionOptions o;
  o.feature_map = std::make_shared<SizedMap>(0);
  EXPECT_ERROR(linear_attention_forward(p.O(), p.Q(), p.K(), p.V(), o),
               "options.feature_map->feature_dim(4) is 0, expected ≥ 1");
  o.feature_map = std::make_shared<SizedMap>(int64_t(1) << 61);
  EXPECT_ERROR(linear_attention_forward(p.O(), p.Q(), p.K(), p.V(), o), "M × E overflows int64");
}

TEST(LinearErrors, GradientsAreChecked) {
  Problem p;
  EXPECT_ERROR(linear_attention_backward(p.dQ(), p.dK(), p.dV(), with_extent(p.dO(), 1, 4), p.Q(), p.K(), p.V()),
               "dout.extent[1] (sequence) is 4, expected 5 (q's sequence length)");
  EXPECT_ERROR(linear_attention_backward(p.dQ(), p.dK(), p.dV(), with_extent(p.dO(), 0, 1), p.Q(), p.K(), p.V()),
               "dout.extent[0] (batch) is 1");
  EXPECT_ERROR(linear_attention_backward(p.dQ(), p.dK(), p.dV(), with_extent(p.dO(), 2, 1), p.Q(), p.K(), p.V()),
               "dout.extent[2] (heads) is 1");
  EXPECT_ERROR(linear_attention_backward(p.dQ(), p.dK(), p.dV(), with_extent(p.dO(), 3, 5), p.Q(), p.K(), p.V()),
               "dout.extent[3] (dim) is 5, expected 6 (v's value dim)");
  EXPECT_ERROR(linear_attention_backward(with_extent(p.dQ(), 3, 3), p.dK(), p.dV(), p.dO(), p.Q(), p.K(), p.V()),
               "dq.extent[3] (dim) is 3, expected 4 (q's dim)");
  EXPECT_ERROR(linear_attention_backward(p.dQ(), with_extent(p.dK(), 1, 4), p.dV(), p.dO(), p.Q(), p.K(), p.V()),
               "dk.extent[1] (sequence) is 4, expected 5 (k's sequence)");
  EXPECT_ERROR(linear_attention_backward(p.dQ(), p.dK(), with_extent(p.dV(), 0, 1), p.dO(), p.Q(), p.K(), p.V()),
               "dv.extent[0] (batch) is 1, expected 2 (v's batch)");
  TensorView null_dout = p.dO();
  null_dout.data = nullptr;
  EXPECT_ERROR(linear_attention_backward(p.dQ(), p.dK(), p.dV(), null_dout, p.Q(), p.K(), p.V()), "dout.data is null");
  // Overlaps: with an input, and between two outputs.
  EXPECT_ERROR(linear_attention_backward(p.Q(), p.dK(), p.dV(), p.dO(), p.Q(), p.K(), p.V()), "dq overlaps q");
  EXPECT_ERROR(linear_attention_backward(p.dQ(), p.dK(), p.dO(), p.dO(), p.Q(), p.K(), p.V()), "dv overlaps dout");
  EXPECT_ERROR(linear_attention_backward(p.dQ(), p.dQ(), p.dV(), p.dO(), p.Q(), p.K(), p.V()), "dq overlaps dk");
  EXPECT_ERROR(causal_linear_attention_backward(p.dQ(), p.dK(), p.V(), p.dO(), p.Q(), p.K(), p.V()), "dv overlaps v");
}

TEST(LinearErrors, CausalNeedsEqualLengths) {
  Problem p;
  EXPECT_ERROR(causal_linear_attention_forward(with_extent(p.O(), 1, 4), with_extent(p.Q(), 1, 4), p.K(), p.V()),
               "k.extent[1] (sequence) is 5, expected 4 (q's sequence length");
  EXPECT_ERROR(causal_linear_attention_backward(p.dQ(), with_extent(p.dK(), 1, 4), with_extent(p.dV(), 1, 4), p.dO(),
                                                p.Q(), with_extent(p.K(), 1, 4), with_extent(p.V(), 1, 4)),
               "k.extent[1] (sequence) is 4, expected 5");
  // linear_attention_forward with causal = true takes them (bottom-right alignment).
  LinearAttentionOptions c;
  c.causal = true;
  EXPECT_EQ(
      error_of([&] { linear_attention_forward(with_extent(p.O(), 1, 4), with_extent(p.Q(), 1, 4), p.K(), p.V(), c); }),
      "<no error>");
}

TEST(LinearErrors, StatesMustMatch) {
  Problem p;
  const RecurrentState good(p.B, p.H, p.D, p.E, "elu");
  EXPECT_EQ(error_of([&] { causal_linear_attention_forward(p.O(), p.Q(), p.K(), p.V(), {}, &good); }), "<no error>");
  const RecurrentState batch(1, p.H, p.D, p.E), heads(p.B, 1, p.D, p.E), feature(p.B, p.H, 7, p.E),
      value(p.B, p.H, p.D, 2), name(p.B, p.H, p.D, p.E, "relu");
  EXPECT_ERROR(causal_linear_attention_forward(p.O(), p.Q(), p.K(), p.V(), {}, &batch),
               "initial.batch() is 1, expected 2 (q's batch)");
  EXPECT_ERROR(causal_linear_attention_forward(p.O(), p.Q(), p.K(), p.V(), {}, &heads),
               "initial.heads() is 1, expected 3 (q's heads)");
  EXPECT_ERROR(causal_linear_attention_backward(p.dQ(), p.dK(), p.dV(), p.dO(), p.Q(), p.K(), p.V(), {}, &feature),
               "initial.feature_dim() is 7, expected 4 (the feature map's feature_dim(D))");
  EXPECT_ERROR(causal_linear_attention_forward(p.O(), p.Q(), p.K(), p.V(), {}, &value),
               "initial.value_dim() is 2, expected 6 (v's value dim)");
  EXPECT_ERROR(causal_linear_attention_forward(p.O(), p.Q(), p.K(), p.V(), {}, &name),
               "initial.feature_map() is \"relu\", expected \"elu\" (options.feature_map's name)");
  const RecurrentState empty;
  EXPECT_ERROR(causal_linear_attention_forward(p.O(), p.Q(), p.K(), p.V(), {}, &empty), "initial.batch() is 0");
}

TEST(LinearErrors, RecurrentStepIsChecked) {
  Problem p;
  p.N = 1;
  RecurrentState state(p.B, p.H, p.D, p.E, "elu");
  EXPECT_EQ(error_of([&] { recurrent_step(p.O(), p.Q(), p.K(), p.V(), state); }), "<no error>");
  Problem two;
  two.N = 2;
  RecurrentState s2(two.B, two.H, two.D, two.E, "elu");
  EXPECT_ERROR(recurrent_step(two.O(), two.Q(), two.K(), two.V(), s2),
               "q.extent[1] (sequence) is 2, expected 1 (one token per step)");
  EXPECT_ERROR(recurrent_step(with_extent(two.O(), 1, 1), with_extent(two.Q(), 1, 1), two.K(), two.V(), s2),
               "k.extent[1] (sequence) is 2, expected 1 (one token per step)");
  EXPECT_ERROR(recurrent_step(p.O(), p.Q(), p.K(), with_extent(p.V(), 3, 5), state), "v's value dim");
  RecurrentState wrong(p.B, p.H, p.D, p.E, "identity");
  EXPECT_ERROR(recurrent_step(p.O(), p.Q(), p.K(), p.V(), wrong),
               "state.feature_map() is \"identity\", expected \"elu\"");
  RecurrentState small(p.B, p.H, p.D, 3);
  EXPECT_ERROR(recurrent_step(p.O(), p.Q(), p.K(), p.V(), small), "state.value_dim() is 3, expected 6");
  EXPECT_ERROR(recurrent_step(p.V(), p.Q(), p.K(), p.V(), state), "out overlaps v");
  const std::vector<int64_t> lengths{2, 0};
  LinearAttentionOptions o;
  o.key_lengths = lengths;
  EXPECT_ERROR(recurrent_step(p.O(), p.Q(), p.K(), p.V(), state, o), "key_lengths[0] is 2, expected a value in [0, 1]");
  EXPECT_EQ(state.position(), 1);  // failed calls leave the state alone
}

}  // namespace
}  // namespace linattn
