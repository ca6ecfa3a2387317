#pragma once
// linattn bench --seq-parallel: the sequence-parallel operators of linattn_mpi timed under mpirun
// (tools/commands/bench_seq_parallel.cpp; the counting of bytes is include/linattn/distributed/comm.hpp's).
#include "common/measure.hpp"
#include "common/workload.hpp"

namespace linattn::cli {

// Whether this linattn was built with LINATTN_MPI.
bool seq_parallel_available();
// How the sequence is cut into shards: evenly, or (causal forward) by distributed::causal_shard_lengths;
// auto takes the latter for --op causal without --backward and even shards otherwise.
enum class ShardSplit { automatic, even, balanced };

// Runs p's op (causal or linear) with its sequence of p.seq tokens split over the ranks of
// MPI_COMM_WORLD (MPI initialised here if it is not yet, and finalised on return); rank 0 prints.
int bench_seq_parallel(const Problem& p, const MeasureOptions& measure, bool json, ShardSplit split);

}  // namespace linattn::cli
