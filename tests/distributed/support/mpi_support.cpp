#include "support/mpi_support.hpp"

#include "linattn/distributed/scan.hpp"

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

#include <algorithm>
#include <cmath>

namespace linattn::test {

Gathered::Gathered(std::array<int64_t, 4> extent)
    : data(size_t(extent[0] * extent[1] * extent[2] * extent[3]), 0.0f),
      view(bnhd(data.data(), extent[0], extent[1], extent[2], extent[3])) {}

TensorView Gathered::shard(const std::vector<int64_t>& offsets, int rank) const {
  return seq_slice(view, offsets[rank], offsets[rank + 1] - offsets[rank]);
}

void Gathered::gather(MPI_Comm comm) {
  MPI_Allreduce(MPI_IN_PLACE, data.data(), static_cast<int>(data.size()), MPI_FLOAT, MPI_SUM, comm);
}

const char* split_name(Split split) {
  switch (split) {
    case Split::uneven:
      return "uneven";
    case Split::even:
      return "even";
    case Split::tiny:
      return "tiny";
    case Split::balanced:
      return "balanced";
    case Split::short_last:
      return "short_last";
  }
  return "?";
}

std::vector<int64_t> offsets_of(Split split, int64_t n, int ranks) {
  if (split == Split::uneven) return uneven_offsets(n, ranks);
  if (split == Split::even || ranks == 1) return even_offsets(n, ranks);
  if (split == Split::balanced) {
    const std::vector<int64_t> lengths = distributed::causal_shard_lengths(n, ranks);
    std::vector<int64_t> offsets(ranks + 1, 0);
    for (int r = 0; r < ranks; ++r) offsets[r + 1] = offsets[r] + lengths[size_t(r)];
    return offsets;
  }
  if (split == Split::short_last) {
    std::vector<int64_t> offsets = even_offsets(n - 2, ranks - 1);
    offsets.push_back(n);
    return offsets;
  }
  // Rank 0: 1 token; rank 1: 0 tokens when P ≥ 3; the rest evenly over the remaining ranks.
  std::vector<int64_t> offsets(ranks + 1, 0);
  offsets[1] = 1;
  const int first = ranks >= 3 ? 2 : 1;
  if (first == 2) offsets[2] = 1;
  const int rest = ranks - first;
  for (int r = first; r < ranks; ++r) {
    const int i = r - first + 1;
    offsets[r + 1] = r + 1 == ranks ? n : 1 + (n - 1) * i / rest;
  }
  return offsets;
}

double relative_error(const std::vector<float>& got, const std::vector<float>& want) {
  double err = 0, scale = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    err = std::max(err, std::abs(double(got[i]) - double(want[i])));
    scale = std::max(scale, std::abs(double(want[i])));
  }
  if (!std::isfinite(err)) return INFINITY;
  return scale > 0 ? err / scale : err;
}

double relative_error(const std::vector<float>& got, const reference::Tensor& want) {
  double err = 0, scale = 0;
  for (size_t i = 0; i < want.data.size(); ++i) {
    err = std::max(err, std::abs(double(got[i]) - want.data[i]));
    scale = std::max(scale, std::abs(want.data[i]));
  }
  if (!std::isfinite(err)) return INFINITY;
  return scale > 0 ? err / scale : err;
}

}  // namespace linattn::test
