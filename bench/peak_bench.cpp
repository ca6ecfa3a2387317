// The machine's own ceilings, measured in the same run as the operators: the fp32 FMA peak (Highway,
// runtime dispatch), the bf16 dot-product peak (x86 with AVX512_BF16) and the stream-triad memory
// bandwidth, each for 1 and 2 threads.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "peak_bench.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace linattn::bench {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// 12 independent FMA chains: FMA latency (4 cycles) × 2 pipes needs at least 8 in flight, and 12 + 2
// operands fit in the 16 registers of AVX2 as well as the 32 of AVX-512. Returns a value that depends on
// every chain so the compiler keeps them; *flops receives the flops performed.
float FmaChains(int64_t iterations, float x, double* flops) {
  const hn::ScalableTag<float> d;
  // acc ← acc·m + a converges to a / (1 − m) = 1: no overflow, no denormals.
  const auto m = hn::Set(d, 0.999f), a = hn::Set(d, 0.001f);
  // Distinct starting values, or the compiler merges identical chains into one.
  auto a0 = hn::Set(d, x), a1 = hn::Set(d, x + 0.01f), a2 = hn::Set(d, x + 0.02f), a3 = hn::Set(d, x + 0.03f);
  auto a4 = hn::Set(d, x + 0.04f), a5 = hn::Set(d, x + 0.05f), a6 = hn::Set(d, x + 0.06f), a7 = hn::Set(d, x + 0.07f);
  auto a8 = hn::Set(d, x + 0.08f), a9 = hn::Set(d, x + 0.09f), a10 = hn::Set(d, x + 0.10f);
  auto a11 = hn::Set(d, x + 0.11f);
  for (int64_t i = 0; i < iterations; ++i) {
    a0 = hn::MulAdd(a0, m, a), a1 = hn::MulAdd(a1, m, a), a2 = hn::MulAdd(a2, m, a), a3 = hn::MulAdd(a3, m, a);
    a4 = hn::MulAdd(a4, m, a), a5 = hn::MulAdd(a5, m, a), a6 = hn::MulAdd(a6, m, a), a7 = hn::MulAdd(a7, m, a);
    a8 = hn::MulAdd(a8, m, a), a9 = hn::MulAdd(a9, m, a), a10 = hn::MulAdd(a10, m, a);
    a11 = hn::MulAdd(a11, m, a);
  }
  *flops = double(iterations) * 12 * 2 * double(hn::Lanes(d));
  const auto s = hn::Add(hn::Add(hn::Add(hn::Add(a0, a1), hn::Add(a2, a3)), hn::Add(hn::Add(a4, a5), hn::Add(a6, a7))),
                         hn::Add(hn::Add(a8, a9), hn::Add(a10, a11)));
  return hn::GetLane(hn::SumOfLanes(d, s));
}

const char* FmaTarget() { return hwy::TargetName(HWY_TARGET); }

}  // namespace HWY_NAMESPACE
}  // namespace linattn::bench
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <benchmark/benchmark.h>
#include <omp.h>

#include <cstdint>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace linattn::bench {
HWY_EXPORT(FmaChains);
HWY_EXPORT(FmaTarget);

namespace {

// fp32 FMA peak: every thread runs its own chains. Args: threads.
void BM_FmaPeak(benchmark::State& state) {
  const int threads = int(state.range(0));
  constexpr int64_t kIterations = 1 << 22;
  double flops = 0;
  for (auto _ : state) {
    double total = 0;
#pragma omp parallel num_threads(threads) reduction(+ : total)
    {
      double f = 0;
      benchmark::DoNotOptimize(HWY_DYNAMIC_DISPATCH(FmaChains)(kIterations, float(omp_get_thread_num()), &f));
      total += f;
    }
    flops = total;
  }
  state.counters["FLOPS"] = benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["threads"] = threads;
  state.SetLabel(HWY_DYNAMIC_DISPATCH(FmaTarget)());
}
BENCHMARK(BM_FmaPeak)->ArgName("threads")->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);

