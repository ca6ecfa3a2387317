// The main of every tests/distributed/*_test.cpp: MPI initialised around GoogleTest. Rank 0 prints
// GoogleTest's usual output; the other ranks print only their failures, prefixed "[rank r]". Every
// rank exits with the same code (the worst over ranks), so mpiexec's status is the suite's.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>

namespace {

class RankFailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: failure\n%s\n", rank_, result.file_name() ? result.file_name() : "?",
                 result.line_number(), result.summary());
  }
  void OnTestEnd(const ::testing::TestInfo& info) override {
    if (info.result()->Failed()) {
      std::fprintf(stderr, "[rank %d] FAILED %s.%s\n", rank_, info.test_suite_name(), info.name());
    }
  }

 private:
  int rank_;
};

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  ::testing::InitGoogleTest(&argc, argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailurePrinter(rank));
  }
  int result = RUN_ALL_TESTS();
  int worst = 0;
  MPI_Allreduce(&result, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return worst;
}
