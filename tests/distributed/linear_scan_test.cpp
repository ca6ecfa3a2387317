// Distributed linear attention (include/linattn/distributed/scan.hpp) against the single-process
// operator and the fp64 oracle, for the rank count mpiexec gave (CTest runs P = 1..4).
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>

#include "linattn/distributed/scan.hpp"
#include "linattn/error.hpp"
#include "linattn/linear_attention.hpp"
#include "linattn/reference.hpp"
#include "support/mpi_support.hpp"
#include "support/tensors.hpp"

namespace linattn::test {
namespace {

constexpr int64_t B = 2, N = 77, H = 2, D = 8, E = 8;

struct Inputs {
  testing::Tensor32 q, k, v, dout;
};

// Head dims d (q, k) and e (v, out); the defaults D and E unless given.
Inputs inputs(uint64_t seed, int64_t d = D, int64_t e = E) {
  std::mt19937_64 rng(seed);  // the same on every rank
  Inputs in;
  in.q = testing::random_tensor({B, N, H, d}, testing::Layout::bnhd, rng);
  in.k = testing::random_tensor({B, N, H, d}, testing::Layout::bnhd, rng);
  in.v = testing::random_tensor({B, N, H, e}, testing::Layout::bnhd, rng);
  in.dout = testing::random_tensor({B, N, H, e}, testing::Layout::bnhd, rng);
  return in;
}

struct Results {
  std::vector<float> out, dq, dk, dv;
};

// The distributed forward and backward over the shards of `offsets`, gathered on every rank.
Results distributed(const Inputs& in, const std::vector<int64_t>& offsets, const LinearAttentionOptions& options) {
  const int r = world_rank();
  const int64_t begin = offsets[r], n = offsets[r + 1] - offsets[r], d = in.q.view.dim(), e = in.v.view.dim();
  Gathered out({B, N, H, e}), dq({B, N, H, d}), dk({B, N, H, d}), dv({B, N, H, e});
  distributed::linear_attention_forward(MPI_COMM_WORLD, out.shard(offsets, r), seq_slice(in.q.view, begin, n),
                                        seq_slice(in.k.view, begin, n), seq_slice(in.v.view, begin, n), options);
  distributed::linear_attention_backward(MPI_COMM_WORLD, dq.shard(offsets, r), dk.shard(offsets, r),
                                         dv.shard(offsets, r), seq_slice(in.dout.view, begin, n),
                                         seq_slice(in.q.view, begin, n), seq_slice(in.k.view, begin, n),
                                         seq_slice(in.v.view, begin, n), options);
  out.gather();
  dq.gather();
  dk.gather();
  dv.gather();
  return {out.data, dq.data, dk.data, dv.data};
}

Results single(const Inputs& in, const LinearAttentionOptions& options) {
  const int64_t d = in.q.view.dim(), e = in.v.view.dim();
  Gathered out({B, N, H, e}), dq({B, N, H, d}), dk({B, N, H, d}), dv({B, N, H, e});
  linear_attention_forward(out.view, in.q.view, in.k.view, in.v.view, options);
  linear_attention_backward(dq.view, dk.view, dv.view, in.dout.view, in.q.view, in.k.view, in.v.view, options);
  return {out.data, dq.data, dk.data, dv.data};
}

struct Case {
  bool causal;
  bool normalize;
  const char* map;
  Split split;
  // Head dims: 8 takes the local passes' gathered φ; a multiple of 16 (kernels::kPad) their fused
  // one (φ and its sums straight from the rows), which the built-in maps take at D = 64 in practice.
  int64_t d = D, e = E;
};

class DistributedLinear : public ::testing::TestWithParam<Case> {};

TEST_P(DistributedLinear, MatchesTheSingleProcessOperatorAndTheOracle) {
  const Case c = GetParam();
  LinearAttentionOptions options;
  options.causal = c.causal;
  options.normalize = c.normalize;
  options.feature_map = feature_map_by_name(c.map);
  options.chunk_size = 16;
  const Inputs in = inputs(7, c.d, c.e);
  const std::vector<int64_t> offsets = offsets_of(c.split, N, world_size());
  const Results got = distributed(in, offsets, options);
  const Results want = single(in, options);
  EXPECT_LT(relative_error(got.out, want.out), 2e-6);
  EXPECT_LT(relative_error(got.dq, want.dq), 2e-6);
  EXPECT_LT(relative_error(got.dk, want.dk), 2e-6);
  EXPECT_LT(relative_error(got.dv, want.dv), 2e-6);

  const auto q = reference::to_double(in.q.view), k = reference::to_double(in.k.view),
             v = reference::to_double(in.v.view), dout = reference::to_double(in.dout.view);
  const reference::Tensor out = reference::linear_attention_forward(q, k, v, options);
  const reference::Gradients grads = reference::linear_attention_backward(dout, q, k, v, options);
  EXPECT_LT(relative_error(got.out, out), 1e-5);
  EXPECT_LT(relative_error(got.dq, grads.dq), 1e-5);
  EXPECT_LT(relative_error(got.dk, grads.dk), 1e-5);
  EXPECT_LT(relative_error(got.dv, grads.dv), 1e-5);
}

TEST_P(DistributedLinear, IsTheSameBitwiseFromRunToRun) {
  const Case c = GetParam();
  LinearAttentionOptions options;
  options.causal = c.causal;
  options.normalize = c.normalize;
  options.feature_map = feature_map_by_name(c.map);
  const Inputs in = inputs(11, c.d, c.e);
  const std::vector<int64_t> offsets = offsets_of(c.split, N, world_size());
  const Results a = distributed(in, offsets, options), b = distributed(in, offsets, options);
  EXPECT_EQ(a.out, b.out);
  EXPECT_EQ(a.dq, b.dq);
  EXPECT_EQ(a.dk, b.dk);
  EXPECT_EQ(a.dv, b.dv);
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  return std::string(c.causal ? "causal" : "noncausal") + (c.normalize ? "" : "_unnormalized") + "_" + c.map + "_" +
         split_name(c.split) + (c.d == D && c.e == E ? "" : "_d" + std::to_string(c.d) + "_e" + std::to_string(c.e));
}

INSTANTIATE_TEST_SUITE_P(
    Cases, DistributedLinear,
    ::testing::Values(Case{true, true, "elu", Split::uneven}, Case{true, true, "elu", Split::tiny},
                      Case{true, true, "relu", Split::even}, Case{true, false, "identity", Split::uneven},
                      Case{false, true, "elu", Split::uneven}, Case{false, true, "elu", Split::tiny},
                      Case{false, false, "relu", Split::even}, Case{true, true, "elu", Split::uneven, 16, 9},
                      Case{true, false, "relu", Split::tiny, 32, 16}, Case{false, true, "elu", Split::uneven, 16, 9},
                      Case{false, false, "identity", Split::tiny, 32, 16}, Case{true, true, "elu", Split::balanced},
                      Case{true, true, "elu", Split::short_last, 16, 9}, Case{true, false, "relu", Split::short_last},
                      Case{true, true, "relu", Split::balanced, 32, 16}),
    case_name);

// The exception every rank threw (empty: none).
template <class F>
std::string thrown(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return {};
}

TEST(CausalShardLengths, AddUpToNAndGiveTheLastRankMore) {
  for (const int ranks : {1, 2, 3, 4, 7})
    for (const int64_t n : {0, 1, 5, 77, 1048576}) {
      const std::vector<int64_t> lengths = distributed::causal_shard_lengths(n, ranks);
      ASSERT_EQ(lengths.size(), size_t(ranks));
      int64_t total = 0;
      for (const int64_t length : lengths) {
        EXPECT_GE(length, 0);
        total += length;
      }
      EXPECT_EQ(total, n) << ranks << " ranks";
      for (int r = 0; r + 1 < ranks; ++r) EXPECT_EQ(lengths[size_t(r)], lengths[0]);
      EXPECT_GE(lengths.back(), lengths[0]);
    }
  // N = 1M over 2 ranks with s = kCausalSumsPerPass, c = kCausalFinishPerPass: n0 = N / (2 + s − c·s).
  const std::vector<int64_t> two = distributed::causal_shard_lengths(1048576, 2);
  const double s = distributed::kCausalSumsPerPass, c = distributed::kCausalFinishPerPass;
  EXPECT_NEAR(double(two[1]) / double(two[0]), 1 + s - c * s, 1e-5);
  // Even shards when the sums cost nothing.
  EXPECT_EQ(distributed::causal_shard_lengths(100, 4, 0.0, 0.5), (std::vector<int64_t>{25, 25, 25, 25}));
}

TEST(CausalShardLengths, BadArgumentsAreNamed) {
  EXPECT_NE(thrown([] { distributed::causal_shard_lengths(-1, 2); }).find("N is -1"), std::string::npos);
  EXPECT_NE(thrown([] { distributed::causal_shard_lengths(10, 0); }).find("ranks is 0"), std::string::npos);
  EXPECT_NE(thrown([] { distributed::causal_shard_lengths(10, 2, 1.5); }).find("sums_per_pass is 1.5"),
            std::string::npos);
  EXPECT_NE(thrown([] { distributed::causal_shard_lengths(10, 2, 0.4, -1); }).find("finish_per_pass is -1"),
            std::string::npos);
}

TEST(DistributedLinearErrors, AShapeThatDisagreesIsFoundBeforeAnyArithmetic) {
  const int last = world_size() - 1;
  if (last == 0) GTEST_SKIP() << "one rank agrees with itself";
  const Inputs in = inputs(3);
  const std::vector<int64_t> offsets = even_offsets(N, world_size());
  const int r = world_rank();
  const int64_t begin = offsets[r], n = offsets[r + 1] - offsets[r];
  // The last rank sees one head fewer: its shard is valid by itself, but not with the others'.
  const int64_t heads = r == last ? H - 1 : H;
  TensorView q = seq_slice(in.q.view, begin, n), k = seq_slice(in.k.view, begin, n), v = seq_slice(in.v.view, begin, n);
  q.extent[2] = k.extent[2] = v.extent[2] = heads;
  std::vector<float> out(size_t(B * n * H * E), -7.0f);
  distributed::reset_comm_stats();
  LinearAttentionOptions options;
  options.causal = true;
  const std::string what = thrown([&] {
    distributed::linear_attention_forward(MPI_COMM_WORLD, bnhd(out.data(), B, n, heads, E), q, k, v, options);
  });
  EXPECT_EQ(what, "linattn: distributed linear_attention_forward: rank " + std::to_string(last) +
                      "'s heads is 1, rank 0's is 2 (every rank must agree)");
  EXPECT_EQ(distributed::comm_stats().calls, 1) << "only the agreement ran";
  EXPECT_EQ(out, std::vector<float>(out.size(), -7.0f)) << "no output was written";
}

TEST(DistributedLinearErrors, ABadInputOnOneRankIsNamedOnEveryRank) {
  const int bad = world_size() / 2;
  const Inputs in = inputs(3);
  const std::vector<int64_t> offsets = even_offsets(N, world_size());
  const int r = world_rank();
  const int64_t begin = offsets[r], n = offsets[r + 1] - offsets[r];
  TensorView k = seq_slice(in.k.view, begin, n);
  if (r == bad) k.extent[3] = D - 1;
  Gathered out({B, N, H, E});
  LinearAttentionOptions options;
  options.causal = true;
  const std::string what = thrown([&] {
    distributed::linear_attention_forward(MPI_COMM_WORLD, out.shard(offsets, r), seq_slice(in.q.view, begin, n), k,
                                          seq_slice(in.v.view, begin, n), options);
  });
  EXPECT_EQ(what, "linattn: distributed linear_attention_forward: rank " + std::to_string(bad) +
                      " failed its local checks: linattn: distributed linear_attention_forward: k.extent[3] (head "
                      "dim) is 7, expected 8 (q's head dim)");
}

TEST(DistributedLinearBytes, TheStateIsAllThatTravelsWhateverTheShardLength) {
  LinearAttentionOptions options;
  options.causal = true;
  std::vector<int64_t> bytes;
  for (int64_t n : {8, 64}) {
    std::mt19937_64 rng(5);
    auto q = testing::random_tensor({B, n, H, D}, testing::Layout::bnhd, rng);
    auto k = testing::random_tensor({B, n, H, D}, testing::Layout::bnhd, rng);
    auto v = testing::random_tensor({B, n, H, E}, testing::Layout::bnhd, rng);
    std::vector<float> out(size_t(B * n * H * E));
    distributed::linear_attention_forward(MPI_COMM_WORLD, bnhd(out.data(), B, n, H, E), q.view, k.view, v.view,
                                          options);  // warm: the first call may create cached objects
    distributed::reset_comm_stats();
    distributed::linear_attention_forward(MPI_COMM_WORLD, bnhd(out.data(), B, n, H, E), q.view, k.view, v.view,
                                          options);
    bytes.push_back(distributed::comm_stats().bytes_sent);
  }
  EXPECT_EQ(bytes[0], bytes[1]);
  // The agreement's 720-byte record, and one (S, z) state, B·H·(D·E + D) floats, per round of the
  // recursive doubling in which this rank has a partner (⌈log₂ P⌉ at most).
  int rounds = 0;
  for (int mask = 1; mask < world_size(); mask <<= 1) rounds += (world_rank() ^ mask) < world_size() ? 1 : 0;
  EXPECT_EQ(bytes[1], 720 + rounds * B * H * (D * E + D) * 4);
}

}  // namespace
}  // namespace linattn::test
