#pragma once
// The DPLR delta rule's test problem (RWKV-7), shared by dplr_test (token by token) and dplr_chunk_test
// (chunked): a case (shapes, how a and b are drawn, log decays, layout, packed sequences, states, chunk
// size), its random tensors, and the fp64 oracle's forward.
#include <array>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "linattn/dplr.hpp"
#include "linattn/reference.hpp"
#include "support/tensors.hpp"

// In their own namespace: Case and Problem are every test's words.
namespace linattn::testing::dplr {

// How a and b are drawn. uniform: each in ±ab. delta: a = −κ, b = ab·κ with κ a unit vector drawn per token
// (the delta rule's transition diag(w) − ab·κκᵀ: an eigenvalue near w − ab, negative for ab > 1). grow: a = κ,
// b = ab·κ with one κ per head for all tokens (an eigenvalue near w + ab > 1 every token: the state grows
// about (1 + ab)× a token, so the horizon is bounded). rwkv7: RWKV-7's a = −κ, b = κ ⊙ ab·sigmoid(x) with x
// standard normal per element (its in-context learning rate: ab = 1 is the model's range (0, 1)).
enum class AB { uniform, delta, grow, rwkv7 };

struct Case {
  int64_t B, T, H, K, V;
  float gk_lo = -0.7f, gk_hi = 0.0f;  // log decays drawn in [gk_lo, gk_hi]
  AB ab_kind = AB::uniform;
  float ab = 0.5f;
  Layout layout = Layout::bnhd;
  std::vector<int64_t> cu_seqlens = {};
  bool states = true;  // an initial state and a final state's gradient (else none)
  int64_t chunk = 64;  // the chunked forward's options.chunk_size
};

inline std::string describe(const Case& c) {
  std::string s = "B";
  return s + std::to_string(c.B) + " T" + std::to_string(c.T) + " H" + std::to_string(c.H) + " K" +
         std::to_string(c.K) + " V" + std::to_string(c.V) + " gk[" + std::to_string(c.gk_lo) + "," +
         std::to_string(c.gk_hi) + "] ab " + std::to_string(int(c.ab_kind)) + ":" + std::to_string(c.ab) + " " +
         layout_name(c.layout) + (c.cu_seqlens.empty() ? "" : " packed") + (c.states ? " states" : "") + " chunk " +
         std::to_string(c.chunk);
}

inline int64_t sequences(const Case& c) { return c.cu_seqlens.empty() ? c.B : int64_t(c.cu_seqlens.size()) - 1; }

struct Problem {
  Case c;
  Tensor32 q, k, v, a, b, gk, dout;
  std::vector<float> initial, dfinal;
  DplrOptions options() const {
    DplrOptions o;
    o.cu_seqlens = c.cu_seqlens;
    o.chunk_size = c.chunk;
    return o;
  }
  size_t state_size() const { return size_t(sequences(c) * c.H * c.K * c.V); }
};

// a and b for every (batch, token, head) as the case says.
inline void draw_ab(Problem& p, std::mt19937_64& rng) {
  const Case& c = p.c;
  if (c.ab_kind == AB::uniform) {
    fill_uniform(p.a.view, rng, -c.ab, c.ab);
    fill_uniform(p.b.view, rng, -c.ab, c.ab);
    return;
  }
  std::normal_distribution<float> normal;
  std::vector<float> kappa(size_t(c.K));
  for (int64_t bi = 0; bi < c.B; ++bi)
    for (int64_t t = 0; t < c.T; ++t)
      for (int64_t h = 0; h < c.H; ++h) {
        float norm = 0;
        // grow: one κ per head for every token, so that the growth compounds.
        if (c.ab_kind == AB::grow && t > 0) {
          for (int64_t d = 0; d < c.K; ++d) p.a.view(bi, t, h, d) = p.a.view(bi, 0, h, d);
          for (int64_t d = 0; d < c.K; ++d) p.b.view(bi, t, h, d) = p.b.view(bi, 0, h, d);
          continue;
        }
        for (float& x : kappa) x = normal(rng), norm += x * x;
        for (int64_t d = 0; d < c.K; ++d) {
          const float unit = kappa[size_t(d)] / std::sqrt(norm);
          const float rate = c.ab_kind == AB::rwkv7 ? 1.0f / (1.0f + std::exp(-normal(rng))) : 1.0f;
          p.a.view(bi, t, h, d) = c.ab_kind == AB::grow ? unit : -unit;
          p.b.view(bi, t, h, d) = c.ab * rate * unit;
        }
      }
}

inline Problem make_problem(const Case& c, uint64_t seed = 1) {
  std::mt19937_64 rng(seed);
  const std::array<int64_t, 4> keys{c.B, c.T, c.H, c.K}, values{c.B, c.T, c.H, c.V};
  Problem p{c,
            random_tensor(keys, c.layout, rng),
            random_tensor(keys, c.layout, rng),
            random_tensor(values, c.layout, rng),
            make_tensor(keys, c.layout),
            make_tensor(keys, c.layout),
            random_tensor(keys, c.layout, rng, c.gk_lo, c.gk_hi),
            random_tensor(values, c.layout, rng),
            {},
            {}};
  draw_ab(p, rng);
  if (c.states) {
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (size_t i = 0; i < p.state_size(); ++i) p.initial.push_back(u(rng)), p.dfinal.push_back(u(rng));
  }
  return p;
}

inline std::vector<double> widen(const std::vector<float>& x) { return {x.begin(), x.end()}; }

// The problem's inputs in fp64, for the oracle.
struct Doubles {
  reference::Tensor q, k, v, a, b, gk, dout;
  std::vector<double> initial, dfinal;
  explicit Doubles(const Problem& p)
      : q(reference::to_double(p.q.view)),
        k(reference::to_double(p.k.view)),
        v(reference::to_double(p.v.view)),
        a(reference::to_double(p.a.view)),
        b(reference::to_double(p.b.view)),
        gk(reference::to_double(p.gk.view)),
        dout(reference::to_double(p.dout.view)),
        initial(widen(p.initial)),
        dfinal(widen(p.dfinal)) {}
};

// The oracle's forward of p.
inline reference::DecayedOutput oracle_forward(const Problem& p) {
  const Doubles x(p);
  return reference::dplr_delta_rule_forward(x.q, x.k, x.v, x.a, x.b, x.gk, p.options(),
                                            p.c.states ? &x.initial : nullptr);
}

}  // namespace linattn::testing::dplr
