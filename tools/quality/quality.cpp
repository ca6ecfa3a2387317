// Error curves of the approximate attentions against exact softmax attention.
#include "linattn/quality.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <iomanip>
#include <sstream>
#include <tuple>
#include <vector>

#include "linattn/boundary.hpp"
#include "linattn/favor.hpp"
#include "linattn/linear_attention.hpp"
#include "linattn/linformer.hpp"
#include "linattn/random.hpp"
#include "linattn/softmax_attention.hpp"

namespace linattn {
namespace {

// The seed of a trial's stream `stream` (0: inputs, 1: features, 2: projections): distinct streams,
// since the same seed would give ω the very numbers k was drawn from.
uint64_t draw_seed(uint64_t trial_seed, uint64_t stream) { return splitmix64(trial_seed * 3 + stream); }

// One trial's inputs, [B, N, H, ·] contiguous, and the exact softmax output.
struct Trial {
  std::vector<float> q, k, v, exact;
};

Trial make_trial(const QualityOptions& o, uint64_t seed) {
  const int64_t B = o.batch, N = o.seq_len, H = o.heads, D = o.dim, E = o.value_dim;
  Random normal(draw_seed(seed, 0));
  Trial t;
  const double s = o.qk_std;
  for (const auto& [x, n, scale] :
       {std::tuple{&t.k, N * D, s}, std::tuple{&t.v, N * E, 1.0}, std::tuple{&t.q, N * D, s}}) {
    x->resize(size_t(B * H * n));
    for (float& e : *x) e = float(scale * normal.normal());
  }
  if (o.input == QualityInput::peaked) {
    const double gamma = 6.0 / (s * s * std::sqrt(double(D)));
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h) {
        int64_t hubs[4];
        for (int64_t& j : hubs) j = int64_t(std::min(0.999999, std::abs(normal.normal()) / 4) * double(N));
        for (int64_t i = 0; i < N; ++i) {
          const int64_t j = hubs[i % 4];
          float* qi = t.q.data() + ((b * N + i) * H + h) * D;
          const float* kj = t.k.data() + ((b * N + j) * H + h) * D;
          for (int64_t d = 0; d < D; ++d) qi[d] = float(gamma * kj[d] + 0.5 * s * normal.normal());
        }
      }
  }
  t.exact.resize(size_t(B * N * H * E));
  std::vector<float> lse(size_t(B * H * N));
  softmax_attention_forward(bnhd(t.exact.data(), B, N, H, E), lse, bnhd<const float>(t.q.data(), B, N, H, D),
                            bnhd<const float>(t.k.data(), B, N, H, D), bnhd<const float>(t.v.data(), B, N, H, E));
  return t;
}

double relative_frobenius(const std::vector<float>& got, const std::vector<float>& want) {
  double err = 0, norm = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    err += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    norm += double(want[i]) * want[i];
  }
  return std::sqrt(err / norm);
}

// approximate(out, trial, size, seed) fills out; the error of each size, averaged over trials.
std::vector<ErrorCurvePoint> error_curve(
    const char* op, std::span<const int64_t> sizes, const QualityOptions& o,
    const std::function<void(std::vector<float>&, const Trial&, int64_t, uint64_t)>& approximate) {
  if (o.trials < 1) boundary::fail(op, "options.trials is " + std::to_string(o.trials) + ", expected ≥ 1");
  std::vector<ErrorCurvePoint> curve;
  for (int64_t size : sizes) curve.push_back({size, 0.0, 0.0});
  for (int64_t trial = 0; trial < o.trials; ++trial) {
    const uint64_t seed = o.seed * 1000003u + uint64_t(trial);
    const Trial t = make_trial(o, seed);
    std::vector<float> out(t.exact.size());
    for (ErrorCurvePoint& point : curve) {
      approximate(out, t, point.size, seed);
      const double error = relative_frobenius(out, t.exact);
      point.mean_error += error / double(o.trials);
      point.max_error = std::max(point.max_error, error);
    }
  }
  return curve;
}

}  // namespace

