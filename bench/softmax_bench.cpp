// Exact softmax attention (the table's "softmax": tiled, online softmax), forward, backward, forward +
// backward, and decoding one token against a KV cache. D = E = 64, [B, H, N, D] storage. Args: N (or
// context), threads.
#include <limits>
#include <vector>

#include "bench_common.hpp"

namespace linattn::bench {
namespace {

constexpr int64_t kB = 1, kH = 8, kD = 64, kE = 64;

// q, k, v, out and lse of one forward, and (`backward`) the gradients and dout of its backward.
struct Softmax {
  const table::Operator& op = table::find("softmax");
  table::Sizes s;
  table::Options options;
  Tensor q, k, v, out, dout, dq, dk, dv;
  std::vector<float> lse;
  table::Operands operands;
  Softmax(int64_t Nq, int64_t Nk, bool causal, bool backward)
      : s(sizes(kB, kH, Nq, Nk, kD, kE)),
        q(kB, kH, Nq, kD, 1),
        k(kB, kH, Nk, kD, 2),
        v(kB, kH, Nk, kE, 3),
        out(kB, kH, Nq, kE, 4),
        dout(kB, kH, backward ? Nq : 0, kE, 5),
        dq(kB, kH, backward ? Nq : 0, kD, 6),
        dk(kB, kH, backward ? Nk : 0, kD, 7),
        dv(kB, kH, backward ? Nk : 0, kE, 8),
        lse(kB * kH * Nq, std::numeric_limits<float>::quiet_NaN()) {
    s.causal = causal;
    options = op.options(s);
    operands.q = q.view, operands.k = k.view, operands.v = v.view, operands.out = out.view, operands.lse = lse;
    operands.dout = dout.view, operands.dq = dq.view, operands.dk = dk.view, operands.dv = dv.view;
  }
  void forward() const { op.forward(operands, options); }
  void backward() const { op.backward(operands, options); }
};

void BM_SoftmaxForward(benchmark::State& state) {
  const ThreadScope threads(int(state.range(1)));
  const Softmax f(state.range(0), state.range(0), false, false);
  for (auto _ : state) {
    f.forward();
    benchmark::ClobberMemory();
  }
  set_counters(state, f.op, f.s, false, int(state.range(1)));
}

void BM_SoftmaxBackward(benchmark::State& state) {
  const ThreadScope threads(int(state.range(1)));
  const Softmax f(state.range(0), state.range(0), false, true);
  f.forward();
  for (auto _ : state) {
    f.backward();
    benchmark::ClobberMemory();
  }
  set_counters(state, f.op, f.s, true, int(state.range(1)));
}

// What a training step pays: the forward, then the backward from its saved lse (issue 3 target 3).
void BM_SoftmaxForwardBackward(benchmark::State& state) {
  const ThreadScope threads(int(state.range(1)));
  const Softmax f(state.range(0), state.range(0), false, true);
  for (auto _ : state) {
    f.forward();
    f.backward();
    benchmark::ClobberMemory();
  }
  set_counters(state, f.op.forward_flops(f.s) + f.op.backward_flops(f.s),
               f.op.forward_bytes(f.s) + f.op.backward_bytes(f.s), int(state.range(1)));
}

// One new token against a cache of `context` keys and values: the forward with Nq = 1 (bottom-right
// causal, so the token sees the whole cache). The decoding cost that the recurrent step replaces.
void BM_SoftmaxDecode(benchmark::State& state) {
  const ThreadScope threads(int(state.range(1)));
  const Softmax f(1, state.range(0), true, false);
  for (auto _ : state) {
    f.forward();
    benchmark::ClobberMemory();
  }
  set_counters(state, f.op, f.s, false, int(state.range(1)));
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
