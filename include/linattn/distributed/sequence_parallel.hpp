#pragma once
// The transformer's sequence parallelism over MPI (include/linattn/model/sequence_parallel.hpp):
// attention through linattn_mpi's operators (scan.hpp for the linear, decayed and delta-rule
// families, ring.hpp's ring attention for softmax, contiguous shards), sums over the ranks by one
// reduction in rank order to rank 0 and a broadcast of its result, so every rank holds the same bits.
// `mpirun -np P linattn train --seq-parallel` trains with it.
#include <mpi.h>

#include <memory>

#include "linattn/model/sequence_parallel.hpp"

namespace linattn::distributed {

// comm's ranks, in rank order, hold the shards in sequence order. comm must stay valid while the
// result is used; MPI must be initialised (MPI_THREAD_FUNNELED suffices).
std::shared_ptr<const model::SequenceParallel> sequence_parallel(MPI_Comm comm);

}  // namespace linattn::distributed
