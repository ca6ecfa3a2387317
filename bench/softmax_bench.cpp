// Exact softmax attention (tiled, online softmax), forward, backward, forward + backward, and decoding one
// token against a KV cache. D = E = 64, [B, H, N, D] storage. Args: N (or context), threads.
#include <limits>
#include <vector>

#include "bench_common.hpp"
#include "linattn/softmax_attention.hpp"

namespace linattn::bench {
namespace {

constexpr int64_t kB = 1, kH = 8, kD = 64, kE = 64;

// q, k, v, out and lse of one forward.
struct Forward {
  Tensor q, k, v, out;
  std::vector<float> lse;
  Forward(int64_t Nq, int64_t Nk)
      : q(kB, kH, Nq, kD, 1),
        k(kB, kH, Nk, kD, 2),
        v(kB, kH, Nk, kE, 3),
        out(kB, kH, Nq, kE, 4),
        lse(kB * kH * Nq, std::numeric_limits<float>::quiet_NaN()) {}
  void run(const SoftmaxAttentionOptions& options) {
    softmax_attention_forward(out.view, lse, q.view, k.view, v.view, options);
  }
};

// Gradients and dout, shaped like a Forward's tensors.
struct Backward {
  Tensor dout, dq, dk, dv;
  Backward(int64_t Nq, int64_t Nk)
      : dout(kB, kH, Nq, kE, 5), dq(kB, kH, Nq, kD, 6), dk(kB, kH, Nk, kD, 7), dv(kB, kH, Nk, kE, 8) {}
  void run(const Forward& f, const SoftmaxAttentionOptions& options) {
    softmax_attention_backward(dq.view, dk.view, dv.view, dout.view, f.q.view, f.k.view, f.v.view, f.out.view, f.lse,
                               options);
  }
};

double forward_bytes(int64_t Nq, int64_t Nk) {
  return tensor_bytes(kB, kH, Nq, kD) + tensor_bytes(kB, kH, Nk, kD) + tensor_bytes(kB, kH, Nk, kE) +
         tensor_bytes(kB, kH, Nq, kE) + tensor_bytes(kB, kH, Nq, 1);
}
double backward_bytes(int64_t N) {
  return 3 * tensor_bytes(kB, kH, N, kD) + 5 * tensor_bytes(kB, kH, N, kE) + tensor_bytes(kB, kH, N, 1);
}

void BM_SoftmaxForward(benchmark::State& state) {
  const int64_t N = state.range(0);
  const ThreadScope threads(int(state.range(1)));
  Forward f(N, N);
  const SoftmaxAttentionOptions options;
  for (auto _ : state) {
    f.run(options);
    benchmark::ClobberMemory();
  }
  set_counters(state, softmax_forward_flops(kB, kH, N, N, kD, kE, false), forward_bytes(N, N), int(state.range(1)));
}

void BM_SoftmaxBackward(benchmark::State& state) {
  const int64_t N = state.range(0);
  const ThreadScope threads(int(state.range(1)));
  Forward f(N, N);
  Backward g(N, N);
  const SoftmaxAttentionOptions options;
  f.run(options);
  for (auto _ : state) {
    g.run(f, options);
    benchmark::ClobberMemory();
  }
  set_counters(state, softmax_backward_flops(kB, kH, N, N, kD, kE, false), backward_bytes(N), int(state.range(1)));
}

// What a training step pays: the forward, then the backward from its saved lse (issue 3 target 3).
void BM_SoftmaxForwardBackward(benchmark::State& state) {
  const int64_t N = state.range(0);
  const ThreadScope threads(int(state.range(1)));
  Forward f(N, N);
  Backward g(N, N);
  const SoftmaxAttentionOptions options;
  for (auto _ : state) {
    f.run(options);
    g.run(f, options);
    benchmark::ClobberMemory();
  }
  set_counters(state,
               softmax_forward_flops(kB, kH, N, N, kD, kE, false) + softmax_backward_flops(kB, kH, N, N, kD, kE, false),
               forward_bytes(N, N) + backward_bytes(N), int(state.range(1)));
}

// One new token against a cache of `context` keys and values: the forward with Nq = 1 (bottom-right
// causal, so the token sees the whole cache). The decoding cost that the recurrent step replaces.
void BM_SoftmaxDecode(benchmark::State& state) {
  const int64_t context = state.range(0);
  const ThreadScope threads(int(state.range(1)));
  Forward f(1, context);
  SoftmaxAttentionOptions options;
  options.causal = true;
  for (auto _ : state) {
    f.run(options);
    benchmark::ClobberMemory();
  }
  set_counters(state, softmax_forward_flops(kB, kH, 1, context, kD, kE, true), forward_bytes(1, context),
               int(state.range(1)));
  state.SetItemsProcessed(state.iterations());  // tokens per second
}

BENCHMARK(BM_SoftmaxForward)->Apply(sizes_by_threads<1024, 4096>);
BENCHMARK(BM_SoftmaxBackward)->Apply(sizes_by_threads<1024, 4096>);
BENCHMARK(BM_SoftmaxForwardBackward)->Apply(sizes_by_threads<1024, 4096>);
BENCHMARK(BM_SoftmaxDecode)
    ->ArgNames({"context", "threads"})
    ->ArgsProduct({{1024, 16384, 65536}, {1, 2}})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace linattn::bench

BENCHMARK_MAIN();
