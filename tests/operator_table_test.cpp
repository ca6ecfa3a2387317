// The operator table itself (table/): every row complete and findable, its test cases awkward,
// its flop models what the kernels multiply, and include/linattn/performer.hpp the alias it claims.
#include "operator_table.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <string>

#include "linattn/error.hpp"
#include "linattn/performer.hpp"  // the old name: it must still declare everything favor.hpp does

namespace linattn {
namespace {

TEST(OperatorTable, EveryOperatorOnceWithEveryEntry) {
  std::set<std::string> names;
  for (const table::Operator& op : table::operators()) {
    SCOPED_TRACE(op.name);
    EXPECT_TRUE(names.insert(op.name).second) << "declared twice";
    EXPECT_EQ(&table::find(op.name), &op);
    EXPECT_TRUE(op.options && op.forward && op.oracle_forward && op.forward_flops && op.forward_bytes &&
                op.working_floats && op.test_cases && op.gradient_cases && op.feature_dim && op.gate_dim);
    EXPECT_EQ(op.backward != nullptr, op.has_backward);
    EXPECT_EQ(op.oracle_backward != nullptr, op.has_backward);
    EXPECT_EQ(op.gradient_cases().empty(), !op.has_backward);
    EXPECT_GT(op.bound, 0.0);
  }
  for (const char* name : {"softmax", "linear", "causal", "recurrent", "favor", "random_fourier", "linformer",
                           "retention", "lightning", "simple_gla", "gla", "delta_rule", "gated_delta_rule", "kda"})
    EXPECT_TRUE(names.count(name)) << name;
}

TEST(OperatorTable, UnknownNameThrowsNamingTheChoices) {
  try {
    table::find("performer");
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("\"performer\""), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("favor"), std::string::npos) << e.what();
  }
}

// Around the tiles and chunks (1, 63, 65, 97), odd head dims, E ≠ D, and strides that differ from
// extents: every operator's sweep holds some of each.
TEST(OperatorTable, TestCasesAreAwkward) {
  for (const table::Operator& op : table::operators()) {
    SCOPED_TRACE(op.name);
    bool odd_length = false, odd_dim = false, unequal_dims = false, strided = false;
    for (const table::TestCase& c : op.test_cases()) {
      const table::Sizes& s = c.sizes;
      odd_length |= s.seq_q == 1 || s.seq_q == 63 || s.seq_q == 65 || s.seq_q == 97;
      odd_dim |= s.dim % 2 == 1;
      unequal_dims |= s.dim != s.value_dim;
      strided |= c.storage != table::Storage::bnhd;
    }
    EXPECT_TRUE(odd_length);
    EXPECT_TRUE(odd_dim);
    EXPECT_TRUE(unequal_dims);
    EXPECT_TRUE(strided || op.carries_state);  // the recurrent step runs on one storage
  }
}

table::Sizes square(int64_t n, int64_t d) {
  table::Sizes s;
  s.batch = 2, s.heads = 3, s.seq_q = s.seq_k = n, s.dim = s.value_dim = d;
  return s;
}

// The linear backward runs five GEMMs of 2·N·M·E (S again, dφ(K), dV, S·dO, dS): 10·N·M·E, not the
// 8·N·M·E the command used to count; the forward two (S, φ(Q)S).
TEST(OperatorTable, LinearCountsAreWhatTheKernelsMultiply) {
  const table::Operator& linear = table::find("linear");
  const table::Sizes s = square(4096, 256);
  const double nme = 2.0 * 3.0 * 4096.0 * 256.0 * 256.0;
  EXPECT_NEAR(linear.forward_flops(s) / nme, 4.0, 0.05);
  EXPECT_NEAR(linear.backward_flops(s) / nme, 10.0, 0.1);
  // Causal: the same leading terms, plus the chunk tiles; the recurrent step: the forward's.
  const table::Operator& causal = table::find("causal");
  EXPECT_GT(causal.forward_flops(s), linear.forward_flops(s));
  EXPECT_NEAR(table::find("recurrent").forward_flops(s) / nme, 4.0, 0.05);
  // What the strips execute is less than the chunked count, more than the linear one.
  EXPECT_LT(table::causal_forward_flops_executed(s), causal.forward_flops(s));
  EXPECT_GT(table::causal_forward_flops_executed(s), linear.forward_flops(s));
}

TEST(OperatorTable, SoftmaxCountsPairs) {
  const table::Operator& softmax = table::find("softmax");
  table::Sizes s = square(32, 8);
  s.value_dim = 4;
  EXPECT_EQ(softmax.forward_flops(s), 2.0 * 3.0 * 32 * 32 * 2 * (8 + 4));
  s.causal = true;
  EXPECT_EQ(softmax.forward_flops(s), 2.0 * 3.0 * (32 * 33 / 2) * 2 * (8 + 4));
  EXPECT_EQ(softmax.backward_flops(s), 2.0 * 3.0 * (32 * 33 / 2) * (6 * 8 + 4 * 4));
}

TEST(OperatorTable, FavorCountsItsProjection) {
  table::Sizes s = square(100, 16);
  s.features = 40;
  const table::Operator& favor = table::find("favor");
  EXPECT_EQ(favor.feature_dim(s), 40);
  table::Sizes linear = s;
  linear.dim = 40;  // elu+1 with M = D = 40 has favor's linear part
  linear.value_dim = 16;
  const double projection = 2.0 * 3.0 * 200 * 2 * 16 * 40;
  EXPECT_DOUBLE_EQ(favor.forward_flops(s), projection + table::find("linear").forward_flops(linear));
  EXPECT_DOUBLE_EQ(favor.backward_flops(s), 2 * projection + table::find("linear").backward_flops(linear));
}

TEST(OperatorTable, CompulsoryBytes) {
  const table::Sizes s = square(10, 4);
  // q, k, v read and out written; the backward reads dO too and writes dq, dk, dv.
  EXPECT_EQ(table::find("linear").forward_bytes(s), 4.0 * 6 * 10 * 4 * 4);
  EXPECT_EQ(table::find("linear").backward_bytes(s), 4.0 * 6 * 10 * 4 * 7);
}

// The decayed rows count the chunked algorithm (operator_table.cpp): per chunk of c tokens the
// intra-chunk lower triangle c(c+1)·(K + V), the inter-chunk Q·S and Kᵀ·V 4·c·K·V, the state's decay K·V.
TEST(OperatorTable, DecayedCountsTheChunkedAlgorithm) {
  table::Sizes s = square(100, 8);  // B = 2, H = 3, K = 8
  s.value_dim = 4;
  s.chunk = 64;  // chunks of 64 and 36
  const double K = 8, V = 4, chunk_terms = 64.0 * 65 + 36.0 * 37;
  for (const char* name : {"retention", "lightning", "simple_gla", "gla"}) {
    SCOPED_TRACE(name);
    const table::Operator& op = table::find(name);
    EXPECT_EQ(op.causality, table::Causality::always);
    EXPECT_DOUBLE_EQ(op.forward_flops(s), 6.0 * (chunk_terms * (K + V) + 4.0 * 100 * K * V + 2 * K * V));
    EXPECT_DOUBLE_EQ(op.backward_flops(s), 6.0 * (chunk_terms * (3 * K + 2 * V) + 10.0 * 100 * K * V + 4 * K * V));
  }
  // The gate's columns, and the bytes they add: read in the forward, read and dg written in the backward.
  EXPECT_EQ(table::find("retention").gate_dim(s), 0);
  EXPECT_EQ(table::find("lightning").gate_dim(s), 0);
  EXPECT_EQ(table::find("simple_gla").gate_dim(s), 1);
  EXPECT_EQ(table::find("gla").gate_dim(s), 8);
  const table::Operator& gla = table::find("gla");
  EXPECT_DOUBLE_EQ(gla.forward_bytes(s), table::find("causal").forward_bytes(s) + 4.0 * 6 * 100 * 8);
  EXPECT_DOUBLE_EQ(gla.backward_bytes(s), table::find("causal").backward_bytes(s) + 2 * 4.0 * 6 * 100 * 8);
  EXPECT_DOUBLE_EQ(table::find("retention").forward_bytes(s), table::find("causal").forward_bytes(s));
  // At the shape the inter-chunk products lead: 4·T·K·V against T·(C + 1)·(K + V).
  const table::Sizes big = square(16384, 64);
  table::Sizes chunked = big;
  chunked.chunk = 64;
  const double tkv = 2.0 * 3.0 * 16384 * 64 * 64;
  EXPECT_NEAR(gla.forward_flops(chunked) / tkv, 4.0 + 65.0 * 128 / 4096 + 1.0 / 64, 1e-9);
}

// The delta rows count the chunked form (table/delta_rows.cpp): per chunk of c tokens the load (the
// keys' and queries' scores, the triangular solve, [U | W] = T [βV | −βK]) once in the forward and
// twice in the backward, 6·c·K·V forward and 14·c·K·V (+ 4·c·K·V for the state before every chunk
// but the last) backward, the triangles of the backward, and K·V per chunk of decay when gated.
TEST(OperatorTable, DeltaCountsTheChunkedForm) {
  table::Sizes s = square(100, 8);  // B = 2, H = 3, K = 8
  s.value_dim = 4;
  s.chunk = 64;  // chunks of 64 and 36
  const double K = 8, V = 4;
  const auto load = [&](double c) {
    return c * (c - 1) * K + c * (c + 1) * K + (c * c * c - c) / 3 + c * (c + 1) * (K + V);
  };
  for (const char* name : {"delta_rule", "gated_delta_rule", "kda"}) {
    SCOPED_TRACE(name);
    const table::Operator& op = table::find(name);
    const double gated = std::string(name) == "delta_rule" ? 0.0 : 1.0;
    double forward = 0, backward = 0;
    for (double c : {64.0, 36.0}) {
      forward += load(c) + 6 * c * K * V + c * (c + 1) * V + gated * K * V;
      backward += 2 * load(c) + 14 * c * K * V + 2 * c * (c + 1) * V + c * (c + 1) * (K + V) + c * (c - 1) * (K + V) +
                  1.5 * c * (c - 1) + 4 * c * (c - 1) * K + gated * 3 * K * V;
    }
    backward += 4 * 64 * K * V + gated * K * V;  // the first chunk's state update in the backward's first sweep
    EXPECT_EQ(op.causality, table::Causality::always);
    EXPECT_DOUBLE_EQ(op.forward_flops(s), 6.0 * forward);
    EXPECT_DOUBLE_EQ(op.backward_flops(s), 6.0 * backward);
  }
  EXPECT_EQ(table::find("delta_rule").gate_dim(s), 0);
  EXPECT_EQ(table::find("gated_delta_rule").gate_dim(s), 1);
  EXPECT_EQ(table::find("kda").gate_dim(s), 8);
  // β (one column) and the gate read in the forward; read and their gradients written in the backward.
  EXPECT_DOUBLE_EQ(table::find("kda").forward_bytes(s), table::find("causal").forward_bytes(s) + 4.0 * 6 * 100 * 9);
  EXPECT_DOUBLE_EQ(table::find("delta_rule").backward_bytes(s),
                   table::find("causal").backward_bytes(s) + 2 * 4.0 * 6 * 100);
  // At the shape (C = 64, K = V = 64) the forward is about 1.9 times the decayed one.
  table::Sizes big = square(16384, 64);
  big.chunk = 64;
  const double ratio =
      table::find("gated_delta_rule").forward_flops(big) / table::find("simple_gla").forward_flops(big);
  EXPECT_NEAR(ratio, 2987328.0 / 1585152.0, 1e-3);  // per chunk and head: 2 987 328 against 1 585 152
}

// The delta rows' β: drawn once per configuration in (0, 1), the same for equal sizes; the options
// hold it (and dβ) for every copy, and refuse operands of other sizes.
TEST(OperatorTable, DeltaOptionsHoldTheirBeta) {
  table::Sizes s = square(10, 4);
  table::Options copy;
  {
    const table::Options o = table::find("gated_delta_rule").options(s);
    copy = o;
  }
  ASSERT_TRUE(copy.beta && copy.dbeta);
  ASSERT_EQ(copy.beta->size(), size_t(2 * 10 * 3));
  EXPECT_EQ(*copy.beta, *table::find("kda").options(s).beta);
  for (float b : *copy.beta) EXPECT_TRUE(b > 0.0f && b < 1.0f) << b;
  EXPECT_EQ(copy.delta.gate, DeltaGate::token);
  EXPECT_TRUE(copy.delta.qk_l2norm);
  EXPECT_EQ(table::find("kda").options(s).delta.gate, DeltaGate::key);
  std::vector<float> q(2 * 11 * 3 * 4), v(q.size()), out(q.size());
  table::Operands a;
  a.q = bnhd(q.data(), 2, 11, 3, 4), a.k = a.q, a.v = bnhd(v.data(), 2, 11, 3, 4),
  a.out = bnhd(out.data(), 2, 11, 3, 4);
  EXPECT_THROW(table::find("delta_rule").forward(a, table::find("delta_rule").options(s)), Error);
}

// Lightning's g_gamma: ALiBi's slopes, one negative log decay per head, held by the options (and
// still valid in a copy of them).
TEST(OperatorTable, LightningOptionsHoldTheirDecays) {
  table::Sizes s = square(10, 4);
  s.heads = 8;
  table::Options copy;
  {
    const table::Options o = table::find("lightning").options(s);
    copy = o;
  }
  ASSERT_EQ(copy.decayed.g_gamma.size(), 8u);
  EXPECT_EQ(copy.decayed.decay, Decay::head);
  for (size_t h = 0; h < 8; ++h) EXPECT_FLOAT_EQ(copy.decayed.g_gamma[h], -std::exp2(-float(h + 1)));
  EXPECT_EQ(table::find("gla").options(s).decayed.decay, Decay::key);
  EXPECT_EQ(table::find("simple_gla").options(s).decayed.decay, Decay::token);
  EXPECT_EQ(table::find("retention").options(s).decayed.decay, Decay::retention);
}

// The drawn log decays: logsigmoid(x) / 16, finite for any x, in (−∞, 0) and about [−0.7, 0) for
// the normals a test draws.
TEST(OperatorTable, LogDecayDraws) {
  EXPECT_FLOAT_EQ(table::log_decay_of_normal(0.0), float(-std::log(2.0) / 16));
  EXPECT_FLOAT_EQ(table::log_decay_of_normal(-40.0), -40.0f / 16);
  EXPECT_LT(table::log_decay_of_normal(40.0), 0.0f);
  EXPECT_GT(table::log_decay_of_normal(40.0), -1e-15f);
  EXPECT_TRUE(std::isfinite(table::log_decay_of_normal(1e4)) && std::isfinite(table::log_decay_of_normal(-1e4)));
  EXPECT_GT(table::log_decay_of_normal(-5.0), -0.32f);
}

// Packed test cases: three sequences (the first of one token), boundaries from 0 to N.
TEST(OperatorTable, PackedBoundaries) {
  table::Sizes s = square(97, 4);
  EXPECT_EQ(table::packed_boundaries(s), (std::vector<int64_t>{0, 1, 32, 97}));
  s.seq_q = s.seq_k = 2;
  EXPECT_EQ(table::packed_boundaries(s), (std::vector<int64_t>{0, 1, 2}));
  bool packed = false;
  for (const table::TestCase& c : table::find("gla").test_cases()) packed |= c.packed;
  EXPECT_TRUE(packed);
}

TEST(OperatorTable, PerformerHeaderIsAnAliasOfFavor) {
  const FeatureMapPtr map = favor_feature_map(16, FavorOptions{.n_features = 0, .seed = 1, .orthogonal = true});
  EXPECT_EQ(map->feature_dim(16), default_favor_features(16));
  EXPECT_EQ(as_random_feature_map(*map).kind(), "favor");
}

}  // namespace
}  // namespace linattn
