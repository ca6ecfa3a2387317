#include "support/mpi_support.hpp"

namespace linattn::test {

int world_rank() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

int world_size() {
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

std::vector<int64_t> uneven_offsets(int64_t n, int ranks) {
  const int64_t total = int64_t(ranks) * (ranks + 1) / 2;
  std::vector<int64_t> offsets(ranks + 1, 0);
  int64_t weight = 0;
  for (int r = 0; r < ranks; ++r) {
    weight += r + 1;
    offsets[r + 1] = n * weight / total;
  }
  return offsets;
}

std::vector<int64_t> even_offsets(int64_t n, int ranks) {
  std::vector<int64_t> offsets(ranks + 1, 0);
  for (int r = 0; r < ranks; ++r) offsets[r + 1] = r + 1 == ranks ? n : n / ranks * (r + 1);
  return offsets;
}

bool all_ranks(bool ok, MPI_Comm comm) {
  int mine = ok ? 1 : 0, all = 0;
  MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, comm);
  return all == 1;
}

}  // namespace linattn::test
