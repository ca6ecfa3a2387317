// linattn bench --op softmax --seq-parallel (bench_ring.hpp), measured and reported as
// bench_seq_parallel.cpp's scans are (mpi_measure.hpp).
#include "commands/bench_ring.hpp"

#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>
#include <vector>

#include "commands/mpi_measure.hpp"
#include "commands/mpi_session.hpp"
#include "common/command.hpp"
#include "linattn/threads.hpp"

#if defined(LINATTN_HAS_MPI)
#include <mpi.h>

#include "linattn/distributed/ring.hpp"
#endif

namespace linattn::cli {

#if !defined(LINATTN_HAS_MPI)

int bench_ring(const Problem&, const MeasureOptions&, bool) {
  throw UsageError("--seq-parallel: this linattn was built without MPI (configure with -DLINATTN_MPI=ON)");
}

#else

namespace {

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

  const DistributedTiming t = time_distributed(comm, measure, call);
  if (rank != 0) return kExitOk;
  const char* layout = p.causal ? "balanced" : "contiguous";
  if (json) {
    nlohmann::json j = distributed_json(t, p, measure);
    j["op"] = "softmax";
    j["causal"] = p.causal;
    j["layout"] = layout;
    std::printf("%s\n", j.dump().c_str());
    return kExitOk;
  }
  std::printf("softmax%s ring attention (%s layout) B=%lld H=%lld N=%lld D=%lld E=%lld, %d ranks × %d threads, %s\n",
              p.causal ? " (causal)" : "", layout, (long long)B, (long long)H, (long long)p.seq, (long long)D,
              (long long)E, ranks, num_threads(), measure.backward ? "forward+backward" : "forward");
  print_distributed(t, {});
  return kExitOk;
}

#endif

}  // namespace linattn::cli
