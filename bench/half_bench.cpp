// bf16 and f16 beside fp32 (docs/half-precision.md), one program so that the ratios come from one
// run: the linear forward at issue 3's shape (B = 4, H = 8, N = 16384, D = E = 64, [B, H, N, D]), the
// softmax forward + backward at N = 4096 (B = 1, H = 8), the decode steps (the linear recurrent step at
// B = 1, H = 8 and H = 64, and B = 128, H = 64; GLA's and the gated delta rule's at B = 1, H = 8 and B = 128,
// H = 64; D = E = 64; the state in fp32 or, for the half rows, bf16) and
// the softmax decode step against a KV cache of 16K and 64K keys (B = 1, H = 8). Arg 0 is the dtype:
// 0 f32, 1 bf16, 2 f16; all at 2 threads.
#include <vector>

#include "bench_common.hpp"
#include "linattn/half_attention.hpp"

namespace linattn::bench {
namespace {

constexpr int kThreads = 2;

// One tensor of [B, H, N, D] storage in every dtype, the same values (rounded for the half ones).
struct Any {
  Floats f;
  std::vector<bf16> b;
  std::vector<f16> h;
  std::array<int64_t, 4> extent{}, stride{};
  // tokens_outer: [B, N, H, D] storage (a token's rows of all heads side by side); else [B, H, N, D]. Values
  // uniform in [lo, hi).
  Any(int64_t B, int64_t H, int64_t N, int64_t D, uint64_t seed, bool tokens_outer = false, float lo = -1.0f,
      float hi = 1.0f)
      : f(random_floats(B * H * N * D, seed, lo, hi)),
        b(f.size()),
        h(f.size()),
        extent{B, N, H, D},
        stride{H * N * D, tokens_outer ? H * D : D, tokens_outer ? D : N * D, 1} {
    convert(std::span<bf16>(b), std::span<const float>(f.data(), f.size()));
    convert(std::span<f16>(h), std::span<const float>(f.data(), f.size()));
  }
  template <class T>
  View4<T> view() {
    if constexpr (std::is_same_v<T, float>) return {f.data(), extent, stride};
    if constexpr (std::is_same_v<T, bf16>) return {b.data(), extent, stride};
    if constexpr (std::is_same_v<T, f16>) return {h.data(), extent, stride};
  }
};

// Calls body.template operator()<T>() with T the benchmark's dtype.
template <class Body>
void by_dtype(benchmark::State& state, Body&& body) {
  switch (state.range(0)) {
    case 0:
      body.template operator()<float>();
      break;
    case 1:
      body.template operator()<bf16>();
      break;
    default:
      body.template operator()<f16>();
      break;
  }
}

void BM_LinearForward(benchmark::State& state) {
  const ThreadScope threads(kThreads);
  Any q(4, 8, 16384, 64, 1), k(4, 8, 16384, 64, 2), v(4, 8, 16384, 64, 3), out(4, 8, 16384, 64, 4);
  by_dtype(state, [&]<class T>() {
    for (auto _ : state) {
      linear_attention_forward(out.view<T>(), q.view<T>(), k.view<T>(), v.view<T>());
      benchmark::ClobberMemory();
    }
  });
}

void BM_SoftmaxForwardBackward(benchmark::State& state) {
  const ThreadScope threads(kThreads);
  const int64_t N = 4096;
  Any q(1, 8, N, 64, 1), k(1, 8, N, 64, 2), v(1, 8, N, 64, 3), out(1, 8, N, 64, 4), dout(1, 8, N, 64, 5),
      dq(1, 8, N, 64, 6), dk(1, 8, N, 64, 7), dv(1, 8, N, 64, 8);
  std::vector<float> lse(size_t(8 * N));
  by_dtype(state, [&]<class T>() {
    for (auto _ : state) {
      softmax_attention_forward(out.view<T>(), lse, q.view<T>(), k.view<T>(), v.view<T>());
      softmax_attention_backward(dq.view<T>(), dk.view<T>(), dv.view<T>(), dout.view<T>(), q.view<T>(), k.view<T>(),
                                 v.view<T>(), out.view<T>(), lse);
      benchmark::ClobberMemory();
    }
  });
}

// Which decode step a BM_*Step row times.
enum class Step { linear, gla, gated_delta };

// Tokens against a state of B·H heads (B = 1, H = 64: 1 MiB of fp32 S, past a Zen 3's L2; B = 128, H = 64:
// 128 MiB in fp32 and 64 MiB in bf16, both past a 32 MiB L3, as a batch of sequences or a model's layers would
// be), 256 tokens per iteration (16 for the large state). q, k, v, out (and GLA's g, the gated delta rule's β
// and g) are [B, N, H, ·]: a decoded token's rows of all heads side by side, as a model's projection writes them.
void DecodeSteps(benchmark::State& state, Step step) {
  const ThreadScope threads(kThreads);
  const int64_t B = state.range(1), H = state.range(2), steps = B * H >= 1024 ? 16 : 256;
  Any q(B, H, steps, 64, 1, true), k(B, H, steps, 64, 2, true), v(B, H, steps, 64, 3, true),
      out(B, H, steps, 64, 4, true), beta(B, H, steps, 1, 5, true, 0.0f, 1.0f),
      g(B, H, steps, step == Step::gla ? 64 : 1, 6, true, -0.5f, -0.01f);
  DecayedAttentionOptions gla;
  gla.decay = Decay::key;
  DeltaRuleOptions gated;
  gated.gate = DeltaGate::token;
  gated.qk_l2norm = true;
  const std::string name = step == Step::linear ? "elu"
                           : step == Step::gla  ? decay_name(gla.decay)
                                                : delta_name(gated.gate);
  by_dtype(state, [&]<class T>() {
    RecurrentState s(B, H, 64, 64, name, std::is_same_v<T, float> ? DType::f32 : DType::bf16);
    for (auto _ : state) {
      for (int64_t n = 0; n < steps; ++n) {
        auto token = [n]<class U>(View4<U> x) {
          x.data += n * x.stride[1];
          x.extent[1] = 1;
          return x;
        };
        if (step == Step::linear)
          recurrent_step(token(out.view<T>()), token(q.view<T>()), token(k.view<T>()), token(v.view<T>()), s);
        else if (step == Step::gla)
          decayed_step(token(out.view<T>()), token(q.view<T>()), token(k.view<T>()), token(v.view<T>()),
                       token(g.view<T>()), s, gla);
        else
          delta_rule_step(token(out.view<T>()), token(q.view<T>()), token(k.view<T>()), token(v.view<T>()),
                          token(beta.view<T>()), token(g.view<T>()), s, gated);
      }
      benchmark::ClobberMemory();
    }
    state.SetItemsProcessed(state.iterations() * steps);
  });
}
void BM_RecurrentStep(benchmark::State& state) { DecodeSteps(state, Step::linear); }
void BM_GlaStep(benchmark::State& state) { DecodeSteps(state, Step::gla); }
void BM_GatedDeltaRuleStep(benchmark::State& state) { DecodeSteps(state, Step::gated_delta); }

void BM_SoftmaxDecode(benchmark::State& state) {
  const ThreadScope threads(kThreads);
  const int64_t context = state.range(1);
  Any q(1, 8, 1, 64, 1), k(1, 8, context, 64, 2), v(1, 8, context, 64, 3), out(1, 8, 1, 64, 4);
  std::vector<float> lse(8);
  SoftmaxAttentionOptions o;
  o.causal = true;
  by_dtype(state, [&]<class T>() {
    for (auto _ : state) {
      softmax_attention_forward(out.view<T>(), lse, q.view<T>(), k.view<T>(), v.view<T>(), o);
      benchmark::ClobberMemory();
    }
    state.SetItemsProcessed(state.iterations());
  });
}

BENCHMARK(BM_LinearForward)->ArgName("dtype")->DenseRange(0, 2)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_SoftmaxForwardBackward)->ArgName("dtype")->DenseRange(0, 2)->UseRealTime()->Unit(benchmark::kMillisecond);
// The decode steps' shapes: dtype × (B1 H8, and for the linear step B1 H64, and B128 H64, S past the L3).
void DecodeShapes(benchmark::internal::Benchmark* b, bool with_b1h64) {
  b->ArgNames({"dtype", "batch", "heads"});
  b->ArgsProduct({{0, 1, 2}, {1}, with_b1h64 ? std::vector<int64_t>{8, 64} : std::vector<int64_t>{8}});
  b->ArgsProduct({{0, 1, 2}, {128}, {64}});
  b->UseRealTime()->Unit(benchmark::kMicrosecond);
}
BENCHMARK(BM_RecurrentStep)->Apply([](benchmark::internal::Benchmark* b) { DecodeShapes(b, true); });
BENCHMARK(BM_GlaStep)->Apply([](benchmark::internal::Benchmark* b) { DecodeShapes(b, false); });
BENCHMARK(BM_GatedDeltaRuleStep)->Apply([](benchmark::internal::Benchmark* b) { DecodeShapes(b, false); });
BENCHMARK(BM_SoftmaxDecode)
    ->ArgNames({"dtype", "context"})
    ->ArgsProduct({{0, 1, 2}, {16384, 65536}})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace linattn::bench

BENCHMARK_MAIN();
