#pragma once
// What the recurrences' distributed scans (decay_scan.cpp, delta_scan.cpp) share: the shard each rank
// holds, agreed on by every rank, and the scans of its per-head items [linear part | S (K×V)]: the
// forward Exscan of the shards' maps (the state entering each shard), the reverse one of the backward
// (the gradient reaching each shard's final state), and the states read out of the scanned items.
#include <mpi.h>

#include <cstdint>
#include <optional>
#include <vector>

#include "distributed/agreement.hpp"
#include "distributed/scan_ops.hpp"
#include "linattn/view.hpp"

namespace linattn::distributed::detail {

// B × H heads of n tokens (head dims K and V) on rank `rank` of `ranks`; each head's item holds the map's
// linear part (diagonal: a, K floats; matrix: A, K·K) then S (K·V). H counts the value heads (the states'),
// `group` of them per q/k head (grouped value heads; 1 otherwise).
struct ScanShard {
  int64_t B = 0, n = 0, H = 0, K = 0, V = 0, group = 1;
  int rank = 0, ranks = 1;
  ItemType::Kind kind = ItemType::Kind::diagonal;
  int64_t linear_floats() const { return kind == ItemType::Kind::diagonal ? K : K * K; }
  int64_t item() const { return linear_floats() + K * V; }
  int64_t items_floats() const { return B * H * item(); }
  bool last() const { return rank == ranks - 1; }
  // The exclusive scan of the heads' items over comm, or (reverse) over reversed(comm).
  std::vector<float> exscan(MPI_Comm comm, const std::vector<float>& items, bool reverse = false) const;
  // The S parts of items, as a state [B, H, K, V].
  std::vector<float> states_of(const std::vector<float>& items) const;
};

// Adds what every scan shares to the signature s (batch, heads, head dims, the scale's bits, this
// shard's length), agrees on it across comm (naming op) and returns this rank's shard of q [B, n, H, K],
// v [B, n, HV, V] (HV a multiple of H, checked by check_qkv).
ScanShard agree_on_shard(MPI_Comm comm, const char* op, Signature& s, ItemType::Kind kind, ConstTensorView q,
                         ConstTensorView v, std::optional<float> scale);

}  // namespace linattn::distributed::detail
