// The bad inputs of issue 42 for the decayed family, the delta rule and causal linear attention: an
// unbounded chunk_size (refused by name before anything is allocated), log decays of −1e30 and −inf
// (hard resets: the fp64 oracle's values, outputs and gradients), and NaN or ±inf at a later token,
// which must leave the outputs (and where they cannot depend on it the gradients) of earlier tokens
// as the clean run has them. Awkward lengths T = 1, 63, 65, 97 and chunk sizes up to the bound.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <new>
#include <random>
#include <string>
#include <vector>

#include "linattn/decay.hpp"
#include "linattn/delta.hpp"
#include "linattn/error.hpp"
#include "linattn/limits.hpp"
#include "linattn/linear_attention.hpp"
#include "linattn/reference.hpp"
#include "support/sanitizers.h"
#include "support/tensors.hpp"

namespace linattn::testing {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
// The fp32 paths against the fp64 oracle with hard resets among ordinary decays: the error scaled by
// each tensor's magnitude, as the rest of the suite measures it.
constexpr double kTol = 2e-5;

std::vector<double> widen(const std::vector<float>& x) { return {x.begin(), x.end()}; }

// max |got − want| over max(max |want|, 1): the inputs are O(1), and where a reset makes the oracle's value
// e^{−150}·x (below fp32's least subnormal) the fp32 path's 0 is right, not 100% off.
double error(const std::vector<double>& got, const std::vector<double>& want) {
  double worst = 0, scale = 1;
  for (size_t i = 0; i < want.size(); ++i) {
    const double d = std::abs(got[i] - want[i]);
    if (!(d <= worst)) worst = d;  // a NaN stays: it is the worst error there is
    scale = std::max(scale, std::abs(want[i]));
  }
  return worst / scale;
}
double error(ConstTensorView got, const reference::Tensor& want) {
  return error(reference::to_double(got).data, want.data);
}
double error(const std::vector<float>& got, const std::vector<double>& want) { return error(widen(got), want); }

// q, k, v, dout, the gates, β, an initial state and a final-state gradient of one problem.
struct Inputs {
  int64_t B, T, H, K, V, gate_cols;
  Tensor32 q, k, v, dout, g, beta;
  std::vector<float> initial, dfinal;
  Inputs(int64_t B_, int64_t T_, int64_t H_, int64_t K_, int64_t V_, int64_t cols, uint64_t seed = 7)
      : B(B_), T(T_), H(H_), K(K_), V(V_), gate_cols(cols) {
    std::mt19937_64 rng(seed);
    q = random_tensor({B, T, H, K}, Layout::bnhd, rng), k = random_tensor({B, T, H, K}, Layout::bnhd, rng);
    v = random_tensor({B, T, H, V}, Layout::bnhd, rng), dout = random_tensor({B, T, H, V}, Layout::bnhd, rng);
    g = random_tensor({B, T, H, std::max<int64_t>(cols, 1)}, Layout::bnhd, rng, -0.7f, 0.0f);
    beta = random_tensor({B, T, H, 1}, Layout::bnhd, rng, 0.1f, 1.0f);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (int64_t i = 0; i < B * H * K * V; ++i) initial.push_back(u(rng)), dfinal.push_back(u(rng));
  }
  ConstTensorView gate() const { return gate_cols > 0 ? ConstTensorView(g.view) : ConstTensorView{}; }
  float& at(Tensor32& x, int64_t t, int64_t h, int64_t c) { return x.storage[size_t(x.view.offset(0, t, h, c))]; }
};

// Every head's gate (all its columns, or only column `col` ≥ 0) at token t set to x.
void set_gate(Inputs& in, int64_t t, float x, int64_t col = -1) {
  for (int64_t b = 0; b < in.B; ++b)
    for (int64_t h = 0; h < in.H; ++h)
      for (int64_t c = 0; c < in.gate_cols; ++c)
        if (col < 0 || c == col) in.g.storage[size_t(in.g.view.offset(b, t, h, c))] = x;
}

// Hard resets at a few tokens of every length: the first token, one inside the first chunk, two in a row,
// and (per key) one column alone.
void set_resets(Inputs& in, float x) {
  for (int64_t t : {int64_t(0), int64_t(5), int64_t(40), int64_t(41), int64_t(70)})
    if (t < in.T) set_gate(in, t, x);
  if (in.T > 20) set_gate(in, 20, x, in.gate_cols > 1 ? 1 : -1);
}

// ---- The decayed family ----

struct DecayRun {
  Tensor32 out, dq, dk, dv, dg;
  std::vector<float> final_state, dinitial, recurrent_state;
  Tensor32 recurrent_out;
};

DecayRun run_decayed(const Inputs& in, const DecayedAttentionOptions& o, bool backward = true) {
  const std::array<int64_t, 4> qs{in.B, in.T, in.H, in.K}, vs{in.B, in.T, in.H, in.V};
  DecayRun r{make_tensor(vs, Layout::bnhd),
             make_tensor(qs, Layout::bnhd),
             make_tensor(qs, Layout::bnhd),
             make_tensor(vs, Layout::bnhd),
             make_tensor({in.B, in.T, in.H, std::max<int64_t>(in.gate_cols, 1)}, Layout::bnhd),
             std::vector<float>(in.initial.size()),
             std::vector<float>(in.initial.size()),
             in.initial,
             make_tensor(vs, Layout::bnhd)};
  decayed_attention_forward(r.out.view, in.q.view, in.k.view, in.v.view, in.gate(), o, in.initial, r.final_state);
  if (backward)
    decayed_attention_backward(r.dq.view, r.dk.view, r.dv.view, in.gate_cols > 0 ? r.dg.view : TensorView{}, r.dinitial,
                               in.dout.view, in.dfinal, in.q.view, in.k.view, in.v.view, in.gate(), o, in.initial);
  decayed_recurrent_forward(r.recurrent_out.view, in.q.view, in.k.view, in.v.view, in.gate(), r.recurrent_state, o);
  return r;
}

void expect_decayed_matches_oracle(const Inputs& in, const DecayedAttentionOptions& o) {
  const reference::Tensor q = reference::to_double(in.q.view), k = reference::to_double(in.k.view),
                          v = reference::to_double(in.v.view), dout = reference::to_double(in.dout.view),
                          g = reference::to_double(in.g.view);
  const std::vector<double> initial = widen(in.initial), dfinal = widen(in.dfinal);
  const reference::Tensor* gp = in.gate_cols > 0 ? &g : nullptr;
  const reference::DecayedOutput want = reference::decayed_attention_forward(q, k, v, gp, o, &initial);
  const reference::DecayedGradients grad =
      reference::decayed_attention_backward(dout, &dfinal, q, k, v, gp, o, &initial);
  const DecayRun r = run_decayed(in, o);
  EXPECT_LT(error(r.out.view, want.out), kTol) << "out";
  EXPECT_LT(error(r.final_state, want.final_state), kTol) << "final_state";
  EXPECT_LT(error(r.recurrent_out.view, want.out), kTol) << "token-by-token out";
  EXPECT_LT(error(r.recurrent_state, want.final_state), kTol) << "token-by-token state";
  EXPECT_LT(error(r.dq.view, grad.dq), kTol) << "dq";
  EXPECT_LT(error(r.dk.view, grad.dk), kTol) << "dk";
  EXPECT_LT(error(r.dv.view, grad.dv), kTol) << "dv";
  if (in.gate_cols > 0) {
    EXPECT_LT(error(r.dg.view, grad.dg), kTol) << "dg";
  }
  EXPECT_LT(error(r.dinitial, grad.dinitial_state), kTol) << "dinitial_state";
}

// Issue 42 item 2: g = −1e30 (exp is exactly 0 in fp32) at some tokens, and −150 (past where exp underflows),
// in GLA and simple GLA, chunked (forward and backward) and token by token (long enough for the block scan).
TEST(DecayedGates, LargeNegativeLogDecayMatchesTheOracle) {
  for (Decay d : {Decay::token, Decay::key})
    for (float reset : {-1e30f, -150.0f, -100.0f})
      for (int64_t T : {1, 63, 65, 97})
        for (int64_t chunk : {16, 64}) {
          SCOPED_TRACE(decay_name(d) + " g " + std::to_string(reset) + " T " + std::to_string(T) + " C " +
                       std::to_string(chunk));
          Inputs in(1, T, 2, 7, 5, d == Decay::key ? 7 : 1);
          set_resets(in, reset);
          DecayedAttentionOptions o;
          o.decay = d, o.chunk_size = chunk;
          expect_decayed_matches_oracle(in, o);
        }
}

// Issue 42 item 3: g = −inf (a zero decay, as padding writes it) is a legal gate: the oracle's values, not NaN.
TEST(DecayedGates, MinusInfinityLogDecayMatchesTheOracle) {
  for (Decay d : {Decay::token, Decay::key})
    for (int64_t T : {1, 63, 65, 97}) {
      SCOPED_TRACE(decay_name(d) + " T " + std::to_string(T));
      Inputs in(2, T, 2, 9, 4, d == Decay::key ? 9 : 1);
      set_resets(in, -kInf);
      DecayedAttentionOptions o;
      o.decay = d, o.chunk_size = 32;
      expect_decayed_matches_oracle(in, o);
    }
}

// ---- The delta rule ----

struct DeltaRun {
  Tensor32 out, dq, dk, dv, dbeta, dg;
  std::vector<float> final_state, dinitial;
};

DeltaRun run_delta(const Inputs& in, const DeltaRuleOptions& o, bool backward = true) {
  const std::array<int64_t, 4> qs{in.B, in.T, in.H, in.K}, vs{in.B, in.T, in.H, in.V};
  DeltaRun r{make_tensor(vs, Layout::bnhd),
             make_tensor(qs, Layout::bnhd),
             make_tensor(qs, Layout::bnhd),
             make_tensor(vs, Layout::bnhd),
             make_tensor({in.B, in.T, in.H, 1}, Layout::bnhd),
             make_tensor({in.B, in.T, in.H, std::max<int64_t>(in.gate_cols, 1)}, Layout::bnhd),
             std::vector<float>(in.initial.size()),
             std::vector<float>(in.initial.size())};
  delta_rule_forward(r.out.view, in.q.view, in.k.view, in.v.view, in.beta.view, in.gate(), o, in.initial,
                     r.final_state);
  if (backward)
    delta_rule_backward(r.dq.view, r.dk.view, r.dv.view, r.dbeta.view, in.gate_cols > 0 ? r.dg.view : TensorView{},
                        r.dinitial, in.dout.view, in.dfinal, in.q.view, in.k.view, in.v.view, in.beta.view, in.gate(),
                        o, in.initial);
  return r;
}

void expect_delta_matches_oracle(const Inputs& in, const DeltaRuleOptions& o) {
  const reference::Tensor q = reference::to_double(in.q.view), k = reference::to_double(in.k.view),
                          v = reference::to_double(in.v.view), dout = reference::to_double(in.dout.view),
                          g = reference::to_double(in.g.view), beta = reference::to_double(in.beta.view);
  const std::vector<double> initial = widen(in.initial), dfinal = widen(in.dfinal);
  const reference::Tensor* gp = in.gate_cols > 0 ? &g : nullptr;
  const reference::DecayedOutput want = reference::delta_rule_forward(q, k, v, beta, gp, o, &initial);
  const reference::DeltaGradients grad = reference::delta_rule_backward(dout, &dfinal, q, k, v, beta, gp, o, &initial);
  const DeltaRun r = run_delta(in, o);
  EXPECT_LT(error(r.out.view, want.out), kTol) << "out";
  EXPECT_LT(error(r.final_state, want.final_state), kTol) << "final_state";
  EXPECT_LT(error(r.dq.view, grad.dq), kTol) << "dq";
  EXPECT_LT(error(r.dk.view, grad.dk), kTol) << "dk";
  EXPECT_LT(error(r.dv.view, grad.dv), kTol) << "dv";
  EXPECT_LT(error(r.dbeta.view, grad.dbeta), kTol) << "dbeta";
  if (in.gate_cols > 0) {
    EXPECT_LT(error(r.dg.view, grad.dg), kTol) << "dg";
  }
  EXPECT_LT(error(r.dinitial, grad.dinitial_state), kTol) << "dinitial_state";
}

// Issue 42 item 3 for the chunked Gated DeltaNet and KDA (−inf), and −1e30 beside it.
TEST(DeltaGates, MinusInfinityLogDecayMatchesTheOracle) {
  for (DeltaGate gate : {DeltaGate::token, DeltaGate::key})
    for (float reset : {-kInf, -1e30f})
      for (int64_t T : {1, 63, 65, 97}) {
        SCOPED_TRACE(delta_name(gate) + " g " + std::to_string(reset) + " T " + std::to_string(T));
        Inputs in(1, T, 2, 6, 5, gate == DeltaGate::key ? 6 : 1);
        set_resets(in, reset);
        DeltaRuleOptions o;
        o.gate = gate, o.chunk_size = 32, o.qk_l2norm = true;
        expect_delta_matches_oracle(in, o);
      }
}

// ---- NaN and Inf reach exactly the outputs that depend on them ----

constexpr int64_t kBad = 10;  // the poisoned token; tokens 0..9 must not see it

// Rows [0, kBad) of x equal to those of clean (NaN-free, within rounding: a poisoned gate may end a
// chunk elsewhere, which moves the decays' split point).
void expect_early_rows_clean(ConstTensorView x, ConstTensorView clean, const char* what) {
  double worst = 0, scale = 0;
  bool finite = true;
  for (int64_t b = 0; b < x.batch(); ++b)
    for (int64_t t = 0; t < kBad; ++t)
      for (int64_t h = 0; h < x.heads(); ++h)
        for (int64_t c = 0; c < x.dim(); ++c) {
          const double got = x.data[x.offset(b, t, h, c)], want = clean.data[clean.offset(b, t, h, c)];
          finite = finite && std::isfinite(got);
          worst = std::max(worst, std::abs(got - want)), scale = std::max(scale, std::abs(want));
        }
  EXPECT_TRUE(finite) << what << ": a token before " << kBad << " is not finite";
  EXPECT_LE(worst, 1e-5 * std::max(scale, 1.0)) << what;
}

// The poisons: (tensor, value) pairs at token kBad of head 0.
enum class Input { q, k, v, g, beta };
struct Poison {
  Input input;
  float value;
};
std::string describe(const Poison& p) {
  const char* names[] = {"q", "k", "v", "g", "beta"};
  return std::string(names[int(p.input)]) + " = " + std::to_string(p.value);
}
void poison(Inputs& in, const Poison& p) {
  Tensor32* x[] = {&in.q, &in.k, &in.v, &in.g, &in.beta};
  for (int64_t b = 0; b < in.B; ++b) in.at(*x[int(p.input)], kBad, 0, 0) = p.value;
}

// Issue 42 item 4, the decayed family: v, k, g NaN or ±inf at token 10 of a 64-token chunk (and of a
// 16-token one: the poison in a later chunk's first strip) leaves outputs 0..9 as they were, chunked and
// token by token; with v poisoned, the gradients of q, k, v at tokens 0..9 too (they do not depend on v_10).
TEST(NonFiniteCausality, DecayedFamilyLaterTokenLeavesEarlierOutputs) {
  for (Decay d : {Decay::none, Decay::retention, Decay::head, Decay::token, Decay::key})
    for (int64_t chunk : {64, 8})
      for (const Poison& p : {Poison{Input::v, kNaN}, Poison{Input::v, kInf}, Poison{Input::k, kNaN},
                              Poison{Input::k, -kInf}, Poison{Input::g, kNaN}, Poison{Input::g, kInf}}) {
        const int64_t cols = d == Decay::key ? 8 : d == Decay::token ? 1 : 0;
        if (p.input == Input::g && cols == 0) continue;
        SCOPED_TRACE(decay_name(d) + " C " + std::to_string(chunk) + " " + describe(p));
        Inputs in(1, 65, 2, 8, 8, cols);
        const std::vector<float> gamma{-0.1f, -0.5f};
        DecayedAttentionOptions o;
        o.decay = d, o.chunk_size = chunk;
        if (d == Decay::head) o.g_gamma = gamma;
        const DecayRun clean = run_decayed(in, o);
        poison(in, p);
        const DecayRun bad = run_decayed(in, o);
        expect_early_rows_clean(bad.out.view, clean.out.view, "out");
        expect_early_rows_clean(bad.recurrent_out.view, clean.recurrent_out.view, "token-by-token out");
        if (p.input != Input::v) continue;
        expect_early_rows_clean(bad.dq.view, clean.dq.view, "dq");
        expect_early_rows_clean(bad.dk.view, clean.dk.view, "dk");
        expect_early_rows_clean(bad.dv.view, clean.dv.view, "dv");
      }
}

// Issue 42 item 4, the delta rule: v, k, g, β NaN or ±inf at token 10 leaves outputs 0..9 as they were;
// with v poisoned, the gradients of q, k, v, β at tokens 0..9 too.
TEST(NonFiniteCausality, DeltaRuleLaterTokenLeavesEarlierOutputs) {
  for (DeltaGate gate : {DeltaGate::none, DeltaGate::token, DeltaGate::key})
    for (int64_t chunk : {64, 8})
      for (const Poison& p : {Poison{Input::v, kNaN}, Poison{Input::v, kInf}, Poison{Input::k, kNaN},
                              Poison{Input::g, kNaN}, Poison{Input::beta, kNaN}, Poison{Input::beta, kInf}}) {
        const int64_t cols = gate == DeltaGate::key ? 8 : gate == DeltaGate::token ? 1 : 0;
        if (p.input == Input::g && cols == 0) continue;
        SCOPED_TRACE(delta_name(gate) + " C " + std::to_string(chunk) + " " + describe(p));
        Inputs in(1, 65, 2, 8, 8, cols);
        DeltaRuleOptions o;
        o.gate = gate, o.chunk_size = chunk;
        const DeltaRun clean = run_delta(in, o);
        poison(in, p);
        const DeltaRun bad = run_delta(in, o);
        expect_early_rows_clean(bad.out.view, clean.out.view, "out");
        if (p.input != Input::v) continue;
        expect_early_rows_clean(bad.dq.view, clean.dq.view, "dq");
        expect_early_rows_clean(bad.dk.view, clean.dk.view, "dk");
        expect_early_rows_clean(bad.dv.view, clean.dv.view, "dv");
        expect_early_rows_clean(bad.dbeta.view, clean.dbeta.view, "dbeta");
      }
}

// Where the oracle's NaNs stand: element i of got is NaN exactly where want's is.
void expect_nans_where_the_oracle_has_them(ConstTensorView got, const reference::Tensor& want, const char* what) {
  const std::vector<double> g = reference::to_double(got).data;
  int64_t nans = 0, misplaced = 0;
  for (size_t i = 0; i < want.data.size(); ++i) {
    nans += std::isnan(want.data[i]);
    misplaced += std::isnan(g[i]) != std::isnan(want.data[i]);
  }
  EXPECT_GT(nans, 0) << what << ": the oracle has no NaN (the poison did not reach it)";
  EXPECT_EQ(misplaced, 0) << what << ": NaN where the oracle has a number, or the reverse";
}

// A NaN in one key column of the per-key gate (GLA's g, KDA's g) at token 10 reaches every later output of its
// head, chunked and token by token, as in the oracle: the token paths' e^g is a vector exp (K = 64 fills whole
// SIMD lanes), which must pass the NaN on rather than flush it to a finite decay.
TEST(NonFiniteCausality, NanKeyGateReachesLaterOutputsAsInTheOracle) {
  Inputs in(1, 40, 2, 64, 8, 64);
  in.at(in.g, kBad, 0, 5) = kNaN;
  const reference::Tensor q = reference::to_double(in.q.view), k = reference::to_double(in.k.view),
                          v = reference::to_double(in.v.view), g = reference::to_double(in.g.view),
                          beta = reference::to_double(in.beta.view);
  DecayedAttentionOptions decayed;
  decayed.decay = Decay::key;
  const reference::DecayedOutput dwant = reference::decayed_attention_forward(q, k, v, &g, decayed);
  std::vector<float> zero(in.initial.size(), 0.0f);
  Tensor32 recurrent = make_tensor({in.B, in.T, in.H, in.V}, Layout::bnhd);
  decayed_recurrent_forward(recurrent.view, in.q.view, in.k.view, in.v.view, in.gate(), zero, decayed);
  expect_nans_where_the_oracle_has_them(recurrent.view, dwant.out, "gla token by token");
  DeltaRuleOptions kda;
  kda.gate = DeltaGate::key;
  const reference::DecayedOutput kwant = reference::delta_rule_forward(q, k, v, beta, &g, kda);
  std::fill(zero.begin(), zero.end(), 0.0f);
  delta_rule_recurrent_forward(recurrent.view, in.q.view, in.k.view, in.v.view, in.beta.view, in.gate(), zero, kda);
  expect_nans_where_the_oracle_has_them(recurrent.view, kwant.out, "kda token by token");
  Tensor32 chunked = make_tensor({in.B, in.T, in.H, in.V}, Layout::bnhd);
  delta_rule_forward(chunked.view, in.q.view, in.k.view, in.v.view, in.beta.view, in.gate(), kda);
  expect_nans_where_the_oracle_has_them(chunked.view, kwant.out, "kda chunked");
}

// out, dq, dv of causal linear attention.
struct LinearRun {
  Tensor32 out, dq, dk, dv;
};
LinearRun run_causal_linear(const Inputs& in, const LinearAttentionOptions& o) {
  const std::array<int64_t, 4> qs{in.B, in.T, in.H, in.K}, vs{in.B, in.T, in.H, in.V};
  LinearRun r{make_tensor(vs, Layout::bnhd), make_tensor(qs, Layout::bnhd), make_tensor(qs, Layout::bnhd),
              make_tensor(vs, Layout::bnhd)};
  causal_linear_attention_forward(r.out.view, in.q.view, in.k.view, in.v.view, o);
  causal_linear_attention_backward(r.dq.view, r.dk.view, r.dv.view, in.dout.view, in.q.view, in.k.view, in.v.view, o);
  return r;
}

// Issue 42 item 4, causal linear attention (chunked): v or k NaN/inf at token 10 leaves outputs 0..9; with v
// poisoned, dq and dv at tokens 0..9 too (dk of earlier tokens does depend on v_10, through out_10's
// normaliser).
TEST(NonFiniteCausality, CausalLinearLaterTokenLeavesEarlierOutputs) {
  for (int64_t chunk : {32, 8})
    for (const Poison& p : {Poison{Input::v, kNaN}, Poison{Input::v, kInf}, Poison{Input::k, kNaN}}) {
      SCOPED_TRACE("C " + std::to_string(chunk) + " " + describe(p));
      Inputs in(1, 65, 2, 8, 8, 0);
      LinearAttentionOptions o;
      o.chunk_size = chunk;
      const LinearRun clean = run_causal_linear(in, o);
      poison(in, p);
      const LinearRun bad = run_causal_linear(in, o);
      expect_early_rows_clean(bad.out.view, clean.out.view, "out");
      if (p.input != Input::v) continue;
      expect_early_rows_clean(bad.dq.view, clean.dq.view, "dq");
      expect_early_rows_clean(bad.dv.view, clean.dv.view, "dv");
    }
}

// ---- chunk_size: bounded by what each family's scratch holds ----

template <class F>
void expect_chunk_refused(F call, const std::string& op, int64_t bound) {
  try {
    call();
    ADD_FAILURE() << op << " took the chunk size";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(op), std::string::npos) << what;
    EXPECT_NE(what.find("options.chunk_size is"), std::string::npos) << what;
    EXPECT_NE(what.find("expected in [1, " + std::to_string(bound) + "]"), std::string::npos) << what;
  }
}

