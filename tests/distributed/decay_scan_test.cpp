// Distributed decayed linear attention (scan.hpp) against the single-process operator and the fp64
// oracle, for the rank count mpiexec gave (CTest runs P = 1..4).
#include <gtest/gtest.h>

#include <limits>
#include <random>
#include <string>

#include "linattn/decay.hpp"
#include "linattn/distributed/scan.hpp"
#include "linattn/error.hpp"
#include "linattn/reference.hpp"
#include "support/mpi_support.hpp"
#include "support/tensors.hpp"

namespace linattn::test {
namespace {

constexpr int64_t B = 2, N = 83, H = 2, K = 8, V = 8;
const float kGamma[H] = {-0.2f, -0.05f};

struct Inputs {
  testing::Tensor32 q, k, v, g, dout;
  int64_t gate_cols = 0;
  ConstTensorView gate() const { return gate_cols ? ConstTensorView(g.view) : ConstTensorView(); }
};

Inputs inputs(Decay decay, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Inputs in;
  in.q = testing::random_tensor({B, N, H, K}, testing::Layout::bnhd, rng);
  in.k = testing::random_tensor({B, N, H, K}, testing::Layout::bnhd, rng);
  in.v = testing::random_tensor({B, N, H, V}, testing::Layout::bnhd, rng);
  in.dout = testing::random_tensor({B, N, H, V}, testing::Layout::bnhd, rng);
  in.gate_cols = decay == Decay::token ? 1 : decay == Decay::key ? K : 0;
  if (in.gate_cols) in.g = testing::random_tensor({B, N, H, in.gate_cols}, testing::Layout::bnhd, rng, -0.3f, -0.01f);
  return in;
}

DecayedAttentionOptions options_for(Decay decay) {
  DecayedAttentionOptions options;
  options.decay = decay;
  options.chunk_size = 16;
  if (decay == Decay::head) options.g_gamma = kGamma;
  return options;
}

struct Results {
  std::vector<float> out, dq, dk, dv, dg;
};

Results distributed(const Inputs& in, const std::vector<int64_t>& offsets, const DecayedAttentionOptions& options) {
  const int r = world_rank();
  const int64_t begin = offsets[r], n = offsets[r + 1] - offsets[r];
  const int64_t gc = std::max<int64_t>(in.gate_cols, 1);
  Gathered out({B, N, H, V}), dq({B, N, H, K}), dk({B, N, H, K}), dv({B, N, H, V}), dg({B, N, H, gc});
  const ConstTensorView g = in.gate_cols ? ConstTensorView(seq_slice(in.g.view, begin, n)) : ConstTensorView();
  const TensorView dg_shard = in.gate_cols ? dg.shard(offsets, r) : TensorView();
  auto q = seq_slice(in.q.view, begin, n), k = seq_slice(in.k.view, begin, n), v = seq_slice(in.v.view, begin, n);
  distributed::decayed_attention_forward(MPI_COMM_WORLD, out.shard(offsets, r), q, k, v, g, options);
  distributed::decayed_attention_backward(MPI_COMM_WORLD, dq.shard(offsets, r), dk.shard(offsets, r),
                                          dv.shard(offsets, r), dg_shard, seq_slice(in.dout.view, begin, n), q, k, v, g,
                                          options);
  for (Gathered* x : {&out, &dq, &dk, &dv, &dg}) x->gather();
  return {out.data, dq.data, dk.data, dv.data, in.gate_cols ? dg.data : std::vector<float>()};
}

Results single(const Inputs& in, const DecayedAttentionOptions& options) {
  const int64_t gc = std::max<int64_t>(in.gate_cols, 1);
  Gathered out({B, N, H, V}), dq({B, N, H, K}), dk({B, N, H, K}), dv({B, N, H, V}), dg({B, N, H, gc});
  decayed_attention_forward(out.view, in.q.view, in.k.view, in.v.view, in.gate(), options);
  decayed_attention_backward(dq.view, dk.view, dv.view, in.gate_cols ? dg.view : TensorView(), {}, in.dout.view, {},
                             in.q.view, in.k.view, in.v.view, in.gate(), options);
  return {out.data, dq.data, dk.data, dv.data, in.gate_cols ? dg.data : std::vector<float>()};
}

struct Case {
  Decay decay;
  Split split;
};

class DistributedDecay : public ::testing::TestWithParam<Case> {};

TEST_P(DistributedDecay, MatchesTheSingleProcessOperatorAndTheOracle) {
  const Case c = GetParam();
  const DecayedAttentionOptions options = options_for(c.decay);
  const Inputs in = inputs(c.decay, 17);
  const Results got = distributed(in, offsets_of(c.split, N, world_size()), options);
  const Results want = single(in, options);
  EXPECT_LT(relative_error(got.out, want.out), 1e-5);
  EXPECT_LT(relative_error(got.dq, want.dq), 1e-5);
  EXPECT_LT(relative_error(got.dk, want.dk), 1e-5);
  EXPECT_LT(relative_error(got.dv, want.dv), 1e-5);
  if (in.gate_cols) {
    EXPECT_LT(relative_error(got.dg, want.dg), 1e-5);
  }

  const auto q = reference::to_double(in.q.view), k = reference::to_double(in.k.view),
             v = reference::to_double(in.v.view), dout = reference::to_double(in.dout.view);
  const reference::Tensor g = in.gate_cols ? reference::to_double(in.g.view) : reference::Tensor();
  const reference::Tensor* gp = in.gate_cols ? &g : nullptr;
  const auto fwd = reference::decayed_attention_forward(q, k, v, gp, options);
  const auto grads = reference::decayed_attention_backward(dout, nullptr, q, k, v, gp, options);
  EXPECT_LT(relative_error(got.out, fwd.out), 2e-5);
  EXPECT_LT(relative_error(got.dq, grads.dq), 2e-5);
  EXPECT_LT(relative_error(got.dk, grads.dk), 2e-5);
  EXPECT_LT(relative_error(got.dv, grads.dv), 2e-5);
  if (in.gate_cols) {
    EXPECT_LT(relative_error(got.dg, grads.dg), 2e-5);
  }
}

TEST_P(DistributedDecay, IsTheSameBitwiseFromRunToRun) {
  const Case c = GetParam();
  const DecayedAttentionOptions options = options_for(c.decay);
  const Inputs in = inputs(c.decay, 19);
  const auto offsets = offsets_of(c.split, N, world_size());
  const Results a = distributed(in, offsets, options), b = distributed(in, offsets, options);
  EXPECT_EQ(a.out, b.out);
  EXPECT_EQ(a.dq, b.dq);
  EXPECT_EQ(a.dk, b.dk);
  EXPECT_EQ(a.dv, b.dv);
  EXPECT_EQ(a.dg, b.dg);
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  return decay_name(info.param.decay) + "_" + split_name(info.param.split);
}

INSTANTIATE_TEST_SUITE_P(Cases, DistributedDecay,
                         ::testing::Values(Case{Decay::none, Split::uneven}, Case{Decay::retention, Split::tiny},
                                           Case{Decay::head, Split::even}, Case{Decay::token, Split::uneven},
                                           Case{Decay::token, Split::tiny}, Case{Decay::key, Split::uneven},
                                           Case{Decay::key, Split::tiny}),
                         case_name);

TEST(DistributedDecayErrors, DecaysThatDisagreeAreFoundBeforeAnyArithmetic) {
  const int last = world_size() - 1;
  if (last == 0) GTEST_SKIP() << "one rank agrees with itself";
  const Inputs in = inputs(Decay::head, 3);
  const std::vector<int64_t> offsets = even_offsets(N, world_size());
  const int r = world_rank();
  const int64_t begin = offsets[r], n = offsets[r + 1] - offsets[r];
  DecayedAttentionOptions options = options_for(Decay::head);
  const float other[H] = {-0.2f, -0.06f};
  if (r == last) options.g_gamma = other;
  Gathered out({B, N, H, V});
  std::string what;
  try {
    distributed::decayed_attention_forward(MPI_COMM_WORLD, out.shard(offsets, r), seq_slice(in.q.view, begin, n),
                                           seq_slice(in.k.view, begin, n), seq_slice(in.v.view, begin, n), {}, options);
  } catch (const Error& e) {
    what = e.what();
  }
  EXPECT_NE(what.find("rank " + std::to_string(last) + "'s options.g_gamma (hash) is "), std::string::npos) << what;
  EXPECT_EQ(out.data, std::vector<float>(out.data.size(), 0.0f)) << "no output was written";
}

::testing::AssertionResult contains(const std::string& what, const std::string& part) {
  if (what.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "\"" << what << "\" does not say \"" << part << "\"";
}

// What a shard cannot take, given alike on every rank, is refused by name before any arithmetic.
TEST(DistributedDecayErrors, WhatAShardCannotTakeIsRefusedByName) {
  const Inputs in = inputs(Decay::key, 5);
  const std::vector<int64_t> offsets = even_offsets(N, world_size());
  const int r = world_rank();
  const int64_t begin = offsets[r], n = offsets[r + 1] - offsets[r];
  auto refusal = [&](ConstTensorView g, const DecayedAttentionOptions& options) {
    Gathered out({B, N, H, V});
    std::string what;
    try {
      distributed::decayed_attention_forward(MPI_COMM_WORLD, out.shard(offsets, r), seq_slice(in.q.view, begin, n),
                                             seq_slice(in.k.view, begin, n), seq_slice(in.v.view, begin, n), g,
                                             options);
    } catch (const Error& e) {
      what = e.what();
    }
    EXPECT_EQ(out.data, std::vector<float>(out.data.size(), 0.0f)) << "no output was written";
    return what;
  };
  const ConstTensorView g = seq_slice(in.g.view, begin, n);
  const int64_t packed[] = {0, N};
  DecayedAttentionOptions options = options_for(Decay::key);
  options.cu_seqlens = packed;
  EXPECT_TRUE(contains(refusal(g, options),
                       "options.cu_seqlens has 2 entries, expected none (a shard is one piece of each "
                       "batch row)"));
  options = options_for(Decay::key);
  options.chunk_size = 0;
  EXPECT_TRUE(contains(refusal(g, options), "options.chunk_size is 0, expected ≥ 1"));
  options = options_for(Decay::key);
  options.scale = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(contains(refusal(g, options), "options.scale is nan, expected finite"));
  EXPECT_TRUE(contains(refusal(g, options_for(Decay::retention)),
                       "g is given, expected an empty view (retention has no gate tensor)"));
  EXPECT_TRUE(
      contains(refusal(g, options_for(Decay::token)), "g.extent[3] (head dim) is 8, expected 1 (a gate per token)"));
  EXPECT_TRUE(contains(refusal({}, options_for(Decay::key)), "g.extent[0] (batch) is 0, expected 2 (q's batch)"));
}

}  // namespace
}  // namespace linattn::test
