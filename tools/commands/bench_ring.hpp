#pragma once
// linattn bench --op softmax --seq-parallel: ring attention over the ranks of MPI_COMM_WORLD
// (bench_ring.cpp; built when linattn_mpi is).
#include "common/measure.hpp"
#include "common/workload.hpp"

namespace linattn::cli {

// Times ring_attention_forward (and, with options.backward, the backward after it) on the
// sequence p.seq split over the ranks (balanced layout when causal, contiguous otherwise); rank 0
// prints. Initialises and finalises MPI itself when the caller has not.
int bench_ring(const Problem& p, const MeasureOptions& options, bool json);

}  // namespace linattn::cli
