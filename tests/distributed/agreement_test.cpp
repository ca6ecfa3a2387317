// The agreement every sequence-parallel call starts with (src/distributed/agreement.hpp): shapes that
// disagree and a rank whose local checks fail are reported by every rank, naming that rank.
#include "distributed/agreement.hpp"

#include <gtest/gtest.h>

#include <string>

#include "distributed/mpi_calls.hpp"
#include "linattn/distributed/comm.hpp"
#include "linattn/error.hpp"
#include "support/mpi_support.hpp"

namespace linattn::distributed::detail {
namespace {

using test::world_rank;
using test::world_size;

Signature signature(int64_t head_dim) {
  Signature s;
  s.shared("q head dim", head_dim);
  s.own("shard length", 10 * world_rank());
  return s;
}

// The message every rank threw (empty: none threw).
std::string verdict(const Signature& s, const char* operation = "test_op") {
  try {
    agree(MPI_COMM_WORLD, operation, s);
  } catch (const Error& e) {
    return e.what();
  }
  return {};
}

TEST(Agreement, GathersEveryRanksOwnFields) {
  const Agreement table = agree(MPI_COMM_WORLD, "test_op", signature(64));
  ASSERT_EQ(table.ranks(), world_size());
  for (int r = 0; r < world_size(); ++r) {
    EXPECT_EQ(table.value(r, 0), 64);
    EXPECT_EQ(table.value(r, 1), 10 * r);
  }
}

TEST(Agreement, ASharedFieldThatDiffersNamesTheRankTheFieldAndBothValues) {
  const int last = world_size() - 1;
  if (last == 0) GTEST_SKIP() << "one rank agrees with itself";
  const std::string what = verdict(signature(world_rank() == last ? 63 : 64));
  EXPECT_EQ(what, "linattn: distributed test_op: rank " + std::to_string(last) +
                      "'s q head dim is 63, rank 0's is 64 (every rank must agree)");
}

TEST(Agreement, OwnFieldsMayDiffer) { EXPECT_EQ(verdict(signature(64)), ""); }

TEST(Agreement, ARankWhoseChecksFailIsNamedOnEveryRank) {
  const int bad = world_size() / 2;
  Signature s = signature(64);
  run_local_checks(s, [&] {
    if (world_rank() == bad) throw Error("linattn: k.extent[3] (head dim) is 63, expected 64 (q's head dim)");
  });
  EXPECT_EQ(verdict(s), "linattn: distributed test_op: rank " + std::to_string(bad) +
                            " failed its local checks: linattn: k.extent[3] (head dim) is 63, expected 64 (q's "
                            "head dim)");
}

TEST(Agreement, ThePrefixOfSeveralFailuresNamesTheLowestRank) {
  if (world_size() < 3) GTEST_SKIP() << "needs three ranks";
  Signature s = signature(64);
  if (world_rank() >= 1) s.fail("bad input on rank " + std::to_string(world_rank()));
  const std::string what = verdict(s);
  EXPECT_EQ(what, "linattn: distributed test_op: rank 1 failed its local checks (and " +
                      std::to_string(world_size() - 2) + " more rank(s) failed theirs): bad input on rank 1");
}

TEST(Agreement, ARankCallingAnotherOperationIsNamed) {
  if (world_size() < 2) GTEST_SKIP() << "needs two ranks";
  const std::string what = verdict(signature(64), world_rank() == 1 ? "other_op" : "test_op");
  EXPECT_NE(what.find("rank 1 called other_op"), std::string::npos) << what;
}

TEST(Agreement, CountsItsRecordAsTheBytesSent) {
  reset_comm_stats();
  agree(MPI_COMM_WORLD, "test_op", signature(64));
  const CommStats stats = comm_stats();
  EXPECT_EQ(stats.calls, 1);
  EXPECT_GT(stats.bytes_sent, 0);
  EXPECT_LT(stats.bytes_sent, 1024);
}

TEST(ErrorsReturn, RestoresTheCommunicatorsHandler) {
  MPI_Errhandler before = MPI_ERRHANDLER_NULL, after = MPI_ERRHANDLER_NULL;
  MPI_Comm_get_errhandler(MPI_COMM_WORLD, &before);
  {
    ErrorsReturn guard(MPI_COMM_WORLD);
    MPI_Errhandler during = MPI_ERRHANDLER_NULL;
    MPI_Comm_get_errhandler(MPI_COMM_WORLD, &during);
    EXPECT_EQ(during, MPI_ERRORS_RETURN);
    MPI_Errhandler_free(&during);
  }
  MPI_Comm_get_errhandler(MPI_COMM_WORLD, &after);
  EXPECT_EQ(after, before);
  MPI_Errhandler_free(&before);
  MPI_Errhandler_free(&after);
}

TEST(ErrorsReturn, AFailedCallBecomesAnMpiErrorNamingTheCall) {
  ErrorsReturn guard(MPI_COMM_WORLD);
  float x = 0;
  // A negative count is an error MPI reports (MPI_ERR_COUNT) instead of aborting, under the guard.
  try {
    allreduce(&x, &x, -1, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    ADD_FAILURE() << "MPI_Allreduce with count -1 returned";
  } catch (const MpiError& e) {
    EXPECT_NE(std::string(e.what()).find("MPI_Allreduce failed on rank " + std::to_string(world_rank())),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace linattn::distributed::detail
