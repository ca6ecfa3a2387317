#pragma once
// Helpers shared by the linear attention tests: random problems in every layout, and runs of the
// fast operators and of the fp64 oracle on the same inputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "linattn/linear_attention.hpp"
#include "linattn/reference.hpp"
#include "support/tensors.hpp"

namespace linattn::testing {

struct LinearCase {
  int64_t B, Nq, Nk, H, D, E;
};

inline std::string case_name(const LinearCase& c) {
  std::string name;
  const char* labels[] = {"B", "_Nq", "_Nk", "_H", "_D", "_E"};
  const int64_t values[] = {c.B, c.Nq, c.Nk, c.H, c.D, c.E};
  for (int i = 0; i < 6; ++i) name.append(labels[i]).append(std::to_string(values[i]));
  return name;
}

struct LinearInputs {
  Tensor32 q, k, v;
};

// q, k in [lo, hi), v in [−1, 1).
inline LinearInputs random_inputs(const LinearCase& c, Layout layout, std::mt19937_64& rng, float lo = -1.0f,
                                  float hi = 1.0f) {
  return {random_tensor({c.B, c.Nq, c.H, c.D}, layout, rng, lo, hi),
          random_tensor({c.B, c.Nk, c.H, c.D}, layout, rng, lo, hi),
          random_tensor({c.B, c.Nk, c.H, c.E}, layout, rng, -1.0f, 1.0f)};
}

// Key lengths over [0, Nk]: batch 0 keeps every key, batch 1 a random 1..Nk, batch 2 none.
inline std::vector<int64_t> spread_key_lengths(const LinearCase& c, std::mt19937_64& rng) {
  std::vector<int64_t> lengths(size_t(c.B));
  std::uniform_int_distribution<int64_t> pick(1, c.Nk);
  for (int64_t b = 0; b < c.B; ++b) lengths[b] = b == 0 ? c.Nk : b == 1 ? pick(rng) : 0;
  return lengths;
}

inline reference::State to_double(const RecurrentState& s) {
  reference::State d{s.batch(), s.heads(), s.feature_dim(), s.value_dim(), {}, {}};
  d.S.assign(s.S().begin(), s.S().end());
  d.z.assign(s.z().begin(), s.z().end());
  return d;
}

// Relative error of an fp32 state against the oracle's, the larger of S's and z's.
inline double state_error(const RecurrentState& got, const reference::State& want) {
  const double eS = relative_error(std::vector<float>(got.S().begin(), got.S().end()), want.S);
  const double ez = relative_error(std::vector<float>(got.z().begin(), got.z().end()), want.z);
  return std::max(eS, ez);
}

// Runs linear_attention_forward and _backward (dout random in [−1, 1)) on `in` and expects the outputs
// and the three gradients within `bound` of the fp64 oracle's.
inline void expect_matches_oracle(const LinearInputs& in, const LinearAttentionOptions& options, Layout layout,
                                  std::mt19937_64& rng, double forward_bound, double backward_bound) {
  const auto [B, Nq, H, D] = in.q.extent();
  const int64_t E = in.v.extent()[3];
  auto out = make_tensor({B, Nq, H, E}, layout);
  linear_attention_forward(out.view, in.q.view, in.k.view, in.v.view, options);
  const auto q = reference::to_double(in.q.view), k = reference::to_double(in.k.view),
             v = reference::to_double(in.v.view);
  EXPECT_LE(relative_error(out.view, reference::linear_attention_forward(q, k, v, options)), forward_bound) << "out";
  auto dout = random_tensor({B, Nq, H, E}, layout, rng);
  auto dq = make_tensor(in.q.extent(), layout), dk = make_tensor(in.k.extent(), layout),
       dv = make_tensor(in.v.extent(), layout);
  linear_attention_backward(dq.view, dk.view, dv.view, dout.view, in.q.view, in.k.view, in.v.view, options);
  const auto g = reference::linear_attention_backward(reference::to_double(dout.view), q, k, v, options);
  EXPECT_LE(relative_error(dq.view, g.dq), backward_bound) << "dq";
  EXPECT_LE(relative_error(dk.view, g.dk), backward_bound) << "dk";
  EXPECT_LE(relative_error(dv.view, g.dv), backward_bound) << "dv";
}

}  // namespace linattn::testing
