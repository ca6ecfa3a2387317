// The operator table's mamba2 and rwkv7 rows (table/recurrence_rows.hpp) beyond what the oracle sweep and
// the finite-difference checks read: the gradients their backward writes into the options (mamba2's dA, dD,
// ddt_bias; rwkv7's da, db) against the fp64 oracle, the groups of B and C, and the flop models.
#include "recurrence_rows.hpp"

#include <gtest/gtest.h>

#include <random>
#include <string>

#include "linattn/error.hpp"
#include "operator_table.hpp"
#include "support/table_case.hpp"
#include "support/tensors.hpp"

namespace linattn {
namespace {

using testing::relative_error;

table::TestCase mamba2_case(int64_t groups, table::Storage storage) {
  table::TestCase c;
  c.sizes.batch = 2, c.sizes.seq_q = c.sizes.seq_k = 97, c.sizes.heads = 6, c.sizes.dim = 7, c.sizes.value_dim = 5;
  c.sizes.groups = groups, c.sizes.chunk = 17;
  c.storage = storage;
  return c;
}

// dA, dD and ddt_bias (sums over every token) against the oracle's, for one group, three and one per head.
TEST(RecurrenceRows, Mamba2ParameterGradientsMatchTheOracle) {
  const table::Operator& op = table::find("mamba2");
  std::mt19937_64 rng(7);
  for (int64_t groups : {1, 3, 6}) {
    SCOPED_TRACE(groups);
    const auto run = testing::make_run(op, mamba2_case(groups, table::Storage::padded), rng);
    op.forward(run->operands(), run->options);
    op.backward(run->operands(), run->options);
    const table::OracleInputs in = run->oracle_inputs();
    const table::detail::Mamba2ParameterGradients want =
        table::detail::mamba2_oracle_parameter_gradients(in, run->options);
    EXPECT_LT(relative_error(*run->options.dA, want.dA), 1e-5);
    EXPECT_LT(relative_error(*run->options.dD, want.dD), 1e-5);
    EXPECT_LT(relative_error(*run->options.ddt_bias, want.ddt_bias), 1e-5);
    // The heads past G are not read: their dq and dk (dC, dB) are zero.
    for (int64_t h = groups; h < 6; ++h) EXPECT_EQ(run->dq.view(1, 50, h, 3), 0.0f);
  }
}

// G groups give what every head reading its group's copy gives: the oracle with C and B repeated.
TEST(RecurrenceRows, Mamba2GroupsAreSharedByTheirHeads) {
  const table::Operator& op = table::find("mamba2");
  std::mt19937_64 rng(8);
  const auto grouped = testing::make_run(op, mamba2_case(2, table::Storage::bnhd), rng);
  op.forward(grouped->operands(), grouped->options);
  const auto each = testing::make_run(op, mamba2_case(6, table::Storage::bnhd), rng);
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t n = 0; n < 97; ++n)
      for (int64_t h = 0; h < 6; ++h) {
        for (int64_t d = 0; d < 7; ++d) {
          each->q.view(b, n, h, d) = grouped->q.view(b, n, h / 3, d);
          each->k.view(b, n, h, d) = grouped->k.view(b, n, h / 3, d);
        }
        for (int64_t p = 0; p < 5; ++p) each->v.view(b, n, h, p) = grouped->v.view(b, n, h, p);
        each->g.view(b, n, h, 0) = grouped->g.view(b, n, h, 0);
      }
  op.forward(each->operands(), each->options);
  EXPECT_LT(relative_error(grouped->out.view, reference::to_double(each->out.view)), 1e-6);
}

TEST(RecurrenceRows, Mamba2RefusesGroupsThatDoNotDivideHeads) {
  table::Sizes s = mamba2_case(4, table::Storage::bnhd).sizes;
  try {
    table::find("mamba2").options(s);
    FAIL() << "groups 4 of 6 heads accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("groups is 4, expected a divisor of heads = 6"), std::string::npos)
        << e.what();
  }
}

// da and db against the DPLR oracle on the row's own a and b.
TEST(RecurrenceRows, Rwkv7LowRankGradientsMatchTheOracle) {
  const table::Operator& op = table::find("rwkv7");
  table::TestCase c;
  c.sizes.batch = 2, c.sizes.seq_q = c.sizes.seq_k = 65, c.sizes.heads = 3, c.sizes.dim = 5, c.sizes.value_dim = 7;
  c.storage = table::Storage::bhnd;
  std::mt19937_64 rng(9);
  const auto run = testing::make_run(op, c, rng);
  op.backward(run->operands(), run->options);
  const table::OracleInputs in = run->oracle_inputs();
  reference::Tensor a({2, 65, 3, 5}), b({2, 65, 3, 5});
  std::copy(run->options.a->begin(), run->options.a->end(), a.data.begin());
  std::copy(run->options.b->begin(), run->options.b->end(), b.data.begin());
  const reference::DplrGradients want =
      reference::dplr_delta_rule_backward(in.dout, nullptr, in.q, in.k, in.v, a, b, in.g, run->options.dplr);
  EXPECT_LT(relative_error(*run->options.da, want.da.data), 1e-5);
  EXPECT_LT(relative_error(*run->options.db, want.db.data), 1e-5);
}

// mamba2 counts the decayed chunked algorithm (K = N, V = P) and its elementwise work; rwkv7 9·K·V a token
// and head forward, 35·K·V backward.
TEST(RecurrenceRows, FlopModels) {
  table::Sizes s;
  s.batch = 1, s.seq_q = s.seq_k = 16384, s.heads = 32, s.dim = 128, s.value_dim = 64, s.chunk = 64, s.groups = 8;
  const double tokens = 16384.0 * 32;
  EXPECT_DOUBLE_EQ(table::find("mamba2").forward_flops(s),
                   table::detail::decayed_forward_count(s) + tokens * (3 * 64 + 4));
  EXPECT_DOUBLE_EQ(table::find("mamba2").backward_flops(s),
                   table::detail::decayed_backward_count(s) + tokens * (8 * 64 + 13) + 16384.0 * 2 * (32 - 8) * 128);
  // The decayed count is the simple_gla row's at the same sizes.
  EXPECT_DOUBLE_EQ(table::detail::decayed_forward_count(s), table::find("simple_gla").forward_flops(s));
  s.batch = 4, s.heads = 8, s.dim = s.value_dim = 64;
  EXPECT_DOUBLE_EQ(table::find("rwkv7").forward_flops(s), 9.0 * 4 * 8 * 16384 * 64 * 64);
  EXPECT_DOUBLE_EQ(table::find("rwkv7").backward_flops(s), 35.0 * 4 * 8 * 16384 * 64 * 64);
}

}  // namespace
}  // namespace linattn
