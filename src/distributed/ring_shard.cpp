// The balanced layout's standard cut, and the copies between a full tensor and one rank's shard.
#include <algorithm>
#include <string>

#include "core/validate.hpp"
#include "distributed/ring_layout.hpp"
#include "linattn/distributed/ring.hpp"

namespace linattn::distributed {

namespace {

void check_rank(const char* op, int64_t N, int rank, int ranks) {
  if (ranks < 1) linattn::detail::fail_with(op, "ranks is ", ranks, ", expected at least 1");
  if (rank < 0 || rank >= ranks) linattn::detail::fail_with(op, "rank is ", rank, ", expected in [0, ", ranks, ")");
  if (N < 0) linattn::detail::fail_with(op, "N is ", N, ", expected at least 0");
}

// full's and shard's extents agree with rank's share of full's N.
BalancedRange check_views(const char* op, ConstTensorView full, ConstTensorView shard, int rank, int ranks) {
  check_rank(op, full.seq(), rank, ranks);
  linattn::detail::check_view(op, "full", full);
  const BalancedRange range = balanced_range(full.seq(), rank, ranks);
  const char* axes[4] = {"batch", "sequence", "heads", "dim"};
  const int64_t want[4] = {full.batch(), range.length(), full.heads(), full.dim()};
  for (int axis = 0; axis < 4; ++axis)
    if (shard.extent[size_t(axis)] != want[axis])
      linattn::detail::fail_with(op, "shard's ", axes[axis], " is ", shard.extent[size_t(axis)], ", expected ",
                                 want[axis], axis == 1 ? " (this rank's share of full's sequence)" : " (full's)");
  if (range.length() > 0) linattn::detail::check_view(op, "shard", shard);
  return range;
}

}  // namespace

BalancedRange balanced_range(int64_t N, int rank, int ranks) {
  check_rank("balanced_range", N, rank, ranks);
  const int64_t blocks = 2 * int64_t(ranks), base = N / blocks, extra = N % blocks;
  // Block i holds base + (i < extra) rows and starts at i·base + min(i, extra).
  auto length = [&](int64_t i) { return base + (i < extra ? 1 : 0); };
  auto begin = [&](int64_t i) { return i * base + std::min(i, extra); };
  const int64_t late = blocks - 1 - rank;
  return {begin(rank), length(rank), begin(late), length(late)};
}

void balanced_shard(TensorView shard, ConstTensorView full, int rank, int ranks) {
  const BalancedRange r = check_views("balanced_shard", full, shard, rank, ranks);
  if (r.early_length > 0)
    detail::copy_view(detail::seq_slice(shard, 0, r.early_length),
                      detail::seq_slice(full, r.early_begin, r.early_length));
  if (r.late_length > 0)
    detail::copy_view(detail::seq_slice(shard, r.early_length, r.late_length),
                      detail::seq_slice(full, r.late_begin, r.late_length));
}

void balanced_unshard(TensorView full, ConstTensorView shard, int rank, int ranks) {
  const BalancedRange r = check_views("balanced_unshard", full, shard, rank, ranks);
  if (r.early_length > 0)
    detail::copy_view(detail::seq_slice(full, r.early_begin, r.early_length),
                      detail::seq_slice(shard, 0, r.early_length));
  if (r.late_length > 0)
    detail::copy_view(detail::seq_slice(full, r.late_begin, r.late_length),
                      detail::seq_slice(shard, r.early_length, r.late_length));
}

}  // namespace linattn::distributed
