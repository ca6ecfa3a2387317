// linattn bench --op softmax --seq-parallel (bench_ring.hpp). The same measurement as
// bench_seq_parallel.cpp's: one warm-up call, then repetitions (a barrier before each) until
// --budget seconds or --min-reps, a repetition's time the slowest rank's; per rank the median compute
// and communication seconds and the bytes sent per call from linattn_mpi's CommStats (reset before
// each call, so the bench's own MPI calls are not counted).
#include "commands/bench_ring.hpp"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>
#include <vector>

#include "commands/mpi_session.hpp"
#include "common/command.hpp"
#include "common/table.hpp"
#include "linattn/threads.hpp"

#if defined(LINATTN_HAS_MPI)
#include <mpi.h>

#include "linattn/distributed/comm.hpp"
#include "linattn/distributed/ring.hpp"
#endif

namespace linattn::cli {

#if !defined(LINATTN_HAS_MPI)

int bench_ring(const Problem&, const MeasureOptions&, bool) {
  throw UsageError("--seq-parallel: this linattn was built without MPI (configure with -DLINATTN_MPI=ON)");
}

#else

namespace {

double median(std::vector<double> x) {
  std::sort(x.begin(), x.end());
  const size_t n = x.size();
  return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

std::vector<float> normal(size_t count, std::mt19937_64& rng) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(count);
  for (float& v : x) v = dist(rng);
  return x;
}

}  // namespace

int bench_ring(const Problem& p, const MeasureOptions& measure, bool json) {
  MpiSession session;
  const MPI_Comm comm = MPI_COMM_WORLD;
  int rank = 0, ranks = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &ranks);
  if (measure.threads > 0) set_num_threads(measure.threads);

  using distributed::RingLayout;
  distributed::RingAttentionOptions ring;
  ring.causal = p.causal;
  ring.layout = p.causal ? RingLayout::balanced : RingLayout::contiguous;
  const int64_t n = p.causal ? distributed::balanced_range(p.seq, rank, ranks).length()
                             : p.seq / ranks + (rank < p.seq % ranks ? 1 : 0);
  const int64_t B = p.batch, H = p.heads, D = p.dim, E = p.value_dim;
  std::mt19937_64 rng(p.seed * 1000003 + uint64_t(rank));
  const std::vector<float> q = normal(size_t(B * n * H * D), rng), k = normal(size_t(B * n * H * D), rng),
                           v = normal(size_t(B * n * H * E), rng), dout = normal(size_t(B * n * H * E), rng);
  std::vector<float> out(v.size()), lse(size_t(B * H * n)), dq(q.size()), dk(k.size()), dv(v.size());
  auto in = [&](const std::vector<float>& x, int64_t X) { return bnhd(x.data(), B, n, H, X); };
  auto at = [&](std::vector<float>& x, int64_t X) { return bnhd(x.data(), B, n, H, X); };
  auto call = [&] {
    distributed::ring_attention_forward(comm, at(out, E), lse, in(q, D), in(k, D), in(v, E), ring);
    if (measure.backward)
      distributed::ring_attention_backward(comm, at(dq, D), at(dk, D), at(dv, E), in(dout, E), in(q, D), in(k, D),
                                           in(v, E), in(out, E), lse, ring);
  };

  call();  // warm-up
  std::vector<double> wall, compute, communication;
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
    wall.push_back(slowest);
    compute.push_back(stats.compute_seconds);
    communication.push_back(stats.comm_seconds);
    bytes = std::max(bytes, stats.bytes_sent);
    spent += slowest;
    // The same decision on every rank: it reads only the reduced time.
    if (rep + 1 >= measure.max_reps || (rep + 1 >= measure.min_reps && spent >= measure.budget_seconds)) break;
  }
  const double mine[3] = {median(compute), median(communication), double(bytes)};
  std::vector<double> all(size_t(3 * ranks));
  MPI_Gather(mine, 3, MPI_DOUBLE, all.data(), 3, MPI_DOUBLE, 0, comm);
  if (rank == 0) {
    double max_compute = 0, max_comm = 0, max_bytes = 0;
    for (int r = 0; r < ranks; ++r) {
      max_compute = std::max(max_compute, all[size_t(3 * r)]);
      max_comm = std::max(max_comm, all[size_t(3 * r + 1)]);
      max_bytes = std::max(max_bytes, all[size_t(3 * r + 2)]);
    }
    const double seconds = median(wall), seconds_min = *std::min_element(wall.begin(), wall.end());
    const double flops = forward_flops(p) + (measure.backward ? backward_flops(p) : 0);
    const char* layout = p.causal ? "balanced" : "contiguous";
    if (json) {
      nlohmann::json per_rank = nlohmann::json::array();
      for (int r = 0; r < ranks; ++r)
        per_rank.push_back({{"rank", r},
                            {"compute_seconds", all[size_t(3 * r)]},
                            {"comm_seconds", all[size_t(3 * r + 1)]},
                            {"bytes_sent", int64_t(all[size_t(3 * r + 2)])}});
      nlohmann::json j = {{"op", "softmax"},
                          {"batch", B},
                          {"heads", H},
                          {"seq", p.seq},
                          {"dim", D},
                          {"value_dim", E},
                          {"causal", p.causal},
                          {"threads", num_threads()},
                          {"backward", measure.backward},
                          {"seconds", seconds},
                          {"seconds_min", seconds_min},
                          {"repetitions", int(wall.size())},
                          {"flops", flops},
                          {"gflops", flops / seconds * 1e-9},
                          {"tokens_per_second", double(B) * double(p.seq) / seconds},
                          {"seq_parallel", true},
                          {"layout", layout},
                          {"ranks", ranks},
                          {"compute_seconds", max_compute},
                          {"comm_seconds", max_comm},
                          {"bytes_sent", int64_t(max_bytes)},
                          {"per_rank", per_rank}};
      std::printf("%s\n", j.dump().c_str());
    } else {
      std::printf(
          "softmax%s ring attention (%s layout) B=%lld H=%lld N=%lld D=%lld E=%lld, %d ranks × %d threads, %s\n",
          p.causal ? " (causal)" : "", layout, (long long)B, (long long)H, (long long)p.seq, (long long)D, (long long)E,
          ranks, num_threads(), measure.backward ? "forward+backward" : "forward");
      std::printf("  time       %s median (slowest rank), %s min, %d repetitions\n", format_seconds(seconds).c_str(),
                  format_seconds(seconds_min).c_str(), int(wall.size()));
      for (int r = 0; r < ranks; ++r)
        std::printf("  rank %-4d  compute %s, communication %s, %lld bytes sent per call\n", r,
                    format_seconds(all[size_t(3 * r)]).c_str(), format_seconds(all[size_t(3 * r + 1)]).c_str(),
                    (long long)all[size_t(3 * r + 2)]);
    }
  }
  return kExitOk;
}

#endif

}  // namespace linattn::cli
