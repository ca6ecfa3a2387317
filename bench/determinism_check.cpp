// Bitwise determinism across thread counts and runs: every operator of the speed targets runs with 1
// thread, 2 threads and 2 threads again on the same inputs; one JSON line per operator says whether
// all three gave the same bytes. A last line says how far the causal operator and the prefix-sum baseline
// (bench/baseline) are apart at this shape, so the timed programs are seen to compute the same thing.
// Run by scripts/speed_report.py. Usage: determinism_check [--quick]
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "baseline/prefix_sum_causal.hpp"
#include "bench_common.hpp"
#include "linattn/linear_attention.hpp"
#include "linattn/softmax_attention.hpp"

namespace linattn::bench {
namespace {

using Outputs = std::vector<std::vector<float>>;

// Runs `op` (which returns its outputs) with 1, 2 and 2 threads, prints the verdicts, returns the outputs.
Outputs check(const char* name, const std::function<Outputs()>& op) {
  Outputs runs[3];
  const int threads[3] = {1, 2, 2};
  for (int r = 0; r < 3; ++r) {
    const ThreadScope scope(threads[r]);
    runs[r] = op();
  }
  auto same = [](const Outputs& a, const Outputs& b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i)
      if (a[i].size() != b[i].size() || std::memcmp(a[i].data(), b[i].data(), a[i].size() * sizeof(float)) != 0)
        return false;
    return true;
  };
  std::printf("{\"op\": \"%s\", \"threads_1_vs_2\": %s, \"runs_2_vs_2\": %s}\n", name,
              same(runs[0], runs[1]) ? "true" : "false", same(runs[1], runs[2]) ? "true" : "false");
  std::fflush(stdout);
  return runs[2];
}

// max |a − b| / max |b| over all outputs together.
double relative_difference(const Outputs& a, const Outputs& b) {
  double worst = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i)
    for (size_t j = 0; j < a[i].size(); ++j) {
      worst = std::max(worst, std::abs(double(a[i][j]) - double(b[i][j])));
      scale = std::max(scale, std::abs(double(b[i][j])));
    }
  return scale > 0 ? worst / scale : worst;
}

void run_all(bool quick) {
  const int64_t B = 4, H = 8, D = 64, E = 64, N = quick ? 1024 : 16384;
  const Tensor q(B, H, N, D, 1), k(B, H, N, D, 2), v(B, H, N, E, 3), g(B, H, N, E, 4);
  auto zeros = [&](int64_t dim) { return std::vector<float>(B * H * N * dim); };
  LinearAttentionOptions linear;
  LinearAttentionOptions causal;
  causal.causal = true;

  check("linear_forward", [&] {
    auto out = zeros(E);
    linear_attention_forward(bhnd(out.data(), B, H, N, E), q.view, k.view, v.view, linear);
    return Outputs{out};
  });
  check("linear_backward", [&] {
    auto dq = zeros(D), dk = zeros(D), dv = zeros(E);
    linear_attention_backward(bhnd(dq.data(), B, H, N, D), bhnd(dk.data(), B, H, N, D), bhnd(dv.data(), B, H, N, E),
                              g.view, q.view, k.view, v.view, linear);
    return Outputs{dq, dk, dv};
  });
  const Outputs causal_out = check("causal_forward", [&] {
    auto out = zeros(E);
    causal_linear_attention_forward(bhnd(out.data(), B, H, N, E), q.view, k.view, v.view, causal);
    return Outputs{out};
  });
  const Outputs causal_grads = check("causal_backward", [&] {
    auto dq = zeros(D), dk = zeros(D), dv = zeros(E);
    causal_linear_attention_backward(bhnd(dq.data(), B, H, N, D), bhnd(dk.data(), B, H, N, D),
                                     bhnd(dv.data(), B, H, N, E), g.view, q.view, k.view, v.view, causal);
    return Outputs{dq, dk, dv};
  });
  const Outputs base = check("prefix_sum_baseline", [&] {
    auto out = zeros(E), dq = zeros(D), dk = zeros(D), dv = zeros(E);
    baseline::prefix_sum_causal_forward(out.data(), q.data.data(), k.data.data(), v.data.data(), B, H, N, D, E,
                                        *causal.feature_map, causal.eps);
    baseline::prefix_sum_causal_backward(dq.data(), dk.data(), dv.data(), g.data.data(), q.data.data(), k.data.data(),
                                         v.data.data(), B, H, N, D, E, *causal.feature_map, causal.eps);
    return Outputs{out, dq, dk, dv};
  });
  std::printf("{\"agreement\": \"causal vs prefix-sum\", \"forward\": %.3g, \"backward\": %.3g}\n",
              relative_difference(causal_out, Outputs{base[0]}),
              relative_difference(causal_grads, Outputs{base[1], base[2], base[3]}));

  // Softmax at its target shape: B = 1, H = 8, N = 4096.
  const int64_t Ns = quick ? 512 : 4096;
  const Tensor sq(1, H, Ns, D, 5), sk(1, H, Ns, D, 6), sv(1, H, Ns, E, 7), sg(1, H, Ns, E, 8);
  check("softmax_forward_backward", [&] {
    std::vector<float> out(H * Ns * E), lse(H * Ns), dq(H * Ns * D), dk(H * Ns * D), dv(H * Ns * E);
    softmax_attention_forward(bhnd(out.data(), 1, H, Ns, E), lse, sq.view, sk.view, sv.view);
    softmax_attention_backward(bhnd(dq.data(), 1, H, Ns, D), bhnd(dk.data(), 1, H, Ns, D), bhnd(dv.data(), 1, H, Ns, E),
                               sg.view, sq.view, sk.view, sv.view,
                               bhnd(static_cast<const float*>(out.data()), 1, H, Ns, E), lse);
    return Outputs{out, lse, dq, dk, dv};
  });

  // 64 recurrent steps of B = 1, H = 8 from a zero state.
  check("recurrent_step", [&] {
    const int64_t steps = 64;
    RecurrentState state(1, H, linear.feature_map->feature_dim(D), E, linear.feature_map->name());
    std::vector<float> out(steps * H * E);
    for (int64_t t = 0; t < steps; ++t)
      recurrent_step(bnhd(out.data() + t * H * E, 1, 1, H, E), bnhd(q.data.data() + t * H * D, 1, 1, H, D),
                     bnhd(k.data.data() + t * H * D, 1, 1, H, D), bnhd(v.data.data() + t * H * E, 1, 1, H, E), state,
                     linear);
    return Outputs{out, std::vector<float>(state.S().begin(), state.S().end()),
                   std::vector<float>(state.z().begin(), state.z().end())};
  });
}

}  // namespace
}  // namespace linattn::bench

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::string(argv[1]) == "--quick";
  linattn::bench::run_all(quick);
  return 0;
}
