// Where the delta rule's fp32 chunked form stops being accurate: its error against the fp64 oracle
// (and the token-by-token fp32 path's, beside it) as β approaches and passes 2, as the keys become
// parallel, and as unnormalised keys grow. Each update is I − β k kᵀ on the state; its eigenvalue
// along k is 1 − β‖k‖², so β‖k‖² > 2 makes the recurrence itself grow without bound: there the
// numbers below measure an exploding computation, not the method. Prints one table (docs/delta-rule.md).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "linattn/delta.hpp"
#include "linattn/reference.hpp"

namespace {

using namespace linattn;

struct Row {
  double chunked, recurrent, largest;
};

// One head, T tokens, K = V = 32; keys = direction + noise · N(0, 1), scaled to `norm` (l2norm off).
Row measure(DeltaGate gate, float beta_value, float noise, float norm, int64_t T = 256) {
  const int64_t K = 32, V = 32;
  std::mt19937_64 rng(3);
  std::normal_distribution<float> n01(0.0f, 1.0f);
  std::vector<float> q(size_t(T * K)), k(size_t(T * K)), v(size_t(T * V)), beta(size_t(T), beta_value),
      g(size_t(T), -0.05f), out(size_t(T * V)), out_recurrent(size_t(T * V)), state(size_t(K * V), 0.0f);
  for (float& x : q) x = n01(rng);
  for (float& x : v) x = n01(rng);
  for (int64_t t = 0; t < T; ++t) {
    double sum = 0;
    for (int64_t c = 0; c < K; ++c) {
      float& x = k[size_t(t * K + c)];
      x = (c == 0 ? 1.0f : 0.0f) + noise * n01(rng);
      sum += double(x) * x;
    }
    for (int64_t c = 0; c < K; ++c) k[size_t(t * K + c)] *= float(norm / std::sqrt(sum));
  }
  DeltaRuleOptions o;
  o.gate = gate;
  const ConstTensorView Q = bnhd<const float>(q.data(), 1, T, 1, K), Kv = bnhd<const float>(k.data(), 1, T, 1, K),
                        Vv = bnhd<const float>(v.data(), 1, T, 1, V), B = bnhd<const float>(beta.data(), 1, T, 1, 1);
  const ConstTensorView G = gate == DeltaGate::token ? bnhd<const float>(g.data(), 1, T, 1, 1) : ConstTensorView{};
  delta_rule_forward(bnhd(out.data(), 1, T, 1, V), Q, Kv, Vv, B, G, o);
  delta_rule_recurrent_forward(bnhd(out_recurrent.data(), 1, T, 1, V), Q, Kv, Vv, B, G, state, o);
  const reference::Tensor g64 = reference::to_double(G);
  const reference::DecayedOutput want =
      reference::delta_rule_forward(reference::to_double(Q), reference::to_double(Kv), reference::to_double(Vv),
                                    reference::to_double(B), gate == DeltaGate::token ? &g64 : nullptr, o);
  double largest = 0, e_chunked = 0, e_recurrent = 0;
  // A NaN or infinity counts as an infinite error (std::max would drop a NaN).
  const auto error = [](double got, double want_i) {
    const double e = std::abs(got - want_i);
    return std::isfinite(e) ? e : double(INFINITY);
  };
  for (size_t i = 0; i < out.size(); ++i) {
    largest = std::max(largest, std::abs(want.out.data[i]));
    e_chunked = std::max(e_chunked, error(out[i], want.out.data[i]));
    e_recurrent = std::max(e_recurrent, error(out_recurrent[i], want.out.data[i]));
  }
  const auto relative = [&](double e) {
    return std::isfinite(e) && std::isfinite(largest) && largest > 0 ? e / largest : INFINITY;
  };
  return {relative(e_chunked), relative(e_recurrent), largest};
}

void print(const char* what, double x, DeltaGate gate, const Row& r) {
  std::printf("| %-28s | %7.4g | %-16s | %10.2e | %10.2e | %10.2e |\n", what, x, delta_name(gate).c_str(), r.chunked,
              r.recurrent, r.largest);
}

}  // namespace

int main() {
  std::printf("| regime                       |   value | rule             | chunked    | recurrent  | max |out| |\n");
  std::printf("|---|---:|---|---:|---:|---:|\n");
  for (DeltaGate gate : {DeltaGate::none, DeltaGate::token}) {
    for (float beta : {1.0f, 1.9f, 1.99f, 2.0f, 2.01f, 2.1f, 2.5f})
      print("beta (unit keys, noise 0.3)", beta, gate, measure(gate, beta, 0.3f, 1.0f));
    for (float noise : {1e-1f, 1e-2f, 1e-3f, 1e-4f, 0.0f})
      print("key noise (beta 1.9, unit)", noise, gate, measure(gate, 1.9f, noise, 1.0f));
    for (float norm : {0.5f, 1.0f, 1.4f, 1.5f, 2.0f, 4.0f})
      print("key norm (beta 1, noise 0.3)", norm, gate, measure(gate, 1.0f, 0.3f, norm));
    // One chunk of exactly parallel unit keys: T = (I + βG)⁻¹ holds (1 − β)^(t−s), so for β > 2 its
    // entries grow like (β − 1)^64 inside the chunk, as the recurrence's state does over the tokens.
    for (float beta : {2.0f, 3.0f, 4.0f, 5.0f, 6.0f})
      print("beta (parallel keys, T = 64)", beta, gate, measure(gate, beta, 0.0f, 1.0f, 64));
  }
}
