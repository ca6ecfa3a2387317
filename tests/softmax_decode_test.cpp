// Exact softmax attention with few queries (decoding against a KV cache, Nq ≤ 16): the forward
// splits each head's keys into fixed chunks and merges them in order (see docs/softmax.md). Checked
// against the fp64 oracle over Nq, Nk, masks and layouts; bitwise the same for any thread count;
// fully masked rows and NaN reach exactly the rows that depend on them.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <vector>

#include "linattn/reference.hpp"
#include "linattn/softmax_attention.hpp"
#include "linattn/threads.hpp"
#include "support/tensors.hpp"

namespace linattn {
namespace {

using testing::Layout;
using testing::relative_error;
using testing::Tensor32;

// As in softmax_attention_test.cpp: ~80 ulp, for sums of up to Nk·max(D, E) rounded products.
constexpr double kBound = 1e-5;

struct Decode {
  Tensor32 q, k, v, out;
  std::vector<float> lse;
  std::vector<int64_t> lengths;  // options.key_lengths views it
  SoftmaxAttentionOptions options;

  Decode(int64_t B, int64_t H, int64_t Nq, int64_t Nk, int64_t D, int64_t E, Layout layout, bool causal,
         std::vector<int64_t> key_lengths = {}, uint64_t seed = 3) {
    std::mt19937_64 rng(seed);
    const Layout other = testing::kAllLayouts[(int(layout) + 1) % 3];
    q = testing::random_tensor({B, Nq, H, D}, layout, rng);
    k = testing::random_tensor({B, Nk, H, D}, other, rng);
    v = testing::random_tensor({B, Nk, H, E}, other, rng);
    out = testing::make_tensor({B, Nq, H, E}, layout);
    lse.assign(size_t(B * H * Nq), std::numeric_limits<float>::quiet_NaN());
    options.causal = causal;
    lengths = std::move(key_lengths);
    options.key_lengths = lengths;
  }
  Decode(const Decode&) = delete;  // options.key_lengths points into `lengths`
  Decode& operator=(const Decode&) = delete;
  void forward() { softmax_attention_forward(out.view, lse, q.view, k.view, v.view, options); }
  void expect_matches_oracle() {
    forward();
    std::vector<double> want_lse;
    const auto want = reference::softmax_attention_forward(reference::to_double(q.view), reference::to_double(k.view),
                                                           reference::to_double(v.view), options, &want_lse);
    EXPECT_LE(relative_error(out.view, want), kBound);
    EXPECT_LE(relative_error(lse, want_lse), kBound);
  }
};

bool bitwise_equal(const Tensor32& a, const Tensor32& b) {
  return a.storage.size() == b.storage.size() &&
         std::memcmp(a.storage.data(), b.storage.data(), a.storage.size() * sizeof(float)) == 0;
}

// Nq ∈ {1, 2, 3, 17} × Nk ∈ {1, 63, 65, 1000, 5000} (5000: three key chunks, the last partial),
// causal and not, the layouts in turn, key lengths on every other shape, E = 64 (v read in place)
// and E = 59 (v packed).
TEST(SoftmaxDecode, MatchesOracle) {
  int index = 0;
  for (int64_t Nq : {1, 2, 3, 17}) {
    for (int64_t Nk : {1, 63, 65, 1000, 5000}) {
      for (bool causal : {false, true}) {
        const Layout layout = testing::kAllLayouts[index % 3];
        const int64_t E = index % 4 == 3 ? 59 : 64;
        std::vector<int64_t> lengths;
        if (index % 2 == 1) lengths = {Nk, Nk / 2 + 1};
        std::ostringstream trace;
        trace << "Nq " << Nq << " Nk " << Nk << (causal ? " causal " : " ") << testing::layout_name(layout) << " E "
              << E << (lengths.empty() ? "" : " key_lengths");
        SCOPED_TRACE(trace.str());
        Decode run(2, 2, Nq, Nk, 64, E, layout, causal, lengths, uint64_t(index));
        run.expect_matches_oracle();
        ++index;
      }
    }
  }
}

// Key lengths around the chunk boundary (2048 keys), including 0 (no key: out = 0, lse = −∞).
TEST(SoftmaxDecode, KeyLengthsAroundChunkBoundaries) {
  const std::vector<int64_t> lengths = {0, 1, 2047, 2048, 2049, 4096, 4097};
  Decode run(int64_t(lengths.size()), 1, 2, 4097, 16, 16, Layout::bhnd, true, lengths);
  run.expect_matches_oracle();
  for (int64_t i = 0; i < 2; ++i) {
    EXPECT_EQ(run.lse[size_t(i)], -std::numeric_limits<float>::infinity());
    for (int64_t e = 0; e < 16; ++e) EXPECT_EQ(run.out.view(0, i, 0, e), 0.0f);
  }
}

// Causal with Nq > Nk: the first Nq − Nk queries see no key.
TEST(SoftmaxDecode, RowsThatSeeNoKey) {
  Decode run(1, 3, 3, 1, 16, 16, Layout::padded, true);
  run.expect_matches_oracle();
  for (int64_t h = 0; h < 3; ++h)
    for (int64_t i = 0; i < 2; ++i) {
      EXPECT_EQ(run.lse[size_t(h * 3 + i)], -std::numeric_limits<float>::infinity());
      for (int64_t e = 0; e < 16; ++e) EXPECT_EQ(run.out.view(0, i, h, e), 0.0f);
    }
}

// Bitwise the same for 1, 2 and 3 threads: one head's five key chunks are spread over the threads.
TEST(SoftmaxDecode, DeterministicForAnyThreadCount) {
  const int before = num_threads();
  for (int64_t Nq : {1, 5}) {
    Decode one(1, 1, Nq, 9000, 64, 64, Layout::bnhd, true, {8999});
    set_num_threads(1);
    one.forward();
    for (int threads : {2, 3}) {
      Decode many(1, 1, Nq, 9000, 64, 64, Layout::bnhd, true, {8999});
      set_num_threads(threads);
      many.forward();
      EXPECT_TRUE(bitwise_equal(one.out, many.out)) << threads;
      EXPECT_EQ(std::memcmp(one.lse.data(), many.lse.data(), one.lse.size() * sizeof(float)), 0) << threads;
    }
  }
  set_num_threads(before);
}

// Odd head dims (with Nq = 1, the masked tail of a key row), and k and v whose head dim is strided (k through the
// tile product instead of the row dot products, v packed), k and v shared by all heads (stride 0).
TEST(SoftmaxDecode, OddDimsAndStridedHeadDim) {
  for (int64_t Nq : {1, 3})
    for (int64_t D : {1, 17, 59, 130}) {
      SCOPED_TRACE(D);
      Decode run(1, 3, Nq, 1000, D, 59, Layout::padded, true, {}, uint64_t(D));
      run.expect_matches_oracle();
    }
  for (int64_t Nq : {1, 4}) {
    SCOPED_TRACE(Nq);
    const int64_t Nk = 2100, H = 2, D = 24, E = 32;
    Decode run(1, H, Nq, Nk, D, E, Layout::bnhd, true, {2099});
    std::mt19937_64 rng(9);
    Tensor32 k2 = testing::random_tensor({1, Nk, 1, 2 * D}, Layout::bnhd, rng);
    Tensor32 v2 = testing::random_tensor({1, Nk, 1, 2 * E}, Layout::bnhd, rng);
    run.k.view = TensorView(k2.storage.data(), {1, Nk, H, D}, {Nk * 2 * D, 2 * D, 0, 2});
    run.v.view = TensorView(v2.storage.data(), {1, Nk, H, E}, {Nk * 2 * E, 2 * E, 0, 2});
    run.expect_matches_oracle();
  }
}

bool row_finite(const Tensor32& t, int64_t n, int64_t h) {
  for (int64_t e = 0; e < t.view.dim(); ++e)
    if (!std::isfinite(t.view(0, n, h, e))) return false;
  return true;
}

// A NaN reaches exactly the rows that see it (causal against Nk = 5000: query i sees keys
// ≤ i + 5000 − Nq), and nothing sees a NaN past the key length. Nq = 2 forms the scores as dot
// products along the key rows, Nq = 3 by the tile product.
TEST(SoftmaxDecode, NanReachesExactlyTheRowsThatSeeIt) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (int64_t Nq : {2, 3}) {
    SCOPED_TRACE(Nq);
    {  // NaN in k[4998] (the last chunk): the rows i ≥ Nq − 2 of that head.
      Decode run(1, 2, Nq, 5000, 16, 16, Layout::bnhd, true);
      run.k.view(0, 4998, 1, 3) = nan;
      run.forward();
      for (int64_t i = 0; i < Nq; ++i) EXPECT_EQ(row_finite(run.out, i, 1), i < Nq - 2) << i;
      for (int64_t i = 0; i < Nq; ++i) EXPECT_TRUE(row_finite(run.out, i, 0)) << i;
    }
    {  // NaN in v[100] (the first chunk): every row of that head.
      Decode run(1, 2, Nq, 5000, 16, 16, Layout::bnhd, true);
      run.v.view(0, 100, 0, 0) = nan;
      run.forward();
      for (int64_t i = 0; i < Nq; ++i) EXPECT_FALSE(row_finite(run.out, i, 0)) << i;
      for (int64_t i = 0; i < Nq; ++i) EXPECT_TRUE(row_finite(run.out, i, 1)) << i;
    }
    {  // NaN in q: that row only, out and lse.
      Decode run(1, 2, Nq, 5000, 16, 16, Layout::bnhd, true);
      run.q.view(0, Nq - 1, 1, 0) = nan;
      run.forward();
      for (int64_t i = 0; i < Nq; ++i) EXPECT_EQ(row_finite(run.out, i, 1), i != Nq - 1) << i;
      EXPECT_TRUE(std::isnan(run.lse[size_t(2 * Nq - 1)]));
      EXPECT_TRUE(std::isfinite(run.lse[size_t(Nq - 1)]));
    }
    {  // NaN in k and v beyond the key length: nothing sees them.
      Decode run(1, 2, Nq, 5000, 16, 16, Layout::bnhd, false, {4000});
      run.k.view(0, 4001, 0, 0) = nan;
      run.v.view(0, 4000, 1, 0) = nan;
      run.forward();
      EXPECT_TRUE(testing::all_finite(run.out.view));
    }
  }
}

}  // namespace
}  // namespace linattn
