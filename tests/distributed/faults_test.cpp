// Fault cases that end the job: run only by tests/distributed/expect_failure.sh (they are DISABLED_
// for the plain runs), which passes when mpiexec exits non-zero in time and names the rank.
#include <gtest/gtest.h>
#include <mpi.h>

#include <csignal>
#include <stdexcept>

#include "distributed/mpi_calls.hpp"
#include "support/mpi_support.hpp"

namespace linattn::distributed::detail {
namespace {

// Rank 1 dies while the others wait in a collective: mpiexec must notice and end the job.
TEST(KilledRank, DISABLED_SigkillOnRankOne) {
  ASSERT_GE(test::world_size(), 2);
  if (test::world_rank() == 1) std::raise(SIGKILL);
  MPI_Barrier(MPI_COMM_WORLD);
}

// Rank 1 throws after the agreement (inside or_abort), the others wait in a collective.
TEST(AbortingRank, DISABLED_ThrowAfterAgreement) {
  ASSERT_GE(test::world_size(), 2);
  or_abort(MPI_COMM_WORLD, "test_op", [] {
    if (test::world_rank() == 1) throw std::runtime_error("a failure in the local pass");
  });
  MPI_Barrier(MPI_COMM_WORLD);
}

}  // namespace
}  // namespace linattn::distributed::detail