const char* quality_input_name(QualityInput input) { return input == QualityInput::peaked ? "peaked" : "random"; }

std::vector<ErrorCurvePoint> favor_error_curve(std::span<const int64_t> n_features, const QualityOptions& o,
                                               bool orthogonal) {
  const int64_t B = o.batch, N = o.seq_len, H = o.heads, D = o.dim, E = o.value_dim;
  return error_curve(
      "favor_error_curve", n_features, o, [&](std::vector<float>& out, const Trial& t, int64_t m, uint64_t seed) {
        LinearAttentionOptions la;
        la.feature_map = favor_feature_map(D, {.n_features = m, .seed = draw_seed(seed, 1), .orthogonal = orthogonal});
        linear_attention_forward(bnhd(out.data(), B, N, H, E), bnhd<const float>(t.q.data(), B, N, H, D),
                                 bnhd<const float>(t.k.data(), B, N, H, D), bnhd<const float>(t.v.data(), B, N, H, E),
                                 la);
      });
}

const char* linformer_init_name(LinformerInit init) {
  return init == LinformerInit::gaussian ? "gaussian" : "mean_pooling";
}

std::vector<ErrorCurvePoint> linformer_error_curve(std::span<const int64_t> projected_lengths, const QualityOptions& o,
                                                   LinformerInit init) {
  const int64_t B = o.batch, N = o.seq_len, H = o.heads, D = o.dim, E = o.value_dim;
  return error_curve(
      "linformer_error_curve", projected_lengths, o,
      [&](std::vector<float>& out, const Trial& t, int64_t P, uint64_t seed) {
        std::vector<float> Ep(size_t(H * P * N), 0.0f), Fp(Ep.size(), 0.0f);
        if (init == LinformerInit::gaussian) {
          Random normal(draw_seed(seed, 2));
          const double scale = 1.0 / std::sqrt(double(P));
          for (float& e : Ep) e = float(scale * normal.normal());
          for (float& e : Fp) e = float(scale * normal.normal());
        } else {
          // Segment r: positions [⌊rN/P⌋, ⌊(r+1)N/P⌋); empty when P > N, and then its row stays 0.
          for (int64_t h = 0; h < H; ++h)
            for (int64_t r = 0; r < P; ++r) {
              const int64_t first = r * N / P, last = (r + 1) * N / P;
              for (int64_t j = first; j < last; ++j) {
                Ep[size_t((h * P + r) * N + j)] = Fp[size_t((h * P + r) * N + j)] = 1.0f / float(last - first);
              }
            }
        }
        LinformerOptions lo;
        lo.projected_length = P;
        lo.max_length = N;
        std::vector<float> lse(size_t(B * H * N));
        linformer_attention_forward(bnhd(out.data(), B, N, H, E), lse, bnhd<const float>(t.q.data(), B, N, H, D),
                                    bnhd<const float>(t.k.data(), B, N, H, D),
                                    bnhd<const float>(t.v.data(), B, N, H, E), Ep, Fp, lo);
      });
}

std::string error_table(const std::vector<std::string>& names, const std::vector<std::vector<ErrorCurvePoint>>& curves,
                        const std::string& size_name) {
  std::ostringstream s;
  s << "| " << size_name << " |";
  for (const auto& name : names) s << " " << name << " |";
  s << "\n|---:|";
  for (size_t i = 0; i < names.size(); ++i) s << "---:|";
  s << "\n";
  for (size_t row = 0; !curves.empty() && row < curves[0].size(); ++row) {
    s << "| " << curves[0][row].size << " |";
    for (const auto& curve : curves) s << " " << std::setprecision(3) << curve[row].mean_error << " |";
    s << "\n";
  }
  return s.str();
}

}  // namespace linattn
