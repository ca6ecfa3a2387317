// linattn bench --seq-parallel (bench_seq_parallel.hpp): one sequence over the ranks of mpirun.
//
// Each rank holds a shard of --seq tokens of N(0, 1) inputs: even shards (the last rank the
// remainder), or for the causal forward by default the shards of distributed::causal_shard_lengths,
// which give the last rank (it forms no sums) more tokens (--shards).
// Measured as mpi_measure.hpp says: the slowest rank's time per repetition; per rank the median compute
// seconds (the local passes), median communication seconds (inside MPI, waiting included) and bytes
// sent per call (the bytes each rank passes to MPI, comm.hpp); with --json rank 0 prints one object
// with the maxima over ranks.
#include "commands/bench_seq_parallel.hpp"

#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "commands/mpi_measure.hpp"
#include "commands/mpi_session.hpp"
#include "common/command.hpp"
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

  const DistributedTiming t = time_distributed(comm, measure, call);
  if (rank != 0) return kExitOk;
  if (json) {
    nlohmann::json j = distributed_json(t, p, measure);
    j["op"] = op_name(p.op);
    j["feature_dim"] = feature_dim(p);
    j["causal"] = p.op == Op::causal;
    j["shards"] = shards;
    std::printf("%s\n", j.dump().c_str());
    return kExitOk;
  }
  std::printf("%s (sequence-parallel) B=%lld H=%lld N=%lld D=%lld E=%lld, %d ranks × %d threads, %s\n", op_name(p.op),
              (long long)B, (long long)H, (long long)p.seq, (long long)D, (long long)E, ranks, num_threads(),
              measure.backward ? "forward+backward" : "forward");
  print_distributed(t, shards);
  return kExitOk;
}

#endif

}  // namespace linattn::cli
