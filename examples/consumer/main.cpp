// Causal linear attention and exact softmax attention on one small input, through the installed API.
#include <linattn/linattn.hpp>

#include <cmath>
#include <cstdio>
#include <vector>

int main() {
  const int64_t B = 1, N = 5, H = 2, D = 4;
  std::vector<float> q(B * N * H * D), k(q.size()), v(q.size()), out(q.size()), lse(B * H * N);
  for (size_t i = 0; i < q.size(); ++i) {
    q[i] = std::sin(0.3f * float(i));
    k[i] = std::cos(0.7f * float(i));
    v[i] = 0.1f * float(i % 7) + 0.05f;
  }
  auto Q = linattn::bnhd<const float>(q.data(), B, N, H, D), K = linattn::bnhd<const float>(k.data(), B, N, H, D);
  auto V = linattn::bnhd<const float>(v.data(), B, N, H, D);
  auto O = linattn::bnhd(out.data(), B, N, H, D);
  linattn::LinearAttentionOptions options;
  options.causal = true;
  linattn::linear_attention_forward(O, Q, K, V, options);
  std::printf("linear out[0] = %f\n", out[0]);
  linattn::SoftmaxAttentionOptions softmax_options;
  softmax_options.causal = true;
  linattn::softmax_attention_forward(O, lse, Q, K, V, softmax_options);
  std::printf("softmax out[0] = %f\n", out[0]);
  // Query 0 sees only key 0 in both: the output is v_0 exactly for softmax.
  return std::abs(out[0] - v[0]) < 1e-6f ? 0 : 1;
}
