// Every layer's backward against central finite differences in fp64, and the fp32 attention layer
// (linattn's operators) against the fp64 one (the reference), over awkward shapes; for every kind,
// retnet and gla (decayed attention, GLA's gate, the head norm) included.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <vector>

#include "linattn/model/layers.hpp"
#include "linattn/model/transformer.hpp"
#include "support/finite_difference.hpp"
#include "support/model_attention.hpp"
#include "support/model_configs.hpp"
#include "support/model_gradients.hpp"
#include "support/tensors.hpp"

namespace linattn::model {
namespace {

using testing::small_config;

using testing::random_vector;

using testing::dot;

// max |analytic − numeric| / max |numeric| over every element of x, with numeric the central
// difference of loss() in x (step 1e-5).
double fd_error(std::vector<double>& x, const std::vector<double>& analytic, const std::function<double()>& loss) {
  return testing::finite_difference_relative_error(x, analytic, loss, 1e-5);
}

constexpr double kTol = 1e-6;

TEST(ModelLayers, MatmulBackwardMatchesFiniteDifferences) {
  std::mt19937_64 rng(1);
  for (const auto& shape : {std::array<int64_t, 3>{1, 1, 1}, {7, 5, 3}, {4, 16, 9}}) {
    const int64_t N = shape[0], C = shape[1], OC = shape[2];
    auto inp = random_vector(N * C, rng), w = random_vector(C * OC, rng), bias = random_vector(OC, rng),
         dout = random_vector(N * OC, rng);
    std::vector<double> out(N * OC), dinp(N * C, 7.0), dw(C * OC, 0.0), dbias(OC, 0.0);
    auto loss = [&] {
      matmul_forward(out.data(), inp.data(), w.data(), bias.data(), N, C, OC);
      return dot(out, dout);
    };
    matmul_backward(dinp.data(), dw.data(), dbias.data(), dout.data(), inp.data(), w.data(), N, C, OC);
    EXPECT_LT(fd_error(inp, dinp, loss), kTol) << N << "x" << C << "x" << OC;
    EXPECT_LT(fd_error(w, dw, loss), kTol);
    EXPECT_LT(fd_error(bias, dbias, loss), kTol);
  }
}

TEST(ModelLayers, LayernormBackwardMatchesFiniteDifferences) {
  std::mt19937_64 rng(2);
  for (const auto& shape : {std::array<int64_t, 2>{1, 2}, {5, 7}, {3, 64}}) {
    const int64_t N = shape[0], C = shape[1];
    auto inp = random_vector(N * C, rng, -2, 3), gamma = random_vector(C, rng), beta = random_vector(C, rng),
         dout = random_vector(N * C, rng);
    std::vector<double> out(N * C), mean(N), rstd(N), dinp(N * C, 0.0), dgamma(C, 0.0), dbeta(C, 0.0);
    auto loss = [&] {
      layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), gamma.data(), beta.data(), N, C);
      return dot(out, dout);
    };
    loss();
    layernorm_backward(dinp.data(), dgamma.data(), dbeta.data(), dout.data(), inp.data(), gamma.data(), mean.data(),
                       rstd.data(), N, C);
    EXPECT_LT(fd_error(inp, dinp, loss), kTol) << N << "x" << C;
    EXPECT_LT(fd_error(gamma, dgamma, loss), kTol);
    EXPECT_LT(fd_error(beta, dbeta, loss), kTol);
  }
}

TEST(ModelLayers, GeluBackwardMatchesFiniteDifferences) {
  std::mt19937_64 rng(3);
  auto inp = random_vector(97, rng, -4, 4), dout = random_vector(97, rng);
  std::vector<double> out(97), dinp(97);
  auto loss = [&] {
    gelu_forward(out.data(), inp.data(), 97);
    return dot(out, dout);
  };
  gelu_backward(dinp.data(), dout.data(), inp.data(), 97);
  EXPECT_LT(fd_error(inp, dinp, loss), kTol);
}

// fp32 GELU (vector tanh) against the fp64 formula, with tails of every length around the vector width.
TEST(ModelLayers, GeluFp32MatchesFp64) {
  std::mt19937_64 rng(9);
  for (int64_t n : {1, 7, 15, 16, 17, 63, 1000, 70000}) {
    auto inp = random_vector(n, rng, -12, 12), dout = random_vector(n, rng);
    std::vector<double> out(n), dinp(n);
    gelu_forward(out.data(), inp.data(), n);
    gelu_backward(dinp.data(), dout.data(), inp.data(), n);
    std::vector<float> inp32(inp.begin(), inp.end()), dout32(dout.begin(), dout.end()), out32(n), dinp32(n);
    gelu_forward(out32.data(), inp32.data(), n);
    gelu_backward(dinp32.data(), dout32.data(), inp32.data(), n);
    EXPECT_LT(testing::relative_error(out32, out), 1e-6) << n;
    EXPECT_LT(testing::relative_error(dinp32, dinp), 4e-6) << n;
  }
}

