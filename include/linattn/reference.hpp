#pragma once
// The fp64 oracle: every operator and its backward, written straight from the formulas, the
// O(N²) way, with no tiling, chunking or SIMD. Tests compare the fast operators against it, and the
// command runs it with --reference. Never used for speed.
#include <array>
#include <cstdint>
#include <vector>

#include "linattn/decay.hpp"
#include "linattn/delta.hpp"
#include "linattn/linear_attention.hpp"
#include "linattn/softmax_attention.hpp"
#include "linattn/view.hpp"

namespace linattn::reference {

// A dense fp64 tensor in [B, N, H, D] order.
struct Tensor {
  std::array<int64_t, 4> extent{};
  std::vector<double> data;

  Tensor() = default;
  explicit Tensor(std::array<int64_t, 4> extent_);
  double& operator()(int64_t b, int64_t n, int64_t h, int64_t d) {
    return data[((b * extent[1] + n) * extent[2] + h) * extent[3] + d];
  }
  double operator()(int64_t b, int64_t n, int64_t h, int64_t d) const {
    return data[((b * extent[1] + n) * extent[2] + h) * extent[3] + d];
  }
  View4<double> view() { return bnhd(data.data(), extent[0], extent[1], extent[2], extent[3]); }
};

// Copies a strided fp32 view into an fp64 tensor.
Tensor to_double(ConstTensorView x);

struct Gradients {
  Tensor dq, dk, dv;
};

// The same options as the fast operators; key_lengths, causal alignment and scale mean the same.
// lse (optional): [B, H, Nq] log-sum-exp of each row (−∞ where a row sees no key).
Tensor softmax_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                                 const SoftmaxAttentionOptions& options = {}, std::vector<double>* lse = nullptr);
Gradients softmax_attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                                     const SoftmaxAttentionOptions& options = {});

// fp64 recurrent state: S [B, H, M, E], z [B, H, M].
struct State {
  int64_t batch = 0, heads = 0, feature_dim = 0, value_dim = 0;
  std::vector<double> S, z;
};

// Non-causal or causal (options.causal) linear attention, from the defining sums.
// initial (causal only): the state before the first key. final_state: the state after the last
// visible key of each batch.
Tensor linear_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                                const LinearAttentionOptions& options = {}, const State* initial = nullptr,
                                State* final_state = nullptr);
// dinitial (causal only, optional): gradient with respect to the initial state's S and z, taken at
// `initial` (or at the zero state when none is given).
Gradients linear_attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                                    const LinearAttentionOptions& options = {}, const State* initial = nullptr,
                                    State* dinitial = nullptr);

// Decayed linear attention (decay.hpp), token by token from the recurrence
//   S_t = diag(exp(g_t)) S_{t−1} + k_t v_tᵀ,  o_t = scale · S_tᵀ q_t.
// g: [B, T, H, 1] (token) or [B, T, H, K] (key), null for the decays without a gate tensor. States are
// [N, H, K, V] row-major; initial_state null: zero.
struct DecayedOutput {
  Tensor out;                       // [B, T, H, V]
  std::vector<double> final_state;  // [N, H, K, V]
};
DecayedOutput decayed_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor* g,
                                        const DecayedAttentionOptions& options = {},
                                        const std::vector<double>* initial_state = nullptr);
// The reverse sweep of the same recurrence (dS ← dS + scale·q doᵀ, then dS ← diag(exp g) dS), with
// dfinal_state (null: zero) the gradient of the final state. dg is shaped like g (empty without one).
struct DecayedGradients {
  Tensor dq, dk, dv, dg;
  std::vector<double> dinitial_state;  // [N, H, K, V]
};
DecayedGradients decayed_attention_backward(const Tensor& dout, const std::vector<double>* dfinal_state,
                                            const Tensor& q, const Tensor& k, const Tensor& v, const Tensor* g,
                                            const DecayedAttentionOptions& options = {},
                                            const std::vector<double>* initial_state = nullptr);

// The delta rule (delta.hpp), token by token from the recurrence
//   P_t = D_t S_{t−1},  S_t = P_t + β_t k_t (v_t − P_tᵀ k_t)ᵀ,  o_t = scale · S_tᵀ q_t,
// after l2norm of q and k where options.qk_l2norm. beta: [B, T, H, 1]; g: [B, T, H, 1] (token) or
// [B, T, H, K] (key), null for DeltaNet. States [N, H, K, V] row-major; initial_state null: zero.
DecayedOutput delta_rule_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& beta, const Tensor* g,
                                 const DeltaRuleOptions& options = {},
                                 const std::vector<double>* initial_state = nullptr);
// The reverse sweep of the same recurrence, with dfinal_state (null: zero) the gradient of the final
// state. dg is shaped like g (empty without one).
struct DeltaGradients {
  Tensor dq, dk, dv, dbeta, dg;
  std::vector<double> dinitial_state;  // [N, H, K, V]
};
DeltaGradients delta_rule_backward(const Tensor& dout, const std::vector<double>* dfinal_state, const Tensor& q,
                                   const Tensor& k, const Tensor& v, const Tensor& beta, const Tensor* g,
                                   const DeltaRuleOptions& options = {},
                                   const std::vector<double>* initial_state = nullptr);

}  // namespace linattn::reference
