// Distributed decayed linear attention (scan.hpp) against the single-process operator and the fp64
// oracle, for the rank count mpiexec gave (CTest runs P = 1..4).
#include <gtest/gtest.h>

#include <limits>
#include <random>
#include <span>
#include <string>

#include "linattn/decay.hpp"
#include "linattn/distributed/scan.hpp"
#include "linattn/error.hpp"
#include "linattn/reference.hpp"
#include "support/recurrence_scan.hpp"

namespace linattn::test {
namespace {

// One fixed decay per value head (up to 3 value heads per q/k head).
const float kGamma[3 * H] = {-0.2f, -0.05f, -0.1f, -0.3f, -0.02f, -0.15f};

// q, k [B, N, H, K], v and g (per token or per key dimension, none otherwise) with `group` value heads per
// q/k head.
ScanInputs inputs(Decay decay, uint64_t seed, int64_t group = 1) {
  std::mt19937_64 rng(seed);
  ScanInputs in{{"q", "k", "v", "g"}, {}, {}};
  const int64_t HV = H * group;
  for (int64_t cols : {K, K}) in.tensors.push_back(testing::random_tensor({B, N, H, cols}, testing::Layout::bnhd, rng));
  in.tensors.push_back(testing::random_tensor({B, N, HV, V}, testing::Layout::bnhd, rng));
  in.dout = testing::random_tensor({B, N, HV, V}, testing::Layout::bnhd, rng);
  const int64_t gate_cols = decay == Decay::token ? 1 : decay == Decay::key ? K : 0;
  in.tensors.push_back(gate_cols
                           ? testing::random_tensor({B, N, HV, gate_cols}, testing::Layout::bnhd, rng, -0.3f, -0.01f)
                           : testing::Tensor32());
  return in;
}

DecayedAttentionOptions options_for(Decay decay, int64_t group = 1) {
  DecayedAttentionOptions options;
  options.decay = decay;
  options.chunk_size = 16;
  if (decay == Decay::head) options.g_gamma = std::span<const float>(kGamma, size_t(H * group));
  return options;
}

Results distributed(const ScanInputs& in, const std::vector<int64_t>& offsets, const DecayedAttentionOptions& options) {
  return run_scan<4>(
      in, offsets,
      [&](TensorView out, const Views<4>& x) {
        distributed::decayed_attention_forward(MPI_COMM_WORLD, out, x[0], x[1], x[2], x[3], options);
      },
      [&](const Grads<4>& d, ConstTensorView dout, const Views<4>& x) {
        distributed::decayed_attention_backward(MPI_COMM_WORLD, d[0], d[1], d[2], d[3], dout, x[0], x[1], x[2], x[3],
                                                options);
      });
}

Results single(const ScanInputs& in, const DecayedAttentionOptions& options) {
  return run_scan<4>(
      in, {},
      [&](TensorView out, const Views<4>& x) { decayed_attention_forward(out, x[0], x[1], x[2], x[3], options); },
      [&](const Grads<4>& d, ConstTensorView dout, const Views<4>& x) {
        decayed_attention_backward(d[0], d[1], d[2], d[3], {}, dout, {}, x[0], x[1], x[2], x[3], options);
      });
}

struct Case {
  Decay decay;
  Split split;
  int64_t group = 1;  // value heads per q/k head
};

class DistributedDecay : public ::testing::TestWithParam<Case> {};

TEST_P(DistributedDecay, MatchesTheSingleProcessOperatorAndTheOracle) {
  const Case c = GetParam();
  const DecayedAttentionOptions options = options_for(c.decay, c.group);
  const ScanInputs in = inputs(c.decay, 17, c.group);
  const Results got = distributed(in, offsets_of(c.split, N, world_size()), options);
  expect_close(in, got, single(in, options), 1e-5);

  const Oracle o(in);
  const auto fwd = reference::decayed_attention_forward(o.tensors[0], o.tensors[1], o.tensors[2], o.ptr(3), options);
  const auto grads = reference::decayed_attention_backward(o.dout, nullptr, o.tensors[0], o.tensors[1], o.tensors[2],
                                                           o.ptr(3), options);
  expect_close(in, got, {&fwd.out, &grads.dq, &grads.dk, &grads.dv, o.ptr(3) ? &grads.dg : nullptr}, 2e-5);
}

TEST_P(DistributedDecay, IsTheSameBitwiseFromRunToRun) {
  const Case c = GetParam();
  const DecayedAttentionOptions options = options_for(c.decay, c.group);
  const ScanInputs in = inputs(c.decay, 19, c.group);
  const auto offsets = offsets_of(c.split, N, world_size());
  EXPECT_EQ(distributed(in, offsets, options), distributed(in, offsets, options));
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  const int64_t group = info.param.group;
  return decay_name(info.param.decay) + "_" + split_name(info.param.split) +
         (group > 1 ? "_grouped" + std::to_string(group) : "");
}

INSTANTIATE_TEST_SUITE_P(Cases, DistributedDecay,
                         ::testing::Values(Case{Decay::none, Split::uneven}, Case{Decay::retention, Split::tiny},
                                           Case{Decay::head, Split::even}, Case{Decay::token, Split::uneven},
                                           Case{Decay::token, Split::tiny}, Case{Decay::key, Split::uneven},
                                           Case{Decay::key, Split::tiny}, Case{Decay::token, Split::uneven, 2},
                                           Case{Decay::key, Split::tiny, 3}, Case{Decay::head, Split::even, 2},
                                           Case{Decay::retention, Split::uneven, 2}),
                         case_name);

TEST(DistributedDecayErrors, DecaysThatDisagreeAreFoundBeforeAnyArithmetic) {
  const int last = world_size() - 1;
  if (last == 0) GTEST_SKIP() << "one rank agrees with itself";
  const ScanInputs in = inputs(Decay::head, 3);
  const std::vector<int64_t> offsets = even_offsets(N, world_size());
  const int r = world_rank();
  const int64_t begin = offsets[r], n = offsets[r + 1] - offsets[r];
  DecayedAttentionOptions options = options_for(Decay::head);
  const float other[H] = {-0.2f, -0.06f};
  if (r == last) options.g_gamma = other;
  Gathered out({B, N, H, V});
  const std::string what = error_of([&] {
    distributed::decayed_attention_forward(MPI_COMM_WORLD, out.shard(offsets, r), shard(in, 0, begin, n),
                                           shard(in, 1, begin, n), shard(in, 2, begin, n), {}, options);
  });
  EXPECT_NE(what.find("rank " + std::to_string(last) + "'s options.g_gamma (hash) is "), std::string::npos) << what;
  EXPECT_EQ(out.data, std::vector<float>(out.data.size(), 0.0f)) << "no output was written";
}

::testing::AssertionResult contains(const std::string& what, const std::string& part) {
  if (what.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "\"" << what << "\" does not say \"" << part << "\"";
}

// What a shard cannot take, given alike on every rank, is refused by name before any arithmetic.
TEST(DistributedDecayErrors, WhatAShardCannotTakeIsRefusedByName) {
  const ScanInputs in = inputs(Decay::key, 5);
  const std::vector<int64_t> offsets = even_offsets(N, world_size());
  const int r = world_rank();
  const int64_t begin = offsets[r], n = offsets[r + 1] - offsets[r];
  auto refusal = [&](ConstTensorView g, const DecayedAttentionOptions& options) {
    Gathered out({B, N, H, V});
    const std::string what = error_of([&] {
      distributed::decayed_attention_forward(MPI_COMM_WORLD, out.shard(offsets, r), shard(in, 0, begin, n),
                                             shard(in, 1, begin, n), shard(in, 2, begin, n), g, options);
    });
    EXPECT_EQ(out.data, std::vector<float>(out.data.size(), 0.0f)) << "no output was written";
    return what;
  };
  const ConstTensorView g = shard(in, 3, begin, n);
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

// Grouped value heads: v's heads a multiple of q's, and g and g_gamma per value head, or refused by name.
TEST(DistributedDecayErrors, ValueHeadsAreAMultipleOfQueryHeads) {
  const ScanInputs in = inputs(Decay::token, 6, 2);
  const std::vector<int64_t> offsets = even_offsets(N, world_size());
  const int r = world_rank();
  const int64_t begin = offsets[r], n = offsets[r + 1] - offsets[r];
  auto refusal = [&](ConstTensorView v, ConstTensorView g, const DecayedAttentionOptions& options) {
    Gathered out({B, N, v.extent[2], V});
    return error_of([&] {
      distributed::decayed_attention_forward(MPI_COMM_WORLD, out.shard(offsets, r), shard(in, 0, begin, n),
                                             shard(in, 1, begin, n), v, g, options);
    });
  };
  ConstTensorView v = shard(in, 2, begin, n), g = shard(in, 3, begin, n);
  ConstTensorView v3 = v, g3 = g;
  v3.extent[2] = g3.extent[2] = 3;
  EXPECT_TRUE(contains(refusal(v3, g3, options_for(Decay::token)),
                       "v.extent[2] (heads) is 3, expected a multiple of 2 (q's heads: grouped value heads)"));
  ConstTensorView g2 = g;
  g2.extent[2] = 2;
  EXPECT_TRUE(contains(refusal(v, g2, options_for(Decay::token)), "g.extent[2] (heads) is 2, expected 4 (v's heads)"));
  EXPECT_TRUE(
      contains(refusal(v, {}, options_for(Decay::head)), "options.g_gamma has 2 entries, expected 4 (v's heads)"));
}

}  // namespace
}  // namespace linattn::test
