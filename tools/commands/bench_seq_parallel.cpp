// linattn bench --seq-parallel (bench_seq_parallel.hpp): one sequence over the ranks of mpirun.
//
// Each rank holds a shard of --seq tokens of N(0, 1) inputs: even shards (the last rank the
// remainder), or for the causal forward by default the shards of distributed::causal_shard_lengths,
// which give the last rank (it forms no sums) more tokens (--shards).
// One warm-up call, then repetitions (a barrier before each) until --budget seconds or --min-reps;
// per repetition the call's time is the slowest rank's. Reported per rank: median compute seconds
// (the local passes), median communication seconds (inside MPI, waiting included) and bytes sent per
// call (the bytes each rank passes to MPI, comm.hpp); with --json rank 0 prints one object with the
// maxima over ranks.
#include "commands/bench_seq_parallel.hpp"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "commands/mpi_session.hpp"
#include "common/command.hpp"
#include "common/table.hpp"
#include "linattn/threads.hpp"

#if defined(LINATTN_HAS_MPI)
#include <mpi.h>

#include "linattn/distributed/scan.hpp"
#endif

namespace linattn::cli {

#if !defined(LINATTN_HAS_MPI)

bool seq_parallel_available() { return false; }
int bench_seq_parallel(const Problem&, const MeasureOptions&, bool, ShardSplit) {
  throw UsageError("--seq-parallel: this linattn was built without MPI (configure with -DLINATTN_MPI=ON)");
}

#else

namespace {

double median(std::vector<double> x) {
  std::sort(x.begin(), x.end());
  const size_t n = x.size();
  return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

std::vector<float> normal(size_t count, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(count);
  for (float& v : x) v = dist(rng);
  return x;
}

}  // namespace

bool seq_parallel_available() { return true; }

int bench_seq_parallel(const Problem& p, const MeasureOptions& measure, bool json, ShardSplit split) {
  if (p.op != Op::causal && p.op != Op::linear)
    throw UsageError(std::string("--seq-parallel: --op is ") + op_name(p.op) + ", expected causal or linear");
  MpiSession session;
  const MPI_Comm comm = MPI_COMM_WORLD;
  int rank = 0, ranks = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &ranks);
  if (measure.threads > 0) set_num_threads(measure.threads);

  const int64_t B = p.batch, H = p.heads, D = p.dim, E = p.value_dim;
  const bool balanced =
      split == ShardSplit::balanced || (split == ShardSplit::automatic && p.op == Op::causal && !measure.backward);
  std::vector<int64_t> shards(size_t(ranks), p.seq / ranks);
  if (balanced)
    shards = distributed::causal_shard_lengths(p.seq, ranks);
  else
    shards.back() = p.seq - p.seq / ranks * (ranks - 1);
  const int64_t n = shards[size_t(rank)];
  const uint64_t seed = p.seed * 1000003 + uint64_t(rank);
  const size_t qk = size_t(B * n * H * D), vo = size_t(B * n * H * E);
  std::vector<float> q = normal(qk, seed), k = normal(qk, seed + (1u << 20)), v = normal(vo, seed + (2u << 20));
  std::vector<float> out(vo);
  // The backward's buffers only when it runs (N = 4M on one rank is 1 GiB per buffer).
  std::vector<float> dout = measure.backward ? normal(vo, seed + (3u << 20)) : std::vector<float>();
  std::vector<float> dq(measure.backward ? qk : 0), dk(dq.size()), dv(measure.backward ? vo : 0);
  LinearAttentionOptions options;
  options.causal = p.op == Op::causal;
  auto call = [&] {
    distributed::linear_attention_forward(comm, bnhd(out.data(), B, n, H, E), bnhd(q.data(), B, n, H, D),
                                          bnhd(k.data(), B, n, H, D), bnhd(v.data(), B, n, H, E), options);
    if (measure.backward)
      distributed::linear_attention_backward(comm, bnhd(dq.data(), B, n, H, D), bnhd(dk.data(), B, n, H, D),
                                             bnhd(dv.data(), B, n, H, E), bnhd(dout.data(), B, n, H, E),
                                             bnhd(q.data(), B, n, H, D), bnhd(k.data(), B, n, H, D),
                                             bnhd(v.data(), B, n, H, E), options);
  };

  call();  // warm-up: pages, threads, the cached reversed communicator
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
  if (rank != 0) return kExitOk;

  double max_compute = 0, max_comm = 0, max_bytes = 0;
  for (int r = 0; r < ranks; ++r) {
    max_compute = std::max(max_compute, all[3 * r]);
    max_comm = std::max(max_comm, all[3 * r + 1]);
    max_bytes = std::max(max_bytes, all[3 * r + 2]);
  }
  const double seconds = median(wall), seconds_min = *std::min_element(wall.begin(), wall.end());
  const double flops = forward_flops(p) + (measure.backward ? backward_flops(p) : 0);
  if (json) {
    nlohmann::json per_rank = nlohmann::json::array();
    for (int r = 0; r < ranks; ++r)
      per_rank.push_back({{"rank", r},
                          {"compute_seconds", all[3 * r]},
                          {"comm_seconds", all[3 * r + 1]},
                          {"bytes_sent", int64_t(all[3 * r + 2])}});
    nlohmann::json j = {{"op", op_name(p.op)},
                        {"batch", B},
                        {"heads", H},
                        {"seq", p.seq},
                        {"dim", D},
                        {"value_dim", E},
                        {"feature_dim", feature_dim(p)},
                        {"causal", p.op == Op::causal},
                        {"threads", num_threads()},
                        {"backward", measure.backward},
                        {"seconds", seconds},
                        {"seconds_min", seconds_min},
                        {"repetitions", int(wall.size())},
                        {"flops", flops},
                        {"gflops", flops / seconds * 1e-9},
                        {"tokens_per_second", double(B) * double(p.seq) / seconds},
                        {"seq_parallel", true},
                        {"ranks", ranks},
                        {"compute_seconds", max_compute},
                        {"comm_seconds", max_comm},
                        {"bytes_sent", int64_t(max_bytes)},
                        {"shards", shards},
                        {"per_rank", per_rank}};
    std::printf("%s\n", j.dump().c_str());
    return kExitOk;
  }
  std::printf("%s (sequence-parallel) B=%lld H=%lld N=%lld D=%lld E=%lld, %d ranks × %d threads, %s\n", op_name(p.op),
              (long long)B, (long long)H, (long long)p.seq, (long long)D, (long long)E, ranks, num_threads(),
              measure.backward ? "forward+backward" : "forward");
  std::printf("  time       %s median (slowest rank), %s min, %d repetitions\n", format_seconds(seconds).c_str(),
              format_seconds(seconds_min).c_str(), int(wall.size()));
  for (int r = 0; r < ranks; ++r)
    std::printf("  rank %-4d  %lld tokens, compute %s, communication %s, %lld bytes sent per call\n", r,
                (long long)shards[size_t(r)], format_seconds(all[3 * r]).c_str(),
                format_seconds(all[3 * r + 1]).c_str(), (long long)all[3 * r + 2]);
  return kExitOk;
}

#endif

}  // namespace linattn::cli
