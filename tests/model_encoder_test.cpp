// The encoder classifier (ModelConfig::classes > 0): non-causal attention, the mean pool over the real
// tokens and the class head. Every parameter's gradient against central finite differences in fp64 for
// every kind; the recurrent kinds' two directions against the definition (each direction's causal
// reference, one of them on the reversed sequence) and fp32 against fp64; the pool against its formula;
// the padding invisible to the logits and gradients, whatever its length and tokens.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "linattn/model/layers.hpp"
#include "linattn/model/transformer.hpp"
#include "support/finite_difference.hpp"
#include "support/model_configs.hpp"
#include "support/model_gradients.hpp"
#include "support/tensors.hpp"

namespace linattn::model {
namespace {

using testing::random_vector;

// The gradient checks' small model with a classifier head of 3 classes.
ModelConfig encoder_config(AttentionKind kind, int64_t C = 6, int64_t H = 2) {
  ModelConfig c = testing::small_config(kind, C, H);
  c.classes = 3;
  return c;
}

// [B, T, width] rows with T reversed: the definition's flip, written apart from bidirectional.cpp's.
std::vector<double> reversed(const std::vector<double>& x, int64_t B, int64_t T, int64_t width) {
  std::vector<double> y(x.size());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t i = 0; i < width; ++i)
        y[size_t((b * T + T - 1 - t) * width + i)] = x[size_t((b * T + t) * width + i)];
  return y;
}

class Encoder : public ::testing::TestWithParam<AttentionKind> {};

// The classifier's loss, in fp64: every parameter tensor's gradient against finite differences, with a
// padding mask that leaves out the ends of one sequence.
TEST_P(Encoder, ClassifierBackwardMatchesFiniteDifferences) {
  std::mt19937_64 rng(11);
  Transformer<double> model(encoder_config(GetParam()));
  const int64_t B = 2, T = 5;
  std::vector<int32_t> tokens(B * T), labels = {2, 0};
  for (auto& t : tokens) t = int32_t(rng() % 7);
  const std::vector<double> mask = {1, 1, 1, 1, 1, 1, 1, 1, 0, 0};
  for (double& p : model.params()) p += 0.3 * std::uniform_real_distribution<double>(-1, 1)(rng);
  auto loss = [&] { return model.forward(tokens.data(), labels.data(), mask.data(), B, T); };
  // 1e-5, not the decoder test's 1e-6: one pooled loss over two sequences makes some tensors' gradients
  // small (retnet's qkvw's reach 1e-6), against which the central difference's rounding (≈ 1e-16 / 1e-5)
  // is 1e-5 relative; a wrong term is of order 1.
  for (const auto& [name, error] : testing::parameter_gradient_errors(model, loss))
    EXPECT_LT(error, 1e-5) << attention_name(GetParam()) << " " << name;
  if (param_tensors(model.config()).back().name == "headb") {
    EXPECT_EQ(param_tensors(model.config()).back().size, 3);  // the head maps to the classes
  }
}

// Non-causal attention: the last token reaches the first one's output (the decoder's never does); fp32
// (linattn's operators) against fp64 (the reference), forward and backward.
TEST_P(Encoder, FirstTokenSeesTheLast) {
  std::mt19937_64 rng(12);
  const ModelConfig config = encoder_config(GetParam());
  const AttentionSpec spec{config.attention, config.heads, feature_map_for(config, 0), config.chunk_size, false};
  const int64_t B = 1, T = 6, C = config.d_model, H = config.heads, G = gate_width(config.attention, C, H);
  auto qkv = random_vector(T * 3 * C, rng), gate = random_vector(T * G, rng, -2, 0),
       beta = random_vector(T * H, rng, 0.05, 0.95);
  const bool delta = is_delta(config.attention);
  std::vector<double> out(T * C), lse(H * T), changed_out(T * C);
  attention_forward(out.data(), lse.data(), qkv.data(), spec, B, T, C, G ? gate.data() : nullptr,
                    delta ? beta.data() : nullptr);
  for (int64_t i = 0; i < 3 * C; ++i) qkv[size_t((T - 1) * 3 * C + i)] += 0.5;
  attention_forward(changed_out.data(), lse.data(), qkv.data(), spec, B, T, C, G ? gate.data() : nullptr,
                    delta ? beta.data() : nullptr);
  double change = 0;
  for (int64_t i = 0; i < C; ++i) change = std::max(change, std::abs(changed_out[size_t(i)] - out[size_t(i)]));
  EXPECT_GT(change, 1e-6) << attention_name(GetParam());
  // fp32, linattn's non-causal operators (or the two causal passes), against the fp64 reference.
  std::vector<float> qkv32(qkv.begin(), qkv.end()), gate32(gate.begin(), gate.end()), beta32(beta.begin(), beta.end()),
      out32(size_t(T * C)), lse32(size_t(H * T));
  attention_forward<float>(out32.data(), lse32.data(), qkv32.data(), spec, B, T, C, G ? gate32.data() : nullptr,
                           delta ? beta32.data() : nullptr);
  EXPECT_LT(testing::relative_error(out32, changed_out), 5e-5) << attention_name(GetParam());
  // And the backward: fp32 against fp64 (whose gradients the finite-difference tests check).
  const auto dout = random_vector(T * C, rng);
  std::vector<double> dqkv(qkv.size()), dgate(gate.size()), dbeta(beta.size());
  attention_backward<double>(dqkv.data(), dout.data(), qkv.data(), changed_out.data(), lse.data(), spec, B, T, C,
                             G ? gate.data() : nullptr, G ? dgate.data() : nullptr, delta ? beta.data() : nullptr,
                             delta ? dbeta.data() : nullptr);
  std::vector<float> dout32(dout.begin(), dout.end()), dqkv32(qkv.size()), dgate32(gate.size()), dbeta32(beta.size());
  attention_backward<float>(dqkv32.data(), dout32.data(), qkv32.data(), out32.data(), lse32.data(), spec, B, T, C,
                            G ? gate32.data() : nullptr, G ? dgate32.data() : nullptr, delta ? beta32.data() : nullptr,
                            delta ? dbeta32.data() : nullptr);
  EXPECT_LT(testing::relative_error(dqkv32, dqkv), 5e-5) << attention_name(GetParam()) << " dqkv";
  if (G) {
    EXPECT_LT(testing::relative_error(dgate32, dgate), 5e-5) << attention_name(GetParam()) << " dgate";
  }
}

// Every kind the encoder accepts, with linformer's P and an N_max that covers the padded lengths below.
ModelConfig padding_config(AttentionKind kind) {
  ModelConfig c = encoder_config(kind);
  if (kind == AttentionKind::linformer) c.linformer_length = 3, c.max_seq_len = 12;
  return c;
}

// The logits [B, classes] and every parameter's gradient of `sequences` (their real tokens) padded to T_ with
// tokens drawn from pad_seed, the real-token mask as weights.
template <class T>
std::vector<double> logits_and_gradients(Transformer<T>& model, const std::vector<std::vector<int32_t>>& sequences,
                                         const std::vector<int32_t>& labels, int64_t T_, uint64_t pad_seed) {
  std::mt19937_64 rng(pad_seed);
  const int64_t B = int64_t(sequences.size());
  std::vector<int32_t> tokens;
  std::vector<T> weights;
  for (const std::vector<int32_t>& sequence : sequences)
    for (int64_t t = 0; t < T_; ++t) {
      const bool real = t < int64_t(sequence.size());
      tokens.push_back(real ? sequence[size_t(t)] : int32_t(rng() % 7));
      weights.push_back(real ? T(1) : T(0));
    }
  model.zero_grad();
  model.forward(tokens.data(), labels.data(), weights.data(), B, T_);
  model.backward();
  std::vector<double> result(model.logits(), model.logits() + B * model.config().classes);
  result.insert(result.end(), model.grads().begin(), model.grads().end());
  return result;
}

// Padding is invisible: the same sequences (lengths 5, 1, 3 and an empty one) padded to 5 and to 12 with
// different padding tokens give the same logits and parameter gradients, in fp64 (the reference operators)
// and fp32 (linattn's). Measured: fp64 within 5e-17 of the largest, fp32 within 4.5e-6 (kda's chunked
// delta rule; the others 1e-8 to 6e-7); attending to the padding, as the encoder once did, changed them by
// 0.025 (softmax) to 0.9 (deltanet), and reversing the padding with the real tokens by 0.2 to 0.9.
class EncoderPadding : public ::testing::TestWithParam<AttentionKind> {};

TEST_P(EncoderPadding, ChangesNeitherLogitsNorGradients) {
  std::mt19937_64 rng(15);
  const std::vector<std::vector<int32_t>> sequences = {{1, 4, 2, 6, 3}, {5}, {2, 2, 0}, {}};
  const std::vector<int32_t> labels = {0, 2, 1, 1};
  Transformer<double> model(padding_config(GetParam()));
  for (double& p : model.params()) p += 0.3 * std::uniform_real_distribution<double>(-1, 1)(rng);
  Transformer<float> model32(model.config());
  std::copy(model.params().begin(), model.params().end(), model32.params().begin());
  const std::string name = attention_name(GetParam());
  const std::vector<double> want = logits_and_gradients(model, sequences, labels, 5, 1);
  for (double x : want) ASSERT_TRUE(std::isfinite(x)) << name;
  const std::vector<double> got = logits_and_gradients(model, sequences, labels, 12, 2);
  double worst = 0, scale = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    worst = std::max(worst, std::abs(got[i] - want[i]));
    scale = std::max(scale, std::abs(want[i]));
  }
  EXPECT_LT(worst, 1e-12 * scale) << name << " fp64";
  const std::vector<double> want32 = logits_and_gradients(model32, sequences, labels, 5, 1),
                            got32 = logits_and_gradients(model32, sequences, labels, 12, 2);
  EXPECT_LT(testing::relative_error(std::vector<float>(got32.begin(), got32.end()), want32), 5e-5) << name << " fp32";
  EXPECT_LT(testing::relative_error(std::vector<float>(want32.begin(), want32.end()), want), 5e-5)
      << name << " fp32 against fp64";
}