// Issue 42 item 1: chunk sizes past the bound (2^20, 2^40, INT64_MAX) are refused by name before anything is
// allocated (they used to end the process in std::bad_alloc inside an OpenMP region); at the bound a
// sequence runs and matches the oracle.
TEST(ChunkSizeBound, DecayedAndDeltaChunkSizeIsBoundedBeforeAllocating) {
  Inputs in(1, 16, 2, 8, 8, 8);
  for (int64_t chunk : {limits::kMaxDecayChunkSize + 1, int64_t(1) << 40, std::numeric_limits<int64_t>::max()}) {
    DecayedAttentionOptions o;
    o.decay = Decay::key, o.chunk_size = chunk;
    expect_chunk_refused([&] { run_decayed(in, o, false); }, "decayed_attention_forward", limits::kMaxDecayChunkSize);
    expect_chunk_refused([&] { run_decayed(in, o, true); }, "decayed_attention_forward", limits::kMaxDecayChunkSize);
    DeltaRuleOptions d;
    d.gate = DeltaGate::key, d.chunk_size = chunk;
    expect_chunk_refused([&] { run_delta(in, d, false); }, "delta_rule_forward", limits::kMaxDeltaChunkSize);
  }
}

TEST(ChunkSizeBound, ChunkSizeAtTheBoundMatchesTheOracle) {
  for (int64_t T : {1, 97, 1100})
    for (Decay d : {Decay::token, Decay::key}) {
      SCOPED_TRACE(decay_name(d) + " T " + std::to_string(T));
      Inputs in(1, T, 2, 5, 3, d == Decay::key ? 5 : 1);
      DecayedAttentionOptions o;
      o.decay = d, o.chunk_size = limits::kMaxDecayChunkSize;
      expect_decayed_matches_oracle(in, o);
    }
  for (int64_t T : {1, 97, 1100})
    for (DeltaGate gate : {DeltaGate::none, DeltaGate::key}) {
      SCOPED_TRACE(delta_name(gate) + " T " + std::to_string(T));
      Inputs in(1, T, 2, 5, 3, gate == DeltaGate::key ? 5 : 0);
      DeltaRuleOptions o;
      o.gate = gate, o.chunk_size = limits::kMaxDeltaChunkSize;
      expect_delta_matches_oracle(in, o);
    }
}

