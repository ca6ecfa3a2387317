#pragma once
// linattn bench --seq-parallel: the sequence-parallel operators of linattn_mpi timed under mpirun
// (tools/commands/bench_seq_parallel.cpp; the counting of bytes is include/linattn/distributed/comm.hpp's).
#include "common/measure.hpp"
#include "common/workload.hpp"

namespace linattn::cli {

// Whether this linattn was built with LINATTN_MPI.
bool seq_parallel_available();
// Runs p's op (causal or linear) with its sequence of p.seq tokens split evenly over the ranks of
// MPI_COMM_WORLD (MPI initialised here if it is not yet, and finalised on return); rank 0 prints.
int bench_seq_parallel(const Problem& p, const MeasureOptions& measure, bool json);

}  // namespace linattn::cli
