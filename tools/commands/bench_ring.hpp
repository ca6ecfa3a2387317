#pragma once
// linattn bench --op softmax --seq-parallel: ring attention (include/linattn/distributed/ring.hpp)
// over the ranks of mpirun (bench_ring.cpp), beside bench_seq_parallel's scans.
#include "common/measure.hpp"
#include "common/workload.hpp"

namespace linattn::cli {

// Times ring_attention_forward (and, with measure.backward, the backward after it) on p.seq tokens
// split over the ranks of MPI_COMM_WORLD: the balanced layout when p.causal (no rank idles), an even
// contiguous split otherwise. MPI is initialised here if it is not yet, and then finalised; rank 0
// prints. Without linattn_mpi: a UsageError.
int bench_ring(const Problem& p, const MeasureOptions& measure, bool json);

}  // namespace linattn::cli
