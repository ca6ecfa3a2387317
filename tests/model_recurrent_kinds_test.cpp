// Mamba-2 (mamba2) and RWKV-7 (rwkv7) as the transformer's attention kinds: their own layers (dt and the D skip,
// the removal a = −κ̂, b = κ̂ ⊙ ā) from their definitions and against central finite differences in fp64, D's
// initial value, and the encoder's refusal. (The attention and the whole model against finite differences, the
// fp32 layer against the fp64 oracle, a short MQAR run and model files are model_delta_test.cpp's, generation
// against the forward model_generate_test.cpp's: both kinds are among their kinds.)
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "linattn/error.hpp"
#include "linattn/model/layers.hpp"
#include "linattn/model/transformer.hpp"
#include "support/finite_difference.hpp"
#include "support/model_configs.hpp"
#include "support/tensors.hpp"

namespace linattn::model {
namespace {

using testing::random_vector;
using testing::small_config;

// <a, b>: the scalar loss whose gradient a layer's backward gives for the weights b.
double inner(const std::vector<double>& a, const std::vector<double>& b) {
  return std::inner_product(a.begin(), a.end(), b.begin(), 0.0);
}

// Central differences with step 1e-5 against the analytic gradient (support/finite_difference.hpp).
double fd_error(std::vector<double>& x, const std::vector<double>& analytic, const std::function<double()>& loss) {
  return testing::finite_difference_relative_error(x, analytic, loss, 1e-5);
}

constexpr double kTol = 1e-6;

// dt = g / −exp(a_log) recovers softplus(x) from the gate; its gradient joins the gate's pre-activation with
// sigmoid(x).
TEST(ModelMamba2Layers, DtIsSoftplusOfTheGateInputAndItsGradientMatchesFiniteDifferences) {
  std::mt19937_64 rng(1);
  const int64_t rows = 5, H = 3, n = rows * H;
  auto x = random_vector(n, rng, -12, 12), a_log = random_vector(H, rng, -1, 2.5), ddt = random_vector(n, rng);
  std::vector<double> g(n), dt(n), dx(n, 0.5);  // += : starts at 0.5
  auto loss = [&] {
    delta_gate_forward(g.data(), x.data(), a_log.data(), rows, H, 1);
    mamba2_dt_forward(dt.data(), g.data(), a_log.data(), rows, H);
    return inner(dt, ddt);
  };
  loss();
  for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(dt[i], std::log1p(std::exp(x[i])), 1e-12 * std::max(1.0, dt[i]));
  mamba2_dt_backward(dx.data(), ddt.data(), dt.data(), n);
  for (double& d : dx) d -= 0.5;
  EXPECT_LT(fd_error(x, dx, loss), kTol);
}

// attn += D[h] · x (the v part of qkv): the value and the gradients of x and D.
TEST(ModelMamba2Layers, SkipAddsDTimesXAndItsGradientMatchesFiniteDifferences) {
  std::mt19937_64 rng(2);
  const int64_t rows = 4, H = 3, C = 9;
  auto qkv = random_vector(rows * 3 * C, rng), d = random_vector(H, rng), base = random_vector(rows * C, rng),
       dattn = random_vector(rows * C, rng);
  std::vector<double> attn, dqkv(qkv.size(), 0.0), dd(H, 0.0);
  auto loss = [&] {
    attn = base;
    mamba2_skip_forward(attn.data(), qkv.data(), d.data(), rows, C, H);
    return inner(attn, dattn);
  };
  loss();
  EXPECT_DOUBLE_EQ(attn[C + 4], base[C + 4] + d[1] * qkv[3 * C + 2 * C + 4]);
  mamba2_skip_backward(dqkv.data(), dd.data(), dattn.data(), qkv.data(), d.data(), rows, C, H);
  EXPECT_LT(fd_error(qkv, dqkv, loss), kTol);
  EXPECT_LT(fd_error(d, dd, loss), kTol);
}

// a = −κ̂, b = κ̂ ⊙ ā with κ̂ the unit key per head: from the definition, and the gradients of k and ā.
TEST(ModelRwkv7Layers, RemovalIsTheUnitKeyAndItsGradientMatchesFiniteDifferences) {
  std::mt19937_64 rng(3);
  const int64_t rows = 3, H = 2, C = 10, hd = C / H;
  auto qkv = random_vector(rows * 3 * C, rng), abar = random_vector(rows * C, rng, 0.05, 0.95),
       wa = random_vector(rows * C, rng), wb = random_vector(rows * C, rng);
  std::vector<double> a(rows * C), b(rows * C), dqkv(qkv.size(), 0.0), dabar(rows * C);
  auto loss = [&] {
    rwkv7_removal(a.data(), b.data(), qkv.data(), abar.data(), rows, C, H);
    return inner(a, wa) + inner(b, wb);
  };
  loss();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t h = 0; h < H; ++h) {
      double norm2 = 0;
      for (int64_t d = 0; d < hd; ++d) norm2 += a[r * C + h * hd + d] * a[r * C + h * hd + d];
      EXPECT_NEAR(norm2, 1.0, 1e-5);  // unit up to the ε in the norm
      for (int64_t d = 0; d < hd; ++d) {
        const int64_t i = r * C + h * hd + d;
        EXPECT_NEAR(b[i], -a[i] * abar[i], 1e-15);
        EXPECT_LE(a[i] * qkv[r * 3 * C + C + h * hd + d], 0.0);  // a points against k
      }
    }
  rwkv7_removal_backward(dqkv.data(), dabar.data(), wa.data(), wb.data(), qkv.data(), abar.data(), rows, C, H);
  EXPECT_LT(fd_error(qkv, dqkv, loss), kTol);
  EXPECT_LT(fd_error(abar, dabar, loss), kTol);
}

class ModelRecurrentKind : public ::testing::TestWithParam<AttentionKind> {};

// D starts at 1 (Mamba-2's init), and mamba2 has no β projection (its dt comes from the gate's).
TEST(ModelMamba2, SkipStartsAtOne) {
  const Transformer<float> model(small_config(AttentionKind::mamba2));
  const auto p = param_pointers<const float>(model.params().data(), model.config());
  for (int64_t i = 0; i < model.config().layers * model.config().heads; ++i) EXPECT_EQ(p.dskip[i], 1.0f);
  EXPECT_EQ(p.betaw, nullptr);
}

// The encoder classifier is refused by name: these kinds have no both-directions form here.
TEST_P(ModelRecurrentKind, EncoderIsRefusedByName) {
  ModelConfig c = small_config(GetParam());
  c.classes = 3;
  try {
    check_config(c);
    FAIL() << "expected linattn::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(attention_name(GetParam())), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("classes"), std::string::npos) << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(Kinds, ModelRecurrentKind, ::testing::Values(AttentionKind::mamba2, AttentionKind::rwkv7),
                         [](const ::testing::TestParamInfo<AttentionKind>& p) {
                           return std::string(attention_name(p.param));
                         });

}  // namespace
}  // namespace linattn::model
