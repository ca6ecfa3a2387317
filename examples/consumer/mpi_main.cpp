// Causal linear attention over the ranks of MPI_COMM_WORLD, through the installed linattn::mpi: each rank
// holds its shard of one sequence, and the result equals the single-process operator's on the whole.
#include <mpi.h>

#include <cmath>
#include <cstdio>
#include <linattn/distributed/scan.hpp>
#include <linattn/linattn.hpp>
#include <vector>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, ranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  const int64_t n = 3, N = n * ranks, H = 2, D = 4;  // n tokens per rank
  std::vector<float> q(N * H * D), k(q.size()), v(q.size()), whole(q.size()), shard(n * H * D);
  for (size_t i = 0; i < q.size(); ++i) {
    q[i] = std::sin(0.3f * float(i));
    k[i] = std::cos(0.7f * float(i));
    v[i] = 0.1f * float(i % 7) + 0.05f;
  }
  linattn::LinearAttentionOptions options;
  options.causal = true;
  linattn::linear_attention_forward(
      linattn::bnhd(whole.data(), 1, N, H, D), linattn::bnhd<const float>(q.data(), 1, N, H, D),
      linattn::bnhd<const float>(k.data(), 1, N, H, D), linattn::bnhd<const float>(v.data(), 1, N, H, D), options);
  const int64_t first = rank * n * H * D;  // this rank's tokens [rank·n, rank·n + n)
  linattn::distributed::linear_attention_forward(MPI_COMM_WORLD, linattn::bnhd(shard.data(), 1, n, H, D),
                                                 linattn::bnhd<const float>(q.data() + first, 1, n, H, D),
                                                 linattn::bnhd<const float>(k.data() + first, 1, n, H, D),
                                                 linattn::bnhd<const float>(v.data() + first, 1, n, H, D), options);
  float worst = 0;
  for (size_t i = 0; i < shard.size(); ++i) worst = std::fmax(worst, std::fabs(shard[i] - whole[size_t(first) + i]));
  float everywhere = 0;
  MPI_Allreduce(&worst, &everywhere, 1, MPI_FLOAT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0)
    std::printf("distributed causal linear attention over %d ranks: worst difference %g\n", ranks, everywhere);
  MPI_Finalize();
  return everywhere < 1e-5f ? 0 : 1;
}