TEST(ModelLayers, EmbeddingBackwardMatchesFiniteDifferences) {
  std::mt19937_64 rng(4);
  const int64_t B = 2, T = 5, C = 6, V = 4;
  const std::vector<int32_t> tokens = {0, 3, 3, 1, 0, 2, 2, 2, 0, 3};  // repeats: gradients must add up
  auto wte = random_vector(V * C, rng), dout = random_vector(B * T * C, rng);
  std::vector<double> out(B * T * C), dwte(V * C, 0.0);
  auto loss = [&] {
    embedding_forward(out.data(), tokens.data(), wte.data(), B, T, C, 5);
    return dot(out, dout);
  };
  embedding_backward(dwte.data(), dout.data(), tokens.data(), B, T, C);
  EXPECT_LT(fd_error(wte, dwte, loss), kTol);
  // Positions: row (b, t) minus its token's embedding is the sinusoid of position 5 + t.
  loss();
  std::vector<double> pe(C);
  sinusoid_position(pe.data(), 5 + 3, C);
  for (int64_t c = 0; c < C; ++c) EXPECT_NEAR(out[(1 * T + 3) * C + c] - wte[tokens[1 * T + 3] * C + c], pe[c], 1e-12);
}

TEST(ModelLayers, CrossEntropyBackwardMatchesFiniteDifferences) {
  std::mt19937_64 rng(5);
  const int64_t N = 6, V = 5;
  auto logits = random_vector(N * V, rng, -3, 3);
  const std::vector<int32_t> targets = {0, 4, 2, 2, 1, 3};
  const std::vector<double> weights = {1, 0, 2, 1, 0.5, 0};
  std::vector<double> probs(N * V), dlogits(N * V);
  auto loss = [&] { return cross_entropy_forward(probs.data(), logits.data(), targets.data(), weights.data(), N, V); };
  const double value = loss();
  cross_entropy_backward(dlogits.data(), probs.data(), targets.data(), weights.data(), N, V);
  EXPECT_LT(fd_error(logits, dlogits, loss), kTol);
  // The value itself, straight from the definition.
  double want = 0, total = 0;
  for (int64_t i = 0; i < N; ++i) {
    double sum = 0;
    for (int64_t v = 0; v < V; ++v) sum += std::exp(logits[i * V + v]);
    want += weights[i] * -std::log(std::exp(logits[i * V + targets[i]]) / sum);
    total += weights[i];
  }
  EXPECT_NEAR(value, want / total, 1e-12);
  // All weights zero: no loss and no gradient.
  const std::vector<double> zero(N, 0.0);
  EXPECT_EQ(cross_entropy_forward(probs.data(), logits.data(), targets.data(), zero.data(), N, V), 0.0);
  cross_entropy_backward(dlogits.data(), probs.data(), targets.data(), zero.data(), N, V);
  for (double d : dlogits) EXPECT_EQ(d, 0.0);
}

TEST(ModelLayers, LogSigmoidGateMatchesDefinitionAndFiniteDifferences) {
  std::mt19937_64 rng(10);
  const testing::Elementwise e = testing::expect_elementwise(
      41, rng, -30, 30, [](auto& g, const auto& x) { log_sigmoid_gate_forward(g.data(), x.data(), 41); },
      [](auto& dx, const auto& dg, const auto& g) { log_sigmoid_gate_backward(dx.data(), dg.data(), g.data(), 41); },
      [](double x) { return std::log(1 / (1 + std::exp(-x))) / kGlaGateNormalizer; }, 1e-12);
  for (double g : e.y) EXPECT_LE(g, 0.0);
  EXPECT_NEAR(e.y[0], -std::log(2.0) / 16, 1e-15);
  // In place, as the block runs it; fp32 against fp64.
  std::vector<float> x32(e.x.begin(), e.x.end()), dg32(e.dy.begin(), e.dy.end());
  log_sigmoid_gate_forward(x32.data(), x32.data(), 41);
  EXPECT_LT(testing::relative_error(x32, e.y), 1e-6);
  log_sigmoid_gate_backward(dg32.data(), dg32.data(), x32.data(), 41);
  EXPECT_LT(testing::relative_error(dg32, e.dx), 1e-5);
}

