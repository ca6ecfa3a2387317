#pragma once
// What every benchmark program shares: random inputs in [B, H, N, D] storage (the layout PyTorch and
// the prefix-sum baseline use), thread control, and the FLOPS / bytes counters, which come from the
// operator table's flop and byte models (table/operator_table.hpp; docs/performance.md).
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdlib>
#include <new>
#include <random>
#include <vector>

#include "linattn/threads.hpp"
#include "linattn/view.hpp"
#include "operator_table.hpp"

namespace linattn::bench {

// Allocates on 64-byte boundaries, as PyTorch's CPU allocator does for every tensor: the inputs the
// comparisons run on have the same alignment on both sides. (With malloc's 16 bytes a 64-float row
// straddles five cache lines instead of four; the linear forward measured ~3% slower.)
template <class T>
struct CacheLineAllocator {
  using value_type = T;
  CacheLineAllocator() = default;
  template <class U>
  CacheLineAllocator(const CacheLineAllocator<U>&) {}
  T* allocate(size_t n) {
    void* p = std::aligned_alloc(64, (n * sizeof(T) + 63) / 64 * 64);
    if (!p) throw std::bad_alloc();
    return static_cast<T*>(p);
  }
  void deallocate(T* p, size_t) { std::free(p); }
  template <class U>
  bool operator==(const CacheLineAllocator<U>&) const {
    return true;
  }
};
using Floats = std::vector<float, CacheLineAllocator<float>>;

// n floats uniform in [lo, hi), reproducible from seed.
inline Floats random_floats(int64_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  Floats x(static_cast<size_t>(n));
  for (float& value : x) value = dist(rng);
  return x;
}

// How a benchmark's tensors are stored: [B, H, N, D] (PyTorch's usual attention layout, each head's
// rows one stretch) or [B, N, H, D] (the library's logical order, a token's heads side by side).
enum class Storage { bhnd, bnhd };

// A buffer in that storage and its [B, N, H, D] view.
struct Tensor {
  Floats data;
  TensorView view;
  Tensor(int64_t B, int64_t H, int64_t N, int64_t D, uint64_t seed, Storage storage = Storage::bhnd)
      : data(random_floats(B * H * N * D, seed)),
        view(storage == Storage::bhnd ? bhnd(data.data(), B, H, N, D) : bnhd(data.data(), B, N, H, D)) {}
};

// q, k, v [B, H, N, D|E] and the tensors of a forward (out) and a backward (dout, dq, dk, dv) of
// attention with as many queries as keys.
struct Problem {
  int64_t B, H, N, D, E;
  Tensor q, k, v, out, dout, dq, dk, dv;
  Problem(int64_t B_, int64_t H_, int64_t N_, int64_t D_, int64_t E_, Storage storage = Storage::bhnd)
      : B(B_),
        H(H_),
        N(N_),
        D(D_),
        E(E_),
        q(B, H, N, D, 1, storage),
        k(B, H, N, D, 2, storage),
        v(B, H, N, E, 3, storage),
        out(B, H, N, E, 4, storage),
        dout(B, H, N, E, 5, storage),
        dq(B, H, N, D, 6, storage),
        dk(B, H, N, D, 7, storage),
        dv(B, H, N, E, 8, storage) {}
  // The operands of a forward (q, k, v, out) and of a backward (dout, dq, dk, dv too).
  table::Operands operands() const {
    table::Operands a;
    a.q = q.view, a.k = k.view, a.v = v.view, a.dout = dout.view;
    a.out = out.view, a.dq = dq.view, a.dk = dk.view, a.dv = dv.view;
    return a;
  }
};

// The table's sizes of B × H heads of Nq queries over Nk keys, head dims D and E.
inline table::Sizes sizes(int64_t B, int64_t H, int64_t Nq, int64_t Nk, int64_t D, int64_t E) {
  table::Sizes s;
  s.batch = B, s.heads = H, s.seq_q = Nq, s.seq_k = Nk, s.dim = D, s.value_dim = E;
  return s;
}

// Registers sizes × threads {1, 2} (args "N" and "threads"), timed by the wall clock in milliseconds.
template <int64_t... kSizes>
void sizes_by_threads(benchmark::internal::Benchmark* b) {
  b->ArgNames({"N", "threads"})->ArgsProduct({{kSizes...}, {1, 2}})->UseRealTime()->Unit(benchmark::kMillisecond);
}

// The operators' thread count for one benchmark, restored afterwards.
class ThreadScope {
 public:
  explicit ThreadScope(int threads) { set_num_threads(threads); }
  ~ThreadScope() { set_num_threads(0); }
  ThreadScope(const ThreadScope&) = delete;
  ThreadScope& operator=(const ThreadScope&) = delete;
};

// FLOPS (flops per second) and bytes_per_second from per-iteration counts; threads echoed for the report.
inline void set_counters(benchmark::State& state, double flops, double bytes, int threads) {
  state.counters["FLOPS"] = benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["bytes_per_second"] = benchmark::Counter(bytes, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["threads"] = threads;
}
// The same from the table's models of one forward (or one backward) of `op` at sizes `s`.
inline void set_counters(benchmark::State& state, const table::Operator& op, const table::Sizes& s, bool backward,
                         int threads) {
  set_counters(state, backward ? op.backward_flops(s) : op.forward_flops(s),
               backward ? op.backward_bytes(s) : op.forward_bytes(s), threads);
}

// Times the forward (or the backward) of `op` at sizes `s` on `operands`, then sets its counters.
inline void time_operator(benchmark::State& state, const table::Operator& op, const table::Sizes& s,
                          const table::Operands& operands, bool backward, int threads) {
  const table::Options options = op.options(s);               // outside the loop: a FAVOR+ draw is not free
  if (backward && op.has_lse) op.forward(operands, options);  // out and lse, which the backward reads
  for (auto _ : state) {
    (backward ? op.backward : op.forward)(operands, options);
    benchmark::ClobberMemory();
  }
  set_counters(state, op, s, backward, threads);
}

}  // namespace linattn::bench
