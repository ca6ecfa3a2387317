#pragma once
// Approximation quality, measured: the output error of Performer (FAVOR+) and Linformer against exact
// softmax attention as m (random features) or P (projected length) grows. For `linattn compare` /
// `linattn accuracy` and docs/performer-linformer.md.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace linattn {

enum class QualityInput {
  // q, k entries i.i.d. N(0, σ²) (σ = qk_std), v entries N(0, 1): fairly flat attention.
  random,
  // Peaked, as trained models show: each query is γ·k_j + N(0, (σ/2)²) noise for one of 4 "hub" keys
  // j, with γ = 6/(σ²√D), so its logit for that key is ≈ 6 above the rest.
  peaked,
};
const char* quality_input_name(QualityInput input);

struct QualityOptions {
  int64_t batch = 1, heads = 2, seq_len = 512, dim = 64, value_dim = 64;
  QualityInput input = QualityInput::random;
  // σ, the standard deviation of the q and k entries. FAVOR+'s variance grows like exp(|q̂ + k̂|²),
  // |q̂|² ≈ σ²√D, so this is the knob its error depends on.
  double qk_std = 1.0;
  // Each point is the mean over this many draws (inputs and features/projections reseeded).
  int64_t trials = 3;
  uint64_t seed = 0;
};

struct ErrorCurvePoint {
  int64_t size = 0;       // m or P
  double mean_error = 0;  // mean over trials of ‖O − O_softmax‖_F / ‖O_softmax‖_F
  double max_error = 0;   // the largest of those
};

// Non-causal linear attention with favor_feature_map(dim, {m, seed, orthogonal}) (eps 1e-6, normalised)
// against softmax_attention_forward, for each m in n_features.
std::vector<ErrorCurvePoint> favor_error_curve(std::span<const int64_t> n_features, const QualityOptions& options,
                                               bool orthogonal = true);

// Untrained Linformer projections (trained ones are the model's business):
enum class LinformerInit {
  // E, F entries i.i.d. N(0, 1/P): the Johnson-Lindenstrauss projection of the paper's analysis.
  gaussian,
  // E = F = mean pooling over P contiguous segments of the sequence (exact at P = N).
  mean_pooling,
};
const char* linformer_init_name(LinformerInit init);

// Linformer (one projection pair per head) against softmax attention, for each P in projected_lengths.
std::vector<ErrorCurvePoint> linformer_error_curve(std::span<const int64_t> projected_lengths,
                                                   const QualityOptions& options,
                                                   LinformerInit init = LinformerInit::mean_pooling);

// A Markdown table of one or more curves: a row per size, a column per curve.
std::string error_table(const std::vector<std::string>& names, const std::vector<std::vector<ErrorCurvePoint>>& curves,
                        const std::string& size_name);

}  // namespace linattn
