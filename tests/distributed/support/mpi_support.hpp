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

#include "core/views.hpp"
#include "linattn/reference.hpp"
#include "linattn/view.hpp"

namespace linattn::test {

// Tokens [begin, begin + count) of x (a view of the same memory): the library's own slice.
using linattn::detail::seq_slice;

// A full-length fp32 tensor [B, N, H, D] (bnhd, zero) that every rank writes its shard of; gather()
// sums the ranks' copies (the shards are disjoint), so every rank then holds the whole result.
struct Gathered {
  std::vector<float> data;
  TensorView view;
  explicit Gathered(std::array<int64_t, 4> extent);
  TensorView shard(const std::vector<int64_t>& offsets, int rank) const;
  void gather(MPI_Comm comm = MPI_COMM_WORLD);
};

// The split schemes of the tests: uneven, even, and one with a shard of 1 token (rank 0) and, from
// P = 3, one of 0 tokens (rank 1).
// uneven: shards growing with the rank; even; tiny: shards of 1 and 0 tokens first; balanced: the
// causal forward's distributed::causal_shard_lengths; short_last: a last shard of 2 tokens, which the
// last rank's causal forward runs all from the zero state before the scan.
enum class Split { uneven, even, tiny, balanced, short_last };
const char* split_name(Split split);
std::vector<int64_t> offsets_of(Split split, int64_t n, int ranks);

// max |got − want| / max |want| over a whole tensor.
double relative_error(const std::vector<float>& got, const std::vector<float>& want);
double relative_error(const std::vector<float>& got, const reference::Tensor& want);

}  // namespace linattn::test
