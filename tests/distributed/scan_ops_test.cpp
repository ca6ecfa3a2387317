// The scan operators and the exclusive scan (src/distributed/scan_ops.hpp, mpi_calls.hpp): rank order
// is kept for non-commutative operators, by the recursive doubling and by MPI_Exscan, forward and over
// the reversed communicator. Small integer entries keep every product exact in fp32, so the results
// must equal the sequential composition exactly.
#include "distributed/scan_ops.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <random>
#include <vector>

#include "distributed/mpi_calls.hpp"
#include "support/mpi_support.hpp"

namespace linattn::distributed::detail {
namespace {

using test::world_rank;
using test::world_size;

constexpr int64_t K = 2, V = 3, kItems = 2;

// Rank r's items: entries in {−1, 0, 1, 2} (the same on every rank, from r).
std::vector<float> items_of(int rank, int64_t floats) {
  std::mt19937_64 rng(1000 + rank);
  std::uniform_int_distribution<int> dist(-1, 2);
  std::vector<float> x(size_t(kItems * floats));
  for (float& v : x) v = float(dist(rng));
  return x;
}

// x∘y of the matrix operator on one item: (A_y A_x, A_y S_x + S_y).
std::vector<float> compose(const std::vector<float>& x, const std::vector<float>& y) {
  const int64_t item = K * K + K * V;
  std::vector<float> out(x.size());
  for (int64_t i = 0; i < kItems; ++i) {
    const float *Ax = x.data() + i * item, *Ay = y.data() + i * item;
    float* A = out.data() + i * item;
    for (int64_t r = 0; r < K; ++r) {
      for (int64_t c = 0; c < K; ++c) {
        double s = 0;
        for (int64_t j = 0; j < K; ++j) s += Ay[r * K + j] * Ax[j * K + c];
        A[r * K + c] = float(s);
      }
      for (int64_t c = 0; c < V; ++c) {
        double s = Ay[K * K + r * V + c];
        for (int64_t j = 0; j < K; ++j) s += Ay[r * K + j] * Ax[K * K + j * V + c];
        A[K * K + r * V + c] = float(s);
      }
    }
  }
  return out;
}

// The expected exclusive scan at position `rank` of the order `order` (ranks in scan order).
std::vector<float> expected(const std::vector<int>& order, int position) {
  std::vector<float> acc = items_of(order[0], K * K + K * V);
  for (int p = 1; p < position; ++p) acc = compose(acc, items_of(order[p], K * K + K * V));
  return acc;
}

void check_scan(bool use_mpi_exscan, bool reverse) {
  if (use_mpi_exscan) setenv("LINATTN_MPI_SCAN", "exscan", 1);
  const ErrorsReturn guard(MPI_COMM_WORLD);
  const ItemType type(ItemType::Kind::matrix, K, V);
  const std::vector<float> mine = items_of(world_rank(), type.floats());
  std::vector<float> got(mine.size(), -99.0f);
  const MPI_Comm comm = reverse ? reversed(MPI_COMM_WORLD) : MPI_COMM_WORLD;
  exclusive_scan(mine.data(), got.data(), int(kItems), type.type(), matrix_op(), comm);
  unsetenv("LINATTN_MPI_SCAN");
  std::vector<int> order(world_size());
  for (int r = 0; r < world_size(); ++r) order[r] = reverse ? world_size() - 1 - r : r;
  const int position = reverse ? world_size() - 1 - world_rank() : world_rank();
  if (position == 0) return;  // undefined there
  EXPECT_EQ(got, expected(order, position));
}

TEST(ExclusiveScan, RecursiveDoublingKeepsRankOrder) { check_scan(false, false); }
TEST(ExclusiveScan, MpiExscanKeepsRankOrder) { check_scan(true, false); }
TEST(ExclusiveScan, TheReversedCommunicatorScansFromTheLastRank) { check_scan(false, true); }

TEST(ExclusiveScan, SendsCeilLog2PRoundsAtMost) {
  float x = 1, y = 0;
  reset_comm_stats();
  exclusive_scan(&x, &y, 1, MPI_FLOAT, add_op(), MPI_COMM_WORLD);
  int rounds = 0;
  while ((1 << rounds) < world_size()) ++rounds;
  EXPECT_LE(comm_stats().calls, rounds);
  EXPECT_EQ(comm_stats().bytes_sent, 4 * comm_stats().calls);
  if (world_rank() > 0) {
    EXPECT_EQ(y, float(world_rank()));
  }
}

TEST(DiagonalOp, ComposesDecaysAndStatesInOrder) {
  const ItemType type(ItemType::Kind::diagonal, 1, 1);
  // (a, S) of rank r: (2, r + 1); x∘y = (a_x a_y, a_y S_x + S_y).
  const float mine[2] = {2.0f, float(world_rank() + 1)};
  float got[2] = {0, 0};
  exclusive_scan(mine, got, 1, type.type(), diagonal_op(), MPI_COMM_WORLD);
  if (world_rank() == 0) return;
  float a = 1, S = 0;
  for (int r = 0; r < world_rank(); ++r) {
    S = 2.0f * S + float(r + 1);
    a *= 2.0f;
  }
  EXPECT_EQ(got[0], a);
  EXPECT_EQ(got[1], S);
}

}  // namespace
}  // namespace linattn::distributed::detail
