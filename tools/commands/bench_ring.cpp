// linattn bench --op softmax --seq-parallel (bench_ring.hpp). Each repetition: a barrier, then the
// call on every rank; a repetition's time is the slowest rank's. Per rank, the time inside MPI
// (comm) and in the local blocks (compute), and the bytes it sent, come from linattn_mpi's
// CommStats, reset before each call, so the bench's own MPI calls are not counted.
#include "commands/bench_ring.hpp"

#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>
#include <vector>

#include "common/table.hpp"
#include "linattn/distributed/comm.hpp"
#include "linattn/distributed/ring.hpp"
#include "linattn/threads.hpp"

namespace linattn::cli {
namespace {

double median(std::vector<double> x) {
  std::sort(x.begin(), x.end());
  return x.empty() ? 0 : x[x.size() / 2];
}

// Per-call figures of one rank, one entry per repetition.
struct Calls {
  std::vector<double> wall, comm, compute;
  int64_t bytes = 0;
};

}  // namespace

int bench_ring(const Problem& p, const MeasureOptions& options, bool json) {
  int initialised = 0;
  MPI_Initialized(&initialised);
  if (!initialised) {
    int provided = 0;
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
  }
  const MPI_Comm comm = MPI_COMM_WORLD;
  int rank = 0, ranks = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &ranks);
  if (options.threads > 0) set_num_threads(options.threads);

  // This rank's shard: balanced blocks when causal (so that no rank idles), else an even split.
  using distributed::RingLayout;
  distributed::RingAttentionOptions ring;
  ring.causal = p.causal;
  ring.layout = p.causal ? RingLayout::balanced : RingLayout::contiguous;
  const int64_t n = p.causal ? distributed::balanced_range(p.seq, rank, ranks).length()
                             : p.seq / ranks + (rank < p.seq % ranks ? 1 : 0);
  const int64_t B = p.batch, H = p.heads, D = p.dim, E = p.value_dim;
  std::mt19937_64 rng(p.seed + uint64_t(rank));
  std::normal_distribution<float> normal;
  auto filled = [&](int64_t size) {
    std::vector<float> x(static_cast<size_t>(size));
    for (float& value : x) value = normal(rng);
    return x;
  };
  const std::vector<float> q = filled(B * n * H * D), k = filled(B * n * H * D), v = filled(B * n * H * E),
                           dout = filled(B * n * H * E);
  std::vector<float> out(size_t(B * n * H * E)), lse(size_t(B * H * n)), dq(q.size()), dk(k.size()), dv(v.size());
  auto in = [&](const std::vector<float>& x, int64_t X) { return bnhd(x.data(), B, n, H, X); };
  auto at = [&](std::vector<float>& x, int64_t X) { return bnhd(x.data(), B, n, H, X); };
  auto call = [&] {
    distributed::ring_attention_forward(comm, at(out, E), lse, in(q, D), in(k, D), in(v, E), ring);
    if (options.backward)
      distributed::ring_attention_backward(comm, at(dq, D), at(dk, D), at(dv, E), in(dout, E), in(q, D), in(k, D),
                                           in(v, E), in(out, E), lse, ring);
  };

  // One warm-up call sets the repetitions, the same on every rank (from the slowest rank's time).
  MPI_Barrier(comm);
  double start = MPI_Wtime();
  call();
  double warm = MPI_Wtime() - start;
  MPI_Allreduce(MPI_IN_PLACE, &warm, 1, MPI_DOUBLE, MPI_MAX, comm);
  const int reps = std::clamp(int(options.budget_seconds / std::max(warm, 1e-9)), options.min_reps, options.max_reps);
  Calls calls;
  for (int r = 0; r < reps; ++r) {
    MPI_Barrier(comm);
    distributed::reset_comm_stats();
    start = MPI_Wtime();
    call();
    calls.wall.push_back(MPI_Wtime() - start);
    const distributed::CommStats s = distributed::comm_stats();
    calls.comm.push_back(s.comm_seconds);
    calls.compute.push_back(s.compute_seconds);
    calls.bytes = s.bytes_sent;
  }
  // A repetition takes as long as its slowest rank.
  MPI_Allreduce(MPI_IN_PLACE, calls.wall.data(), reps, MPI_DOUBLE, MPI_MAX, comm);
  const double mine[3] = {median(calls.compute), median(calls.comm), double(calls.bytes)};
  std::vector<double> every(size_t(3 * ranks));
  MPI_Gather(mine, 3, MPI_DOUBLE, every.data(), 3, MPI_DOUBLE, 0, comm);
  if (rank == 0) {
    const double seconds = median(calls.wall), seconds_min = *std::min_element(calls.wall.begin(), calls.wall.end());
    const double flops = forward_flops(p) + (options.backward ? backward_flops(p) : 0);
    double compute = 0, comm_s = 0, bytes = 0;
    for (int r = 0; r < ranks; ++r) {
      compute = std::max(compute, every[size_t(3 * r)]);
      comm_s = std::max(comm_s, every[size_t(3 * r + 1)]);
      bytes = std::max(bytes, every[size_t(3 * r + 2)]);
    }
    if (json) {
      nlohmann::json j = {{"op", "softmax"},
                          {"batch", p.batch},
                          {"heads", p.heads},
                          {"seq", p.seq},
                          {"dim", p.dim},
                          {"value_dim", p.value_dim},
                          {"causal", p.causal},
                          {"threads", linattn::num_threads()},
                          {"backward", options.backward},
                          {"seconds", seconds},
                          {"seconds_min", seconds_min},
                          {"repetitions", reps},
                          {"flops", flops},
                          {"gflops", flops / seconds * 1e-9},
                          {"tokens_per_second", double(p.batch) * double(p.seq) / seconds},
                          {"ranks", ranks},
                          {"layout", p.causal ? "balanced" : "contiguous"},
                          {"compute_seconds", compute},
                          {"comm_seconds", comm_s},
                          {"bytes_sent", int64_t(bytes)}};
      std::printf("%s\n", j.dump().c_str());
    } else {
      std::printf("softmax%s ring attention, P=%d (%s layout), B=%lld H=%lld N=%lld D=%lld E=%lld, %s\n",
                  p.causal ? " (causal)" : "", ranks, p.causal ? "balanced" : "contiguous", (long long)p.batch,
                  (long long)p.heads, (long long)p.seq, (long long)p.dim, (long long)p.value_dim,
                  options.backward ? "forward+backward" : "forward");
      std::printf("  time       %s median, %s min, %d repetitions (the slowest rank's)\n",
                  format_seconds(seconds).c_str(), format_seconds(seconds_min).c_str(), reps);
      for (int r = 0; r < ranks; ++r)
        std::printf("  rank %-4d  compute %s, comm %s, sent %.0f bytes per call\n", r,
                    format_seconds(every[size_t(3 * r)]).c_str(), format_seconds(every[size_t(3 * r + 1)]).c_str(),
                    every[size_t(3 * r + 2)]);
    }
  }
  if (!initialised) MPI_Finalize();
  return 0;
}

}  // namespace linattn::cli