// ---- Out of memory inside the families' parallel regions ----

// Runs in a child process (a death test, re-executed: nothing of the parent's OpenMP threads) under an
// address-space limit that a 1 GiB state cannot fit: the families must throw std::bad_alloc to the caller
// (which the C API turns into LINATTN_ERROR_OUT_OF_MEMORY), where it used to leave an OpenMP region and
// end the process (std::terminate, SIGABRT). Exit codes: 0 bad_alloc caught, 2 another exception, 3 none.
[[noreturn]] void run_out_of_memory(bool delta) {
  const int64_t K = int64_t(1) << 14, V = K;  // the state alone: K × V floats = 1 GiB
  std::mt19937_64 rng(3);
  const Tensor32 q = random_tensor({1, 1, 1, K}, Layout::bnhd, rng), k = random_tensor({1, 1, 1, K}, Layout::bnhd, rng),
                 v = random_tensor({1, 1, 1, V}, Layout::bnhd, rng),
                 beta = random_tensor({1, 1, 1, 1}, Layout::bnhd, rng);
  std::vector<float> out(static_cast<size_t>(V));
  rlimit limit{};
  getrlimit(RLIMIT_AS, &limit);
  long pages = 0;
  if (FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%ld", &pages) != 1) pages = 0;
    std::fclose(f);
  }
  limit.rlim_cur = rlim_t(pages) * rlim_t(sysconf(_SC_PAGESIZE)) + (rlim_t(256) << 20);
  setrlimit(RLIMIT_AS, &limit);
  try {
    const TensorView o = bnhd(out.data(), 1, 1, 1, V);
    if (delta)
      delta_rule_forward(o, q.view, k.view, v.view, beta.view, {}, DeltaRuleOptions{});
    else
      decayed_attention_forward(o, q.view, k.view, v.view, {}, DecayedAttentionOptions{});
  } catch (const std::bad_alloc&) {
    std::exit(0);
  } catch (...) {
    std::exit(2);
  }
  std::exit(3);
}

TEST(ParallelRegions, OutOfMemoryIsThrownToTheCallerNotTerminated) {
  if (linattn_address_space_limit_untestable())
    GTEST_SKIP() << "an address-space limit cannot be tested under the sanitizers or qemu-user";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(run_out_of_memory(false), ::testing::ExitedWithCode(0), "") << "decayed_attention_forward";
  EXPECT_EXIT(run_out_of_memory(true), ::testing::ExitedWithCode(0), "") << "delta_rule_forward";
}

}  // namespace
}  // namespace linattn::testing