TEST(ModelLayers, HeadNormBackwardMatchesFiniteDifferences) {
  std::mt19937_64 rng(11);
  for (const auto& shape : {std::array<int64_t, 2>{1, 5}, {6, 3}, {4, 16}}) {
    const int64_t rows = shape[0], D = shape[1];
    auto inp = random_vector(rows * D, rng, -2, 3), dout = random_vector(rows * D, rng);
    std::vector<double> out(rows * D), rstd(rows), dinp(rows * D, 7.0);
    auto loss = [&] {
      head_norm_forward(out.data(), rstd.data(), inp.data(), rows, D);
      return dot(out, dout);
    };
    loss();
    for (int64_t r = 0; r < rows; ++r) {  // each row: mean 0, variance 1 (up to eps)
      double m = 0, v = 0;
      for (int64_t d = 0; d < D; ++d) m += out[r * D + d] / double(D);
      for (int64_t d = 0; d < D; ++d) v += out[r * D + d] * out[r * D + d] / double(D);
      EXPECT_NEAR(m, 0, 1e-12);
      EXPECT_NEAR(v, 1, 1e-3);
    }
    head_norm_backward(dinp.data(), dout.data(), out.data(), rstd.data(), rows, D);
    EXPECT_LT(fd_error(inp, dinp, loss), kTol) << rows << "x" << D;
  }
}

class ModelAttention : public ::testing::TestWithParam<AttentionKind> {};

TEST_P(ModelAttention, BackwardMatchesFiniteDifferences) {
  std::mt19937_64 rng(6);
  const ModelConfig config = small_config(GetParam());
  const AttentionSpec spec{config.attention, config.heads, feature_map_for(config, 0), config.chunk_size};
  const bool gla = config.attention == AttentionKind::gla;
  for (const auto& shape : {std::array<int64_t, 2>{1, 1}, {2, 7}, {1, 9}}) {
    const int64_t B = shape[0], T = shape[1];
    const int64_t C = config.d_model;
    auto qkv = random_vector(B * T * 3 * C, rng), dout = random_vector(B * T * C, rng);
    // gla: per-key log decays from strong (e^−2 per token) to none
    std::vector<double> gate = gla ? random_vector(B * T * C, rng, -2, 0) : std::vector<double>(), dgate(gate.size());
    std::vector<double> out(B * T * C), lse(B * config.heads * T), dqkv(B * T * 3 * C);
    auto loss = [&] {
      attention_forward(out.data(), lse.data(), qkv.data(), spec, B, T, C, gla ? gate.data() : nullptr);
      return dot(out, dout);
    };
    loss();
    attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), spec, B, T, C,
                       gla ? gate.data() : nullptr, gla ? dgate.data() : nullptr);
    EXPECT_LT(fd_error(qkv, dqkv, loss), kTol) << attention_name(GetParam()) << " B=" << B << " T=" << T;
    if (gla) {
      EXPECT_LT(fd_error(gate, dgate, loss), kTol) << "gate B=" << B << " T=" << T;
    }
  }
}

// fp32 attention (linattn's operators, strided views into qkv) against fp64 (the reference).
TEST_P(ModelAttention, Fp32MatchesFp64Reference) {
  std::mt19937_64 rng(7);
  struct Shape {
    int64_t B, T, H, hd;
  };
  for (const Shape s : {Shape{1, 1, 1, 16}, Shape{3, 65, 3, 16}, Shape{1, 130, 2, 59}, Shape{2, 97, 1, 64}}) {
    ModelConfig config = small_config(GetParam(), s.H * s.hd, s.H);
    config.chunk_size = 64;
    const AttentionSpec spec{config.attention, s.H, feature_map_for(config, 0), config.chunk_size};
    const int64_t C = config.d_model, n = s.B * s.T;
    const bool gla = config.attention == AttentionKind::gla;
    auto qkv = random_vector(n * 3 * C, rng), dout = random_vector(n * C, rng);
    const std::vector<double> gate = gla ? random_vector(n * C, rng, -2, 0) : std::vector<double>();
    const std::string where = std::string(attention_name(GetParam())) + " B=" + std::to_string(s.B) +
                              " T=" + std::to_string(s.T) + " H=" + std::to_string(s.H) + " hd=" + std::to_string(s.hd);
    testing::expect_fp32_matches_fp64(spec, s.B, s.T, C, {qkv, dout, gate, {}}, true, where);
  }
}

// The whole model in fp64: every parameter's gradient against finite differences.
TEST_P(ModelAttention, ModelBackwardMatchesFiniteDifferences) {
  std::mt19937_64 rng(8);
  Transformer<double> model(small_config(GetParam()));
  for (const auto& [name, error] : testing::model_gradient_errors(model, rng))
    EXPECT_LT(error, kTol) << attention_name(GetParam()) << " " << name;
}

INSTANTIATE_TEST_SUITE_P(Kinds, ModelAttention,
                         ::testing::Values(AttentionKind::softmax, AttentionKind::linear, AttentionKind::favor,
                                           AttentionKind::retnet, AttentionKind::gla),
                         [](const ::testing::TestParamInfo<AttentionKind>& p) {
                           return std::string(attention_name(p.param));
                         });

}  // namespace
}  // namespace linattn::model