class EncoderRecurrent : public ::testing::TestWithParam<AttentionKind> {};

// The recurrent kinds' encoder attention is A(x) + flip(A(flip(x))), A the causal fp64 reference: checked
// against exactly that, on awkward lengths; the fp32 operators against it too; and its backward.
TEST_P(EncoderRecurrent, BothDirectionsMatchTheDefinition) {
  std::mt19937_64 rng(13);
  for (const auto& shape : {std::array<int64_t, 2>{1, 1}, {2, 7}, {1, 65}, {3, 97}}) {
    const int64_t B = shape[0], T = shape[1];
    const ModelConfig config = encoder_config(GetParam(), 2 * 17, 2);
    const int64_t C = config.d_model, H = config.heads, G = gate_width(config.attention, C, H), n = B * T;
    const AttentionSpec causal{config.attention, H, nullptr, 16, true}, both{config.attention, H, nullptr, 16, false};
    const bool delta = is_delta(config.attention);
    auto qkv = random_vector(n * 3 * C, rng), gate = random_vector(n * G, rng, -2, 0),
         beta = random_vector(n * H, rng, 0.05, 0.95);
    auto call = [&](AttentionSpec spec, const std::vector<double>& q, const std::vector<double>& g,
                    const std::vector<double>& b) {
      std::vector<double> out(size_t(n * C));
      attention_forward<double>(out.data(), nullptr, q.data(), spec, B, T, C, G ? g.data() : nullptr,
                                delta ? b.data() : nullptr);
      return out;
    };
    const std::vector<double> forwards = call(causal, qkv, gate, beta),
                              backwards = reversed(call(causal, reversed(qkv, B, T, 3 * C), reversed(gate, B, T, G),
                                                        reversed(beta, B, T, H)),
                                                   B, T, C);
    std::vector<double> want(forwards.size());
    for (size_t i = 0; i < want.size(); ++i) want[i] = forwards[i] + backwards[i];
    const std::vector<double> got = call(both, qkv, gate, beta);
    const std::string where =
        std::string(attention_name(GetParam())) + " B=" + std::to_string(B) + " T=" + std::to_string(T);
    EXPECT_LT(testing::relative_error(std::vector<float>(got.begin(), got.end()), want), 1e-6) << where;
    // fp32: linattn's chunked operators, forwards and on the reversed copies.
    std::vector<float> qkv32(qkv.begin(), qkv.end()), gate32(gate.begin(), gate.end()),
        beta32(beta.begin(), beta.end()), out32(size_t(n * C));
    attention_forward<float>(out32.data(), nullptr, qkv32.data(), both, B, T, C, G ? gate32.data() : nullptr,
                             delta ? beta32.data() : nullptr);
    EXPECT_LT(testing::relative_error(out32, want), 5e-5) << where;
  }
}

