#include "distributed/scan_shard.hpp"

#include <algorithm>
#include <bit>

#include "distributed/mpi_calls.hpp"

namespace linattn::distributed::detail {

std::vector<float> ScanShard::exscan(MPI_Comm comm, const std::vector<float>& items, bool reverse) const {
  std::vector<float> result(items.size(), 0.0f);
  const ItemType type(kind, K, V);
  exclusive_scan(items.data(), result.data(), mpi_count(B * H, "the heads"), type.type(),
                 kind == ItemType::Kind::diagonal ? diagonal_op() : matrix_op(), reverse ? reversed(comm) : comm);
  return result;
}

std::vector<float> ScanShard::states_of(const std::vector<float>& items) const {
  std::vector<float> states(size_t(B * H * K * V));
  for (int64_t bh = 0; bh < B * H; ++bh)
    std::copy_n(items.data() + bh * item() + linear_floats(), K * V, states.data() + bh * K * V);
  return states;
}

ScanShard agree_on_shard(MPI_Comm comm, const char* op, Signature& s, ItemType::Kind kind, ConstTensorView q,
                         ConstTensorView v, std::optional<float> scale) {
  s.shared("batch", q.batch());
  s.shared("heads", q.heads());
  s.shared("value heads", v.heads());
  s.shared("head dim", q.dim());
  s.shared("value dim", v.dim());
  s.shared("options.scale (bits)", scale ? std::bit_cast<int32_t>(*scale) : -1);
  s.own("shard length", q.seq());
  agree(comm, op, s);
  const int64_t group = q.heads() > 0 ? v.heads() / q.heads() : 1;
  return {q.batch(), q.seq(), v.heads(), q.dim(), v.dim(), group, comm_rank(comm), comm_size(comm), kind};
}

}  // namespace linattn::distributed::detail
