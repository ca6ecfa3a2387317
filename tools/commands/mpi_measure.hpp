#pragma once
// The measurement and report the sequence-parallel benches share (bench_seq_parallel.cpp, bench_ring.cpp):
// one warm-up call, then repetitions (a barrier before each) until --budget seconds or --min-reps (at most
// --max-reps), a repetition's time the slowest rank's; per rank the median compute and communication
// seconds and the bytes sent per call, from linattn_mpi's CommStats (reset before each call, so the
// bench's own MPI calls are not counted).
#if defined(LINATTN_HAS_MPI)
#include <mpi.h>

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <vector>

#include "common/measure.hpp"
#include "common/workload.hpp"

namespace linattn::cli {

struct RankFigures {
  double compute_seconds = 0, comm_seconds = 0;
  int64_t bytes_sent = 0;
};

struct DistributedTiming {
  std::vector<double> wall;        // each repetition's time, the slowest rank's (every rank has it)
  std::vector<RankFigures> ranks;  // every rank's medians, on rank 0 (empty elsewhere)
  double seconds() const;          // the median of wall
  double seconds_min() const;
  RankFigures maxima() const;  // each figure's maximum over the ranks
};

// Times call on every rank of comm (a collective: every rank calls it with the same options).
DistributedTiming time_distributed(MPI_Comm comm, const MeasureOptions& measure, const std::function<void()>& call);

// Rank 0's report: the JSON fields both benches print (times, flops, rates, the per-rank figures and
// their maxima; the caller adds the problem's own), and the text lines after the caller's title line.
// shards (may be empty): each rank's token count, printed on its line.
nlohmann::json distributed_json(const DistributedTiming& t, const Problem& p, const MeasureOptions& measure);
void print_distributed(const DistributedTiming& t, const std::vector<int64_t>& shards);

}  // namespace linattn::cli
#endif