TEST_P(EncoderRecurrent, BackwardMatchesFiniteDifferences) {
  std::mt19937_64 rng(14);
  const ModelConfig config = encoder_config(GetParam());
  const int64_t B = 2, T = 7, C = config.d_model, H = config.heads, G = gate_width(config.attention, C, H), n = B * T;
  const AttentionSpec spec{config.attention, H, nullptr, config.chunk_size, false};
  const bool delta = is_delta(config.attention);
  auto qkv = random_vector(n * 3 * C, rng), gate = random_vector(n * G, rng, -2, 0),
       beta = random_vector(n * H, rng, 0.05, 0.95), dout = random_vector(n * C, rng);
  std::vector<double> out(size_t(n * C)), dqkv(qkv.size()), dgate(gate.size()), dbeta(beta.size());
  auto loss = [&] {
    attention_forward<double>(out.data(), nullptr, qkv.data(), spec, B, T, C, G ? gate.data() : nullptr,
                              delta ? beta.data() : nullptr);
    double s = 0;
    for (size_t i = 0; i < out.size(); ++i) s += out[i] * dout[i];
    return s;
  };
  loss();
  attention_backward<double>(dqkv.data(), dout.data(), qkv.data(), out.data(), nullptr, spec, B, T, C,
                             G ? gate.data() : nullptr, G ? dgate.data() : nullptr, delta ? beta.data() : nullptr,
                             delta ? dbeta.data() : nullptr);
  EXPECT_LT(testing::finite_difference_relative_error(qkv, dqkv, loss, 1e-5), 1e-6) << "qkv";
  if (G) {
    EXPECT_LT(testing::finite_difference_relative_error(gate, dgate, loss, 1e-5), 1e-6) << "gate";
  }
  if (delta) {
    EXPECT_LT(testing::finite_difference_relative_error(beta, dbeta, loss, 1e-5), 1e-6) << "beta";
  }
}

