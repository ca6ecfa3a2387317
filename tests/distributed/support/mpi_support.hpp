#pragma once
// Helpers of the sequence-parallel tests: this rank, the shard split of a sequence, and the
// collection of every rank's verdict (so that a check that fails on one rank fails on all).
#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

namespace linattn::test {

int world_rank();
int world_size();

// Shard boundaries of a sequence of n tokens over the ranks of comm, uneven on purpose: weights
// 1, 2, 3, ... (rank r gets about (r + 1) / Σ of the tokens), so that shards differ in length.
// Returns [P + 1] offsets from 0 to n.
std::vector<int64_t> uneven_offsets(int64_t n, int ranks);
// Even split (the last rank takes the remainder).
std::vector<int64_t> even_offsets(int64_t n, int ranks);

// Whether every rank passed true (a logical and over comm).
bool all_ranks(bool ok, MPI_Comm comm = MPI_COMM_WORLD);

}  // namespace linattn::test
