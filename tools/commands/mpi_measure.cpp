// The sequence-parallel benches' shared measurement and report (mpi_measure.hpp).
#include "commands/mpi_measure.hpp"

#if defined(LINATTN_HAS_MPI)
#include <algorithm>
#include <cstdio>

#include "common/table.hpp"
#include "linattn/distributed/comm.hpp"
#include "linattn/threads.hpp"

namespace linattn::cli {
namespace {

double median(std::vector<double> x) {
  std::sort(x.begin(), x.end());
  const size_t n = x.size();
  return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

}  // namespace

double DistributedTiming::seconds() const { return median(wall); }
double DistributedTiming::seconds_min() const { return *std::min_element(wall.begin(), wall.end()); }
RankFigures DistributedTiming::maxima() const {
  RankFigures m;
  for (const RankFigures& r : ranks) {
    m.compute_seconds = std::max(m.compute_seconds, r.compute_seconds);
    m.comm_seconds = std::max(m.comm_seconds, r.comm_seconds);
    m.bytes_sent = std::max(m.bytes_sent, r.bytes_sent);
  }
  return m;
}

DistributedTiming time_distributed(MPI_Comm comm, const MeasureOptions& measure, const std::function<void()>& call) {
  call();  // warm-up: pages, threads, cached communicators
  DistributedTiming t;
  std::vector<double> compute, communication;
  int64_t bytes = 0;
  double spent = 0;
  for (int rep = 0;; ++rep) {
    MPI_Barrier(comm);
    distributed::reset_comm_stats();
    const double t0 = MPI_Wtime();
    call();
    const double mine = MPI_Wtime() - t0;
    const distributed::CommStats stats = distributed::comm_stats();
    double slowest = 0;
    MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, comm);
    t.wall.push_back(slowest);
    compute.push_back(stats.compute_seconds);
    communication.push_back(stats.comm_seconds);
    bytes = std::max(bytes, stats.bytes_sent);
    spent += slowest;
    // The same decision on every rank: it reads only the reduced time.
    if (rep + 1 >= measure.max_reps || (rep + 1 >= measure.min_reps && spent >= measure.budget_seconds)) break;
  }
  int rank = 0, ranks = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &ranks);
  const double mine[3] = {median(compute), median(communication), double(bytes)};
  std::vector<double> all(size_t(3 * ranks));
  MPI_Gather(mine, 3, MPI_DOUBLE, all.data(), 3, MPI_DOUBLE, 0, comm);
  if (rank == 0)
    for (int r = 0; r < ranks; ++r)
      t.ranks.push_back({all[size_t(3 * r)], all[size_t(3 * r + 1)], int64_t(all[size_t(3 * r + 2)])});
  return t;
}

nlohmann::json distributed_json(const DistributedTiming& t, const Problem& p, const MeasureOptions& measure) {
  const double seconds = t.seconds(), flops = forward_flops(p) + (measure.backward ? backward_flops(p) : 0);
  nlohmann::json per_rank = nlohmann::json::array();
  for (size_t r = 0; r < t.ranks.size(); ++r)
    per_rank.push_back({{"rank", r},
                        {"compute_seconds", t.ranks[r].compute_seconds},
                        {"comm_seconds", t.ranks[r].comm_seconds},
                        {"bytes_sent", t.ranks[r].bytes_sent}});
  const RankFigures most = t.maxima();
  return {{"batch", p.batch},
          {"heads", p.heads},
          {"seq", p.seq},
          {"dim", p.dim},
          {"value_dim", p.value_dim},
          {"threads", num_threads()},
          {"backward", measure.backward},
          {"seconds", seconds},
          {"seconds_min", t.seconds_min()},
          {"repetitions", int(t.wall.size())},
          {"flops", flops},
          {"gflops", flops / seconds * 1e-9},
          {"tokens_per_second", double(p.batch) * double(p.seq) / seconds},
          {"seq_parallel", true},
          {"ranks", int(t.ranks.size())},
          {"compute_seconds", most.compute_seconds},
          {"comm_seconds", most.comm_seconds},
          {"bytes_sent", most.bytes_sent},
          {"per_rank", per_rank}};
}

void print_distributed(const DistributedTiming& t, const std::vector<int64_t>& shards) {
  std::printf("  time       %s median (slowest rank), %s min, %d repetitions\n", format_seconds(t.seconds()).c_str(),
              format_seconds(t.seconds_min()).c_str(), int(t.wall.size()));
  for (size_t r = 0; r < t.ranks.size(); ++r) {
    const std::string tokens = r < shards.size() ? std::to_string(shards[r]) + " tokens, " : "";
    std::printf("  rank %-4d  %scompute %s, communication %s, %lld bytes sent per call\n", int(r), tokens.c_str(),
                format_seconds(t.ranks[r].compute_seconds).c_str(), format_seconds(t.ranks[r].comm_seconds).c_str(),
                (long long)t.ranks[r].bytes_sent);
  }
}

}  // namespace linattn::cli
#endif
