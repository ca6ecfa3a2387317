#pragma once
// The scan operators of the causal families, as MPI_Ops over contiguous float items, and the
// reversed communicator of the backward scans. Each operator is associative (docs/distributed.md) and
// created non-commutative (commute = 0), so MPI combines the ranks' items in rank order: with
// in = the lower ranks' item x and inout = the higher ranks' item y, inout ← x∘y ("x, then y").
//   add       S ↦ S + x: the plain family's (S, z) sums, on MPI_FLOAT
//   diagonal  item [a (K) | S (K×V)], x∘y = (a_x ⊙ a_y, diag(a_y) S_x + S_y): the decayed family
//   matrix    item [A (K×K) | S (K×V)], x∘y = (A_y A_x, A_y S_x + S_y): the delta rule
// diagonal and matrix run on an ItemType, which carries K and V to the operator.
#include <mpi.h>

#include <cstdint>

namespace linattn::distributed::detail {

MPI_Op add_op();
MPI_Op diagonal_op();
MPI_Op matrix_op();

// A committed contiguous datatype of one (b, h) item of the diagonal or matrix operators: K·V + K
// floats (diagonal) or K·K + K·V (matrix), with K and V attached as an attribute. Freed on return.
class ItemType {
 public:
  enum class Kind { diagonal, matrix };
  ItemType(Kind kind, int64_t K, int64_t V);
  ~ItemType();
  ItemType(const ItemType&) = delete;
  ItemType& operator=(const ItemType&) = delete;
  MPI_Datatype type() const { return type_; }
  int64_t floats() const { return floats_; }

 private:
  MPI_Datatype type_ = MPI_DATATYPE_NULL;
  int64_t dims_[2];
  int64_t floats_;
};

// The ranks of comm in reverse order (rank r of comm is rank P − 1 − r here): an Exscan over it is
// the reverse exclusive scan over comm. Created once per communicator (MPI_Comm_split, a collective)
// and cached on comm as an attribute, freed with comm.
MPI_Comm reversed(MPI_Comm comm);

}  // namespace linattn::distributed::detail
