// The distributed delta rule (scan.hpp) against the single-process operator and the fp64 oracle, for
// the rank count mpiexec gave (CTest runs P = 1..4).
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "linattn/delta.hpp"
#include "linattn/distributed/scan.hpp"
#include "linattn/error.hpp"
#include "linattn/reference.hpp"
#include "support/mpi_support.hpp"
#include "support/tensors.hpp"

namespace linattn::test {
namespace {

constexpr int64_t B = 2, N = 83, H = 2, K = 8, V = 8;

struct Inputs {
  testing::Tensor32 q, k, v, beta, g, dout;
  int64_t gate_cols = 0;
  ConstTensorView gate() const { return gate_cols ? ConstTensorView(g.view) : ConstTensorView(); }
};

Inputs inputs(DeltaGate gate, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Inputs in;
  in.q = testing::random_tensor({B, N, H, K}, testing::Layout::bnhd, rng);
  // Keys of norm about 1 keep β k kᵀ a contraction, as the delta rule expects.
  in.k = testing::random_tensor({B, N, H, K}, testing::Layout::bnhd, rng, -0.5f, 0.5f);
  in.v = testing::random_tensor({B, N, H, V}, testing::Layout::bnhd, rng);
  in.beta = testing::random_tensor({B, N, H, 1}, testing::Layout::bnhd, rng, 0.1f, 0.9f);
  in.dout = testing::random_tensor({B, N, H, V}, testing::Layout::bnhd, rng);
  in.gate_cols = gate == DeltaGate::token ? 1 : gate == DeltaGate::key ? K : 0;
  if (in.gate_cols) in.g = testing::random_tensor({B, N, H, in.gate_cols}, testing::Layout::bnhd, rng, -0.3f, -0.01f);
  return in;
}

DeltaRuleOptions options_for(DeltaGate gate, bool l2norm) {
  DeltaRuleOptions options;
  options.gate = gate;
  options.qk_l2norm = l2norm;
  options.chunk_size = 16;
  return options;
}

struct Results {
  std::vector<float> out, dq, dk, dv, dbeta, dg;
};

Results distributed(const Inputs& in, const std::vector<int64_t>& offsets, const DeltaRuleOptions& options) {
  const int r = world_rank();
  const int64_t begin = offsets[r], n = offsets[r + 1] - offsets[r];
  const int64_t gc = std::max<int64_t>(in.gate_cols, 1);
  Gathered out({B, N, H, V}), dq({B, N, H, K}), dk({B, N, H, K}), dv({B, N, H, V}), dbeta({B, N, H, 1}),
      dg({B, N, H, gc});
  const ConstTensorView g = in.gate_cols ? ConstTensorView(seq_slice(in.g.view, begin, n)) : ConstTensorView();
  const TensorView dg_shard = in.gate_cols ? dg.shard(offsets, r) : TensorView();
  auto q = seq_slice(in.q.view, begin, n), k = seq_slice(in.k.view, begin, n), v = seq_slice(in.v.view, begin, n),
       beta = seq_slice(in.beta.view, begin, n);
  distributed::delta_rule_forward(MPI_COMM_WORLD, out.shard(offsets, r), q, k, v, beta, g, options);
  distributed::delta_rule_backward(MPI_COMM_WORLD, dq.shard(offsets, r), dk.shard(offsets, r), dv.shard(offsets, r),
                                   dbeta.shard(offsets, r), dg_shard, seq_slice(in.dout.view, begin, n), q, k, v, beta,
                                   g, options);
  for (Gathered* x : {&out, &dq, &dk, &dv, &dbeta, &dg}) x->gather();
  return {out.data, dq.data, dk.data, dv.data, dbeta.data, in.gate_cols ? dg.data : std::vector<float>()};
}

Results single(const Inputs& in, const DeltaRuleOptions& options) {
  const int64_t gc = std::max<int64_t>(in.gate_cols, 1);
  Gathered out({B, N, H, V}), dq({B, N, H, K}), dk({B, N, H, K}), dv({B, N, H, V}), dbeta({B, N, H, 1}),
      dg({B, N, H, gc});
  delta_rule_forward(out.view, in.q.view, in.k.view, in.v.view, in.beta.view, in.gate(), options);
  delta_rule_backward(dq.view, dk.view, dv.view, dbeta.view, in.gate_cols ? dg.view : TensorView(), {}, in.dout.view,
                      {}, in.q.view, in.k.view, in.v.view, in.beta.view, in.gate(), options);
  return {out.data, dq.data, dk.data, dv.data, dbeta.data, in.gate_cols ? dg.data : std::vector<float>()};
}

struct Case {
  DeltaGate gate;
  bool l2norm;
  Split split;
};

class DistributedDelta : public ::testing::TestWithParam<Case> {};

TEST_P(DistributedDelta, MatchesTheSingleProcessOperatorAndTheOracle) {
  const Case c = GetParam();
  const DeltaRuleOptions options = options_for(c.gate, c.l2norm);
  const Inputs in = inputs(c.gate, 23);
  const Results got = distributed(in, offsets_of(c.split, N, world_size()), options);
  const Results want = single(in, options);
  EXPECT_LT(relative_error(got.out, want.out), 1e-5);
  EXPECT_LT(relative_error(got.dq, want.dq), 1e-5);
  EXPECT_LT(relative_error(got.dk, want.dk), 1e-5);
  EXPECT_LT(relative_error(got.dv, want.dv), 1e-5);
  EXPECT_LT(relative_error(got.dbeta, want.dbeta), 1e-5);
  if (in.gate_cols) {
    EXPECT_LT(relative_error(got.dg, want.dg), 1e-5);
  }

  const auto q = reference::to_double(in.q.view), k = reference::to_double(in.k.view),
             v = reference::to_double(in.v.view), beta = reference::to_double(in.beta.view),
             dout = reference::to_double(in.dout.view);
  const reference::Tensor g = in.gate_cols ? reference::to_double(in.g.view) : reference::Tensor();
  const reference::Tensor* gp = in.gate_cols ? &g : nullptr;
  const auto fwd = reference::delta_rule_forward(q, k, v, beta, gp, options);
  const auto grads = reference::delta_rule_backward(dout, nullptr, q, k, v, beta, gp, options);
  EXPECT_LT(relative_error(got.out, fwd.out), 2e-5);
  EXPECT_LT(relative_error(got.dq, grads.dq), 2e-5);
  EXPECT_LT(relative_error(got.dk, grads.dk), 2e-5);
  EXPECT_LT(relative_error(got.dv, grads.dv), 2e-5);
  EXPECT_LT(relative_error(got.dbeta, grads.dbeta), 2e-5);
  if (in.gate_cols) {
    EXPECT_LT(relative_error(got.dg, grads.dg), 2e-5);
  }
}

TEST_P(DistributedDelta, IsTheSameBitwiseFromRunToRun) {
  const Case c = GetParam();
  const DeltaRuleOptions options = options_for(c.gate, c.l2norm);
  const Inputs in = inputs(c.gate, 29);
  const auto offsets = offsets_of(c.split, N, world_size());
  const Results a = distributed(in, offsets, options), b = distributed(in, offsets, options);
  EXPECT_EQ(a.out, b.out);
  EXPECT_EQ(a.dq, b.dq);
  EXPECT_EQ(a.dk, b.dk);
  EXPECT_EQ(a.dv, b.dv);
  EXPECT_EQ(a.dbeta, b.dbeta);
  EXPECT_EQ(a.dg, b.dg);
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  return delta_name(info.param.gate) + (info.param.l2norm ? "_l2norm_" : "_") + split_name(info.param.split);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, DistributedDelta,
    ::testing::Values(Case{DeltaGate::none, false, Split::uneven}, Case{DeltaGate::none, true, Split::tiny},
                      Case{DeltaGate::token, false, Split::uneven}, Case{DeltaGate::token, true, Split::even},
                      Case{DeltaGate::key, false, Split::uneven}, Case{DeltaGate::key, false, Split::tiny}),
    case_name);

TEST(DistributedDeltaErrors, ABadBetaOnOneRankIsNamedOnEveryRank) {
  const int bad = world_size() - 1;
  const Inputs in = inputs(DeltaGate::none, 3);
  const std::vector<int64_t> offsets = even_offsets(N, world_size());
  const int r = world_rank();
  const int64_t begin = offsets[r], n = offsets[r + 1] - offsets[r];
  TensorView beta = seq_slice(in.beta.view, begin, n);
  if (r == bad) beta.extent[2] = H + 1;
  Gathered out({B, N, H, V});
  std::string what;
  try {
    distributed::delta_rule_forward(MPI_COMM_WORLD, out.shard(offsets, r), seq_slice(in.q.view, begin, n),
                                    seq_slice(in.k.view, begin, n), seq_slice(in.v.view, begin, n), beta, {},
                                    options_for(DeltaGate::none, false));
  } catch (const Error& e) {
    what = e.what();
  }
  EXPECT_EQ(what, "linattn: distributed delta_rule_forward: rank " + std::to_string(bad) +
                      " failed its local checks: linattn: distributed delta_rule_forward: beta.extent[2] (heads) is 3, "
                      "expected 2 (q's heads)");
}

// A β or gate of the wrong width, alike on every rank, is refused by name before any arithmetic.
TEST(DistributedDeltaErrors, WidthsArePerTokenOrPerKeyDimension) {
  const Inputs in = inputs(DeltaGate::key, 4);
  const std::vector<int64_t> offsets = even_offsets(N, world_size());
  const int r = world_rank();
  const int64_t begin = offsets[r], n = offsets[r + 1] - offsets[r];
  auto refusal = [&](ConstTensorView beta, ConstTensorView g, DeltaGate gate) {
    Gathered out({B, N, H, V});
    std::string what;
    try {
      distributed::delta_rule_forward(MPI_COMM_WORLD, out.shard(offsets, r), seq_slice(in.q.view, begin, n),
                                      seq_slice(in.k.view, begin, n), seq_slice(in.v.view, begin, n), beta, g,
                                      options_for(gate, false));
    } catch (const Error& e) {
      what = e.what();
    }
    return what;
  };
  const ConstTensorView beta = seq_slice(in.beta.view, begin, n), g = seq_slice(in.g.view, begin, n);
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