TEST(EncoderPool, MeanOverTheWeightedTokens) {
  // B = 2, T = 3, C = 2; the second sequence's last token is padding, the weights need not be 0/1.
  const std::vector<double> x = {1, 2, 3, 4, 5, 6, 10, 20, 30, 40, 99, 99}, w = {1, 1, 2, 1, 1, 0};
  std::vector<double> out(4);
  mean_pool_forward(out.data(), x.data(), w.data(), 2, 3, 2);
  EXPECT_DOUBLE_EQ(out[0], (1 + 3 + 2 * 5) / 4.0);
  EXPECT_DOUBLE_EQ(out[1], (2 + 4 + 2 * 6) / 4.0);
  EXPECT_DOUBLE_EQ(out[2], (10 + 30) / 2.0);
  EXPECT_DOUBLE_EQ(out[3], (20 + 40) / 2.0);
  const std::vector<double> none = {0, 0, 0, 1, 1, 1};  // a sequence without weight pools to 0
  mean_pool_forward(out.data(), x.data(), none.data(), 2, 3, 2);
  EXPECT_EQ(out[0], 0.0);
  EXPECT_EQ(out[1], 0.0);
}

const auto kName = [](const ::testing::TestParamInfo<AttentionKind>& p) {
  return std::string(attention_name(p.param));
};

INSTANTIATE_TEST_SUITE_P(Kinds, Encoder,
                         ::testing::Values(AttentionKind::softmax, AttentionKind::linear, AttentionKind::favor,
                                           AttentionKind::retnet, AttentionKind::gla, AttentionKind::deltanet,
                                           AttentionKind::gated_deltanet, AttentionKind::kda),
                         kName);
INSTANTIATE_TEST_SUITE_P(Kinds, EncoderPadding,
                         ::testing::Values(AttentionKind::softmax, AttentionKind::linear, AttentionKind::favor,
                                           AttentionKind::linformer, AttentionKind::retnet, AttentionKind::gla,
                                           AttentionKind::deltanet, AttentionKind::gated_deltanet, AttentionKind::kda),
                         kName);
INSTANTIATE_TEST_SUITE_P(Kinds, EncoderRecurrent,
                         ::testing::Values(AttentionKind::retnet, AttentionKind::gla, AttentionKind::deltanet,
                                           AttentionKind::gated_deltanet, AttentionKind::kda),
                         kName);

}  // namespace
}  // namespace linattn::model