#if HWY_TARGETS & HWY_AVX2
// The same chains on 256-bit vectors (the AVX2 target): the ceiling of code that does not use AVX-512.
void BM_FmaPeakAvx2(benchmark::State& state) {
  if (!(hwy::SupportedTargets() & HWY_AVX2)) return state.SkipWithError("no AVX2");
  double flops = 0;
  for (auto _ : state) benchmark::DoNotOptimize(N_AVX2::FmaChains(int64_t(1) << 22, 1.0f, &flops));
  state.counters["FLOPS"] = benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["threads"] = 1;
}
BENCHMARK(BM_FmaPeakAvx2)->UseRealTime()->Unit(benchmark::kMillisecond);
#endif

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
// 12 independent chains of AVX512_BF16's vdpbf16ps (two bf16 products into each fp32 lane: 64 flops):
// the ceiling of a bf16 kernel built on it, beside BM_FmaPeak (docs/half-precision.md: on the Xeon of
// the measurement it runs at half the fp32 FMA's rate, so linattn's bf16 tiles multiply in fp32).
__attribute__((target("avx512f,avx512bf16"))) float DotBf16Chains(int64_t iterations, double* flops) {
  __m512 acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm512_set1_ps(float(i));
  __m512bh x = (__m512bh)_mm512_set1_epi32(0x3f803f80);  // (1, 1): acc grows by 2 a step, exactly
  for (int64_t s = 0; s < iterations; ++s) {
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) acc[i] = _mm512_dpbf16_ps(acc[i], x, x);
    __asm__ volatile("" : "+v"(x));  // the operand stays opaque, so the chains stay
  }
  *flops = double(iterations) * 12 * 64;
  for (int i = 1; i < 12; ++i) acc[0] = _mm512_add_ps(acc[0], acc[i]);
  return _mm512_reduce_add_ps(acc[0]);
}

void BM_Bf16DotPeak(benchmark::State& state) {
  if (!__builtin_cpu_supports("avx512bf16")) return state.SkipWithError("no AVX512_BF16");
  const int threads = int(state.range(0));
  double flops = 0;
  for (auto _ : state) {
    double total = 0;
#pragma omp parallel num_threads(threads) reduction(+ : total)
    {
      double f = 0;
      benchmark::DoNotOptimize(DotBf16Chains(int64_t(1) << 21, &f));
      total += f;
    }
    flops = total;
  }
  state.counters["FLOPS"] = benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["threads"] = threads;
}
BENCHMARK(BM_Bf16DotPeak)->ArgName("threads")->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);
#endif

// Stream triad a = b + s·c over arrays far larger than the caches (3 × 64 MiB). Bytes counted as in
// STREAM: 3 × 4 per element (the write-allocate read of a is not counted). Args: threads.
void BM_StreamTriad(benchmark::State& state) {
  const int threads = int(state.range(0));
  constexpr int64_t n = int64_t(1) << 24;
  std::vector<float> a(n), b(n), c(n);
  // First touch by the threads that will stream each part.
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t i = 0; i < n; ++i) a[i] = 0.0f, b[i] = 1.0f, c[i] = 2.0f;
  const float s = 3.0f;
  float* pa = a.data();
  const float* pb = b.data();
  const float* pc = c.data();
  for (auto _ : state) {
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t i = 0; i < n; ++i) pa[i] = pb[i] + s * pc[i];
    benchmark::ClobberMemory();
  }
  benchmark::DoNotOptimize(a.data());
  state.SetBytesProcessed(state.iterations() * 3 * n * int64_t(sizeof(float)));
  state.counters["threads"] = threads;
}
BENCHMARK(BM_StreamTriad)->ArgName("threads")->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace linattn::bench

BENCHMARK_MAIN();
#endif  // HWY_ONCE
