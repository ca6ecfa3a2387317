#pragma once
// Linformer (Wang et al. 2020): keys and values are projected along the sequence, k̃ = E k and
// ṽ = F v with E, F ∈ R^{P × N_max} (N → P positions), and exact softmax attention then runs over the
// P projected positions: O(N·P·D) instead of O(N²·D).
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "linattn/reference.hpp"
#include "linattn/view.hpp"

namespace linattn {

struct LinformerOptions {
  // P, the projected length: rows of E and F.
  int64_t projected_length = 0;
  // N_max, the longest sequence: columns of E and F. A sequence of Nk ≤ N_max keys uses the leading
  // Nk columns; a longer one is an error, since there are no columns for its extra positions.
  int64_t max_length = 0;
  // false: one projection per head, E and F are [H, P, N_max]; true: one for all heads, [1, P, N_max].
  bool share_heads = false;
  // true: keys = values, E projects both and F is not used (pass empty F and dF spans).
  bool share_key_value = false;
  // Multiplies q·k̃; default 1/√D.
  std::optional<float> scale;
  // Must stay false: each projected key mixes every position, future ones included, so no causal
  // mask can apply. true is rejected with an error that says so.
  bool causal = false;
  // Per-batch key lengths [B]: keys j ≥ key_lengths[b] do not enter the projection. Empty: all Nk.
  // A batch with no key gets out = 0 and lse = −∞, as in softmax attention.
  std::span<const int64_t> key_lengths;
};

// out: [B, Nq, H, Ev]; lse: [B, H, Nq] contiguous, the log-sum-exp over the projected positions.
// q: [B, Nq, H, D]; k: [B, Nk, H, D]; v: [B, Nk, H, Ev]; E, F: [P_heads, P, N_max] contiguous
// row-major, P_heads = H, or 1 with share_heads. Nq and Nk may differ.
void linformer_attention_forward(TensorView out, std::span<float> lse, ConstTensorView q, ConstTensorView k,
                                 ConstTensorView v, std::span<const float> E, std::span<const float> F,
                                 const LinformerOptions& options);
// dq, dk, dv: shaped like q, k, v; dE, dF: shaped like E, F (all overwritten; dk and dv rows past a
// batch's key length and dE, dF columns past Nk are 0). dout: [B, Nq, H, Ev]; out, lse: as saved by
// the forward.
void linformer_attention_backward(TensorView dq, TensorView dk, TensorView dv, std::span<float> dE, std::span<float> dF,
                                  ConstTensorView dout, ConstTensorView q, ConstTensorView k, ConstTensorView v,
                                  std::span<const float> E, std::span<const float> F, ConstTensorView out,
                                  std::span<const float> lse, const LinformerOptions& options);

namespace reference {

struct LinformerGradients {
  Tensor dq, dk, dv;
  std::vector<double> dE, dF;  // shaped like E and F (dF empty with share_key_value)
};

// The fp64 oracle: the projections as plain sums, then reference::softmax_attention_forward/backward.
Tensor linformer_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const std::vector<double>& E,
                                   const std::vector<double>& F, const LinformerOptions& options,
                                   std::vector<double>* lse = nullptr);
LinformerGradients linformer_attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                                                const std::vector<double>& E, const std::vector<double>& F,
                                                const LinformerOptions& options);

}  // namespace reference
}  // namespace linattn
