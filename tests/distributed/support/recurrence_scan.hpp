#pragma once
// What the recurrences' distributed tests share (decay_scan_test.cpp, delta_scan_test.cpp): the shape
// (B = 2, N = 83, H = 2, K = V = 8), the family's tensors drawn once, the run of a forward and a backward on
// this rank's shard of every tensor (gathered, so that every rank holds the whole result) or on the whole
// sequence in one process, and the comparisons of the results against each other and the fp64 oracle.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <functional>
#include <string>
#include <vector>

#include "linattn/error.hpp"
#include "linattn/reference.hpp"
#include "support/mpi_support.hpp"
#include "support/tensors.hpp"

namespace linattn::test {

constexpr int64_t B = 2, N = 83, H = 2, K = 8, V = 8;

// A family's tensors in its argument order (q, k, v, then its own: β, a gate of gate_cols columns, 0 for
// none), q and k [B, N, H, ·], v and the family's own [B, N, HV, ·] (HV = H, or a multiple of it: grouped
// value heads), and the output gradient dout [B, N, HV, V].
struct ScanInputs {
  std::vector<std::string> names;
  std::vector<testing::Tensor32> tensors;
  testing::Tensor32 dout;
  bool given(size_t i) const { return tensors[i].view.extent[0] > 0; }
};

// Results: out, then the gradient of each tensor (empty for one not given).
using Results = std::vector<std::vector<float>>;
template <size_t N_>
using Views = std::array<ConstTensorView, N_>;
template <size_t N_>
using Grads = std::array<TensorView, N_>;

// One forward(out, tensors) and one backward(grads, dout, tensors) of every tensor of `in`, on this rank's
// shard [offsets[r], offsets[r + 1]) gathered afterwards, or (offsets empty) on the whole sequence.
template <size_t N_>
Results run_scan(const ScanInputs& in, const std::vector<int64_t>& offsets,
                 const std::function<void(TensorView, const Views<N_>&)>& forward,
                 const std::function<void(const Grads<N_>&, ConstTensorView, const Views<N_>&)>& backward) {
  const int r = world_rank();
  const bool whole = offsets.empty();
  const int64_t begin = whole ? 0 : offsets[r], n = whole ? N : offsets[r + 1] - offsets[r];
  auto slice = [&](TensorView x) { return whole ? x : seq_slice(x, begin, n); };
  std::vector<Gathered> results;
  results.reserve(N_ + 1);  // the views point into each Gathered's data
  results.emplace_back(std::array<int64_t, 4>{B, N, in.tensors[2].view.extent[2], V});  // v's heads
  Views<N_> x;
  Grads<N_> d;
  for (size_t i = 0; i < N_; ++i) {
    const auto& e = in.tensors[i].view.extent;
    results.emplace_back(in.given(i) ? std::array<int64_t, 4>{B, N, e[2], e[3]} : std::array<int64_t, 4>{B, N, H, 1});
    x[i] = in.given(i) ? ConstTensorView(slice(in.tensors[i].view)) : ConstTensorView();
  }
  for (size_t i = 0; i < N_; ++i) d[i] = in.given(i) ? slice(results[i + 1].view) : TensorView();
  forward(slice(results[0].view), x);
  backward(d, slice(in.dout.view), x);
  Results got;
  for (size_t i = 0; i <= N_; ++i) {
    if (!whole) results[i].gather();
    got.push_back(i == 0 || in.given(i - 1) ? results[i].data : std::vector<float>());
  }
  return got;
}

// "out", or the gradient's name ("dq", …) of result i.
inline std::string result_name(const ScanInputs& in, size_t i) { return i ? "d" + in.names[i - 1] : "out"; }

// Each result of got within `tolerance` (relative_error) of want's, named in the message.
inline void expect_close(const ScanInputs& in, const Results& got, const Results& want, double tolerance) {
  for (size_t i = 0; i < got.size(); ++i) {
    if (!want[i].empty()) {
      EXPECT_LT(relative_error(got[i], want[i]), tolerance) << result_name(in, i);
    }
  }
}
// The same against the oracle's tensors (nullptr: a gradient not given).
inline void expect_close(const ScanInputs& in, const Results& got, const std::vector<const reference::Tensor*>& want,
                         double tolerance) {
  for (size_t i = 0; i < got.size(); ++i) {
    if (want[i]) {
      EXPECT_LT(relative_error(got[i], *want[i]), tolerance) << result_name(in, i);
    }
  }
}

// The oracle's copies of the tensors (an empty tensor for one not given) and a pointer to each given one.
struct Oracle {
  std::vector<reference::Tensor> tensors;
  reference::Tensor dout;
  explicit Oracle(const ScanInputs& in) : dout(reference::to_double(in.dout.view)) {
    for (size_t i = 0; i < in.tensors.size(); ++i)
      tensors.push_back(in.given(i) ? reference::to_double(in.tensors[i].view) : reference::Tensor());
  }
  const reference::Tensor* ptr(size_t i) const { return tensors[i].extent[0] > 0 ? &tensors[i] : nullptr; }
};

// Tokens [begin, begin + n) of tensor i of in.
inline ConstTensorView shard(const ScanInputs& in, size_t i, int64_t begin, int64_t n) {
  return seq_slice(in.tensors[i].view, begin, n);
}

// The message of the linattn::Error that call throws ("" when it throws none).
inline std::string error_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace linattn::test
