#pragma once
// The model's attention layer (model/layers.hpp) run in fp32 against itself in fp64 on the same inputs: what
// model_layers_test and model_delta_test check for every attention kind.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "linattn/model/layers.hpp"
#include "support/finite_difference.hpp"
#include "support/tensors.hpp"

namespace linattn::testing {

// The inputs of one attention call, in fp64: qkv [B, T, 3C], dout [B, T, C], and where the kind takes them
// the gate (empty: none) and β (empty: none).
struct AttentionLayerInputs {
  std::vector<double> qkv, dout, gate, beta;
};

// out and the gradients of one forward and backward in T (lse kept between them where `saves_lse`).
template <class T>
struct AttentionLayerRun {
  std::vector<T> out, dqkv, dgate, dbeta;
};
template <class T>
AttentionLayerRun<T> run_attention_layer(const model::AttentionSpec& spec, int64_t B, int64_t T_, int64_t C,
                                         const AttentionLayerInputs& in, bool saves_lse) {
  auto as_t = [](const std::vector<double>& x) { return std::vector<T>(x.begin(), x.end()); };
  const std::vector<T> qkv = as_t(in.qkv), dout = as_t(in.dout), gate = as_t(in.gate), beta = as_t(in.beta);
  const T* g = gate.empty() ? nullptr : gate.data();
  const T* b = beta.empty() ? nullptr : beta.data();
  AttentionLayerRun<T> r{std::vector<T>(dout.size()), std::vector<T>(qkv.size()), std::vector<T>(gate.size()),
                         std::vector<T>(beta.size())};
  std::vector<T> lse(saves_lse ? size_t(B * spec.heads * T_) : 0);
  T* l = saves_lse ? lse.data() : nullptr;
  model::attention_forward(r.out.data(), l, qkv.data(), spec, B, T_, C, g, b);
  model::attention_backward(r.dqkv.data(), dout.data(), qkv.data(), r.out.data(), l, spec, B, T_, C, g,
                            g ? r.dgate.data() : nullptr, b, b ? r.dbeta.data() : nullptr);
  return r;
}

// The fp32 run within 2e-5 (out) and 5e-5 (the gradients) of the fp64 one; `where` names the case.
inline void expect_fp32_matches_fp64(const model::AttentionSpec& spec, int64_t B, int64_t T_, int64_t C,
                                     const AttentionLayerInputs& in, bool saves_lse, const std::string& where) {
  const auto want = run_attention_layer<double>(spec, B, T_, C, in, saves_lse);
  const auto got = run_attention_layer<float>(spec, B, T_, C, in, saves_lse);
  EXPECT_LT(relative_error(got.out, want.out), 2e-5) << where;
  EXPECT_LT(relative_error(got.dqkv, want.dqkv), 5e-5) << where;
  if (!in.beta.empty()) {
    EXPECT_LT(relative_error(got.dbeta, want.dbeta), 5e-5) << where;
  }
  if (!in.gate.empty()) {
    EXPECT_LT(relative_error(got.dgate, want.dgate), 5e-5) << where;
  }
}

// The fp64 layer's gradients of <out, dout> against central finite differences (step 1e-5): {"qkv", error}, then
// {"gate", error} and {"beta", error} where the inputs have them. Softmax's lse is not kept (the kinds checked
// here have none).
inline std::vector<std::pair<std::string, double>> attention_gradient_errors(const model::AttentionSpec& spec,
                                                                             int64_t B, int64_t T_, int64_t C,
                                                                             AttentionLayerInputs in) {
  const AttentionLayerRun<double> analytic = run_attention_layer<double>(spec, B, T_, C, in, false);
  std::vector<double> out(in.dout.size());
  auto loss = [&] {
    model::attention_forward(out.data(), static_cast<double*>(nullptr), in.qkv.data(), spec, B, T_, C,
                             in.gate.empty() ? nullptr : in.gate.data(), in.beta.empty() ? nullptr : in.beta.data());
    double s = 0;
    for (size_t i = 0; i < out.size(); ++i) s += out[i] * in.dout[i];
    return s;
  };
  std::vector<std::pair<std::string, double>> errors = {
      {"qkv", finite_difference_relative_error(in.qkv, analytic.dqkv, loss, 1e-5)}};
  if (!in.gate.empty())
    errors.emplace_back("gate", finite_difference_relative_error(in.gate, analytic.dgate, loss, 1e-5));
  if (!in.beta.empty())
    errors.emplace_back("beta", finite_difference_relative_error(in.beta, analytic.dbeta, loss, 1e-5));
  return errors;
}

}  // namespace linattn::testing
