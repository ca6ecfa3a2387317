// The distributed delta rule (scan.hpp) against the single-process operator and the fp64 oracle, for
// the rank count mpiexec gave (CTest runs P = 1..4).
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "linattn/delta.hpp"
#include "linattn/distributed/scan.hpp"
#include "linattn/error.hpp"
#include "linattn/reference.hpp"
#include "support/recurrence_scan.hpp"

namespace linattn::test {
namespace {

// q, k, v, β and g (per token or per key dimension, none otherwise).
// With `group` value heads per q/k head (grouped value heads: v, β, g and dout have H · group heads).
ScanInputs inputs(DeltaGate gate, uint64_t seed, int64_t group = 1) {
  std::mt19937_64 rng(seed);
  ScanInputs in{{"q", "k", "v", "beta", "g"}, {}, {}};
  const int64_t HV = H * group;
  in.tensors.push_back(testing::random_tensor({B, N, H, K}, testing::Layout::bnhd, rng));
  // Keys of norm about 1 keep β k kᵀ a contraction, as the delta rule expects.
  in.tensors.push_back(testing::random_tensor({B, N, H, K}, testing::Layout::bnhd, rng, -0.5f, 0.5f));
  in.tensors.push_back(testing::random_tensor({B, N, HV, V}, testing::Layout::bnhd, rng));
  in.tensors.push_back(testing::random_tensor({B, N, HV, 1}, testing::Layout::bnhd, rng, 0.1f, 0.9f));
  in.dout = testing::random_tensor({B, N, HV, V}, testing::Layout::bnhd, rng);
  const int64_t gate_cols = gate == DeltaGate::token ? 1 : gate == DeltaGate::key ? K : 0;
  in.tensors.push_back(gate_cols
                           ? testing::random_tensor({B, N, HV, gate_cols}, testing::Layout::bnhd, rng, -0.3f, -0.01f)
                           : testing::Tensor32());
  return in;
}

DeltaRuleOptions options_for(DeltaGate gate, bool l2norm) {
  DeltaRuleOptions options;
  options.gate = gate;
  options.qk_l2norm = l2norm;
  options.chunk_size = 16;
  return options;
}

Results distributed(const ScanInputs& in, const std::vector<int64_t>& offsets, const DeltaRuleOptions& options) {
  return run_scan<5>(
      in, offsets,
      [&](TensorView out, const Views<5>& x) {
        distributed::delta_rule_forward(MPI_COMM_WORLD, out, x[0], x[1], x[2], x[3], x[4], options);
      },
      [&](const Grads<5>& d, ConstTensorView dout, const Views<5>& x) {
        distributed::delta_rule_backward(MPI_COMM_WORLD, d[0], d[1], d[2], d[3], d[4], dout, x[0], x[1], x[2], x[3],
                                         x[4], options);
      });
}

Results single(const ScanInputs& in, const DeltaRuleOptions& options) {
  return run_scan<5>(
      in, {},
      [&](TensorView out, const Views<5>& x) { delta_rule_forward(out, x[0], x[1], x[2], x[3], x[4], options); },
      [&](const Grads<5>& d, ConstTensorView dout, const Views<5>& x) {
        delta_rule_backward(d[0], d[1], d[2], d[3], d[4], {}, dout, {}, x[0], x[1], x[2], x[3], x[4], options);
      });
}

struct Case {
  DeltaGate gate;
  bool l2norm;
  Split split;
  int64_t group = 1;  // value heads per q/k head
};

class DistributedDelta : public ::testing::TestWithParam<Case> {};

TEST_P(DistributedDelta, MatchesTheSingleProcessOperatorAndTheOracle) {
  const Case c = GetParam();
  const DeltaRuleOptions options = options_for(c.gate, c.l2norm);
  const ScanInputs in = inputs(c.gate, 23, c.group);
  const Results got = distributed(in, offsets_of(c.split, N, world_size()), options);
  expect_close(in, got, single(in, options), 1e-5);

  const Oracle o(in);
  const auto& t = o.tensors;
  const auto fwd = reference::delta_rule_forward(t[0], t[1], t[2], t[3], o.ptr(4), options);
  const auto grads = reference::delta_rule_backward(o.dout, nullptr, t[0], t[1], t[2], t[3], o.ptr(4), options);
  expect_close(in, got, {&fwd.out, &grads.dq, &grads.dk, &grads.dv, &grads.dbeta, o.ptr(4) ? &grads.dg : nullptr},
               2e-5);
}

TEST_P(DistributedDelta, IsTheSameBitwiseFromRunToRun) {
  const Case c = GetParam();
  const DeltaRuleOptions options = options_for(c.gate, c.l2norm);
  const ScanInputs in = inputs(c.gate, 29, c.group);
  const auto offsets = offsets_of(c.split, N, world_size());
  EXPECT_EQ(distributed(in, offsets, options), distributed(in, offsets, options));
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  const int64_t group = info.param.group;
  return delta_name(info.param.gate) + (info.param.l2norm ? "_l2norm_" : "_") + split_name(info.param.split) +
         (group > 1 ? "_grouped" + std::to_string(group) : "");
}

INSTANTIATE_TEST_SUITE_P(
    Cases, DistributedDelta,
    ::testing::Values(Case{DeltaGate::none, false, Split::uneven}, Case{DeltaGate::none, true, Split::tiny},
                      Case{DeltaGate::token, false, Split::uneven}, Case{DeltaGate::token, true, Split::even},
                      Case{DeltaGate::key, false, Split::uneven}, Case{DeltaGate::key, false, Split::tiny},
                      Case{DeltaGate::none, false, Split::uneven, 2}, Case{DeltaGate::token, true, Split::even, 2},
                      Case{DeltaGate::key, false, Split::tiny, 3}),
    case_name);

TEST(DistributedDeltaErrors, ABadBetaOnOneRankIsNamedOnEveryRank) {
  const int bad = world_size() - 1;
  const ScanInputs in = inputs(DeltaGate::none, 3);
  const std::vector<int64_t> offsets = even_offsets(N, world_size());
  const int r = world_rank();
  const int64_t begin = offsets[r], n = offsets[r + 1] - offsets[r];
  ConstTensorView beta = shard(in, 3, begin, n);
  if (r == bad) beta.extent[2] = H + 1;
  Gathered out({B, N, H, V});
  const std::string what = error_of([&] {
    distributed::delta_rule_forward(MPI_COMM_WORLD, out.shard(offsets, r), shard(in, 0, begin, n),
                                    shard(in, 1, begin, n), shard(in, 2, begin, n), beta, {},
                                    options_for(DeltaGate::none, false));
  });
  EXPECT_EQ(what, "linattn: distributed delta_rule_forward: rank " + std::to_string(bad) +
                      " failed its local checks: linattn: distributed delta_rule_forward: beta.extent[2] (heads) is 3, "
                      "expected 2 (q's heads)");
}

// A β or gate of the wrong width, alike on every rank, is refused by name before any arithmetic.
TEST(DistributedDeltaErrors, WidthsArePerTokenOrPerKeyDimension) {
  const ScanInputs in = inputs(DeltaGate::key, 4);
  const std::vector<int64_t> offsets = even_offsets(N, world_size());
  const int r = world_rank();
  const int64_t begin = offsets[r], n = offsets[r + 1] - offsets[r];
  auto refusal = [&](ConstTensorView beta, ConstTensorView g, DeltaGate gate) {
    Gathered out({B, N, H, V});
    return error_of([&] {
      distributed::delta_rule_forward(MPI_COMM_WORLD, out.shard(offsets, r), shard(in, 0, begin, n),
                                      shard(in, 1, begin, n), shard(in, 2, begin, n), beta, g,
                                      options_for(gate, false));
    });
  };
  const ConstTensorView beta = shard(in, 3, begin, n), g = shard(in, 4, begin, n);
  // The per-key gate (K columns) where β (one column) is expected.
  EXPECT_NE(refusal(g, g, DeltaGate::key).find("beta.extent[3] (head dim) is 8, expected 1 (one β per token)"),
            std::string::npos);
  EXPECT_NE(refusal(beta, g, DeltaGate::token).find("g.extent[3] (head dim) is 8, expected 1 (a gate per token)"),
            std::string::npos);
  EXPECT_NE(refusal(beta, beta, DeltaGate::key).find("g.extent[3] (head dim) is 1, expected 8 (q's head dim)"),
            std::string::npos);
  EXPECT_NE(refusal(beta, g, DeltaGate::none).find("g is given, expected an empty view (DeltaNet has no gate)"),
            std::string::npos);
}

}  // namespace
}  // namespace linattn::test
