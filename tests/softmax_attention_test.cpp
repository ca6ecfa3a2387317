// Exact softmax attention (fp32, tiled) against the fp64 oracle: out, lse, dq, dk, dv over awkward
// shapes, all three layouts, causal and cross-attention, key lengths, overflow-prone inputs, fully
// masked rows, non-finite inputs and thread-count determinism.
#include "linattn/softmax_attention.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <sstream>
#include <vector>

#include "linattn/reference.hpp"
#include "linattn/threads.hpp"
#include "support/tensors.hpp"

namespace linattn {
namespace {

using testing::Layout;
using testing::relative_error;
using testing::Tensor32;

// fp32 against fp64, relative to the tensor's largest magnitude. Every output is a sum of at most
// Nk·max(D, E) rounded products whose errors partly cancel; 1e-5 ≈ 80 ulp covers N = 1000.
constexpr double kBound = 1e-5;

struct Case {
  int64_t B, H, Nq, Nk, D, E;
  Layout layout;
  bool causal = false;
  std::vector<int64_t> key_lengths = {};
  std::optional<float> scale = {};
  float lo = -1, hi = 1;  // inputs q and k drawn from [lo, hi)
};

std::string describe(const Case& c) {
  std::ostringstream s;
  s << "B" << c.B << "_H" << c.H << "_Nq" << c.Nq << "_Nk" << c.Nk << "_D" << c.D << "_E" << c.E << "_"
    << testing::layout_name(c.layout) << (c.causal ? "_causal" : "") << (c.key_lengths.empty() ? "" : "_keylengths")
    << (c.scale ? "_scaled" : "");
  return s.str();
}

// The inputs, outputs and gradients of one case; k, v and their gradients use the next layout, so
// that every call mixes layouts.
struct Trial {
  Tensor32 q, k, v, dout, out, dq, dk, dv;
  std::vector<float> lse;
  SoftmaxAttentionOptions options;

  explicit Trial(const Case& c, uint64_t seed = 7) {
    std::mt19937_64 rng(seed);
    const Layout other = testing::kAllLayouts[(int(c.layout) + 1) % 3];
    q = testing::random_tensor({c.B, c.Nq, c.H, c.D}, c.layout, rng, c.lo, c.hi);
    k = testing::random_tensor({c.B, c.Nk, c.H, c.D}, other, rng, c.lo, c.hi);
    v = testing::random_tensor({c.B, c.Nk, c.H, c.E}, other, rng);
    dout = testing::random_tensor({c.B, c.Nq, c.H, c.E}, c.layout, rng);
    out = testing::make_tensor({c.B, c.Nq, c.H, c.E}, c.layout);
    dq = testing::make_tensor(q.extent(), c.layout);
    dk = testing::make_tensor(k.extent(), other);
    dv = testing::make_tensor(v.extent(), other);
    lse.assign(size_t(c.B * c.H * c.Nq), std::numeric_limits<float>::quiet_NaN());
    options.causal = c.causal;
    options.key_lengths = c.key_lengths;
    options.scale = c.scale;
  }
  void forward() { softmax_attention_forward(out.view, lse, q.view, k.view, v.view, options); }
  void backward() {
    softmax_attention_backward(dq.view, dk.view, dv.view, dout.view, q.view, k.view, v.view, out.view, lse, options);
  }
};

struct Errors {
  double out, lse, dq, dk, dv;
};

// Runs forward and backward and measures each result against the oracle.
Errors errors_of(Trial& run) {
  run.forward();
  run.backward();
  const auto q = reference::to_double(run.q.view), k = reference::to_double(run.k.view),
             v = reference::to_double(run.v.view), dout = reference::to_double(run.dout.view);
  std::vector<double> lse;
  const auto out = reference::softmax_attention_forward(q, k, v, run.options, &lse);
  const auto grads = reference::softmax_attention_backward(dout, q, k, v, run.options);
  return {relative_error(run.out.view, out), relative_error(run.lse, lse), relative_error(run.dq.view, grads.dq),
          relative_error(run.dk.view, grads.dk), relative_error(run.dv.view, grads.dv)};
}

// out, dq, dk, dv within `bound` of the oracle and lse within kBound (lse ≈ the score's size
// plus log Nk keeps a small relative error even where the probabilities do not).
void expect_within(const Errors& e, double bound = kBound) {
  EXPECT_LE(e.out, bound);
  EXPECT_LE(e.lse, kBound);
  EXPECT_LE(e.dq, bound);
  EXPECT_LE(e.dk, bound);
  EXPECT_LE(e.dv, bound);
}

class SoftmaxAgainstOracle : public ::testing::TestWithParam<Case> {};

TEST_P(SoftmaxAgainstOracle, OutLseAndGradientsMatch) {
  Trial run(GetParam());
  expect_within(errors_of(run));
}

// Sparse but covering: every N, D and E of the sweep, E ≠ D, B and H in {1, 3}, each layout,
// Nq ≠ Nk both ways (with and without causal), key lengths from 0 to Nk, an explicit scale.
const Case kCases[] = {
    {1, 1, 1, 1, 1, 1, Layout::bnhd},
    {1, 1, 1, 1, 16, 59, Layout::padded, true},
    {3, 1, 2, 2, 16, 16, Layout::bhnd, true},
    {1, 3, 63, 63, 59, 16, Layout::padded, true},
    {3, 3, 64, 64, 64, 64, Layout::bnhd, false, {0, 1, 64}},
    {3, 1, 65, 65, 128, 59, Layout::bhnd, true, {65, 2, 64}},
    {1, 3, 97, 97, 16, 128, Layout::padded, false, {}, 0.3f},
    {1, 1, 1000, 1000, 16, 16, Layout::bnhd, true},
    {1, 1, 1000, 300, 59, 1, Layout::bhnd, false, {297}},
    // Cross-attention: more keys than queries, and more queries than keys (rows that see no key).
    {1, 3, 65, 97, 64, 16, Layout::padded, true},
    {3, 1, 97, 63, 16, 64, Layout::bnhd, true, {63, 0, 40}},
    {1, 1, 63, 1000, 128, 128, Layout::bhnd, false, {999}},
    {1, 3, 1000, 65, 1, 59, Layout::padded, true},
    {3, 3, 1, 97, 59, 64, Layout::bnhd, true, {97, 1, 50}},
    {1, 1, 97, 1, 64, 1, Layout::bhnd, true},
    // E past 128 (9 vectors of 16: every column-block width of the tile product).
    {1, 3, 65, 64, 32, 130, Layout::bnhd, true},
    // Key packs of over 32 tiles, which the products prefetch tile by tile (one head: the tiles of
    // the head are the threads' items; three: each thread takes heads).
    {1, 1, 130, 2200, 16, 40, Layout::padded, false, {2150}},
    {1, 3, 70, 2177, 24, 16, Layout::bhnd, true},
};

INSTANTIATE_TEST_SUITE_P(Shapes, SoftmaxAgainstOracle, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<Case>& param_info) { return describe(param_info.param); });

// Every key length from 0 to Nk, on a shape that straddles a tile boundary, causal and not.
TEST(SoftmaxAttention, EveryKeyLength) {
  for (bool causal : {false, true}) {
    std::vector<int64_t> lengths;
    for (int64_t n = 0; n <= 65; ++n) lengths.push_back(n);
    Case c{int64_t(lengths.size()), 1, 66, 65, 16, 17, Layout::bnhd, causal, lengths};
    Trial run(c);
    SCOPED_TRACE(causal ? "causal" : "not causal");
    expect_within(errors_of(run));
  }
}

// Scores in [90, 100], where a plain exp overflows fp32 (exp(89) > FLT_MAX): the running max keeps
// every exp ≤ 1. Each score q·k·scale ≈ 95 is a sum of D = 16 rounded fp32 products, off by up to
// ~2 ulp(100) ≈ 1.5e-5 absolute; every probability exp(s − m) inherits that as a relative error,
// and out and the gradients as an error relative to their magnitude (v spans [−1, 1]). Measured
// up to 2.4e-5, hence 4e-5 for these; lse ≈ 95 + log Nk stays within kBound.
TEST(SoftmaxAttention, ScoresWherePlainExpOverflows) {
  constexpr double kOverflowBound = 4e-5;
  for (bool causal : {false, true}) {
    Case c{1, 3, 97, 65, 16, 64, Layout::padded, causal, {}, 1.0f / 16, 9.5f, 10.0f};
    Trial run(c);
    SCOPED_TRACE(causal ? "causal" : "not causal");
    expect_within(errors_of(run), kOverflowBound);
    EXPECT_TRUE(testing::all_finite(run.out.view));
  }
}

// A row that sees no key has out = 0, lse = −∞, and its gradients and contributions are exactly 0.
TEST(SoftmaxAttention, FullyMaskedRows) {
  // Batch 0 sees no key; causal with Nq − Nk = 30 leaves queries 0..29 of batch 1 without a key.
  Case c{2, 3, 100, 70, 16, 24, Layout::bhnd, true, {0, 70}};
  Trial run(c);
  run.forward();
  run.backward();
  const float neg_inf = -std::numeric_limits<float>::infinity();
  for (int64_t h = 0; h < c.H; ++h) {
    for (int64_t i = 0; i < c.Nq; ++i) {
      const bool masked = i < 30;
      for (int64_t b = 0; b < 2; ++b) {
        if (b == 1 && !masked) continue;
        EXPECT_EQ(run.lse[(b * c.H + h) * c.Nq + i], neg_inf);
        for (int64_t e = 0; e < c.E; ++e) EXPECT_EQ(run.out.view(b, i, h, e), 0.0f);
        for (int64_t d = 0; d < c.D; ++d) EXPECT_EQ(run.dq.view(b, i, h, d), 0.0f);
      }
    }
    for (int64_t j = 0; j < c.Nk; ++j) {
      for (int64_t d = 0; d < c.D; ++d) EXPECT_EQ(run.dk.view(0, j, h, d), 0.0f);
      for (int64_t e = 0; e < c.E; ++e) EXPECT_EQ(run.dv.view(0, j, h, e), 0.0f);
    }
  }
  EXPECT_TRUE(testing::all_finite(run.out.view));
}

bool bitwise_equal(const Tensor32& a, const Tensor32& b) {
  return a.storage.size() == b.storage.size() &&
         std::memcmp(a.storage.data(), b.storage.data(), a.storage.size() * sizeof(float)) == 0;
}

// Keys and values shared by all heads (stride 0 over heads, as in multi-query attention): inputs
// may have any non-negative strides; each head's dk and dv are that head's share of the gradient.
TEST(SoftmaxAttention, KeysSharedAcrossHeads) {
  Case c{2, 3, 70, 90, 16, 24, Layout::bnhd, true, {90, 33}};
  Trial run(c);
  std::mt19937_64 rng(5);
  Tensor32 k1 = testing::random_tensor({c.B, c.Nk, 1, c.D}, Layout::bnhd, rng);
  Tensor32 v1 = testing::random_tensor({c.B, c.Nk, 1, c.E}, Layout::bnhd, rng);
  run.k.view = TensorView(k1.storage.data(), {c.B, c.Nk, c.H, c.D}, {c.Nk * c.D, c.D, 0, 1});
  run.v.view = TensorView(v1.storage.data(), {c.B, c.Nk, c.H, c.E}, {c.Nk * c.E, c.E, 0, 1});
  run.dk = testing::make_tensor({c.B, c.Nk, c.H, c.D}, Layout::bnhd);
  run.dv = testing::make_tensor({c.B, c.Nk, c.H, c.E}, Layout::bnhd);
  expect_within(errors_of(run));
}

// Bitwise the same results for 1, 2, 3 and 4 threads. With one head, 1 thread takes it as one work
// item and more threads split it into tiles, so this also holds the two ways of splitting work to
// the same bits.
TEST(SoftmaxAttention, DeterministicForAnyThreadCount) {
  Case c{1, 1, 200, 300, 64, 48, Layout::padded, true, {170}};
  const int before = num_threads();
  Trial one(c);
  set_num_threads(1);
  one.forward();
  one.backward();
  for (int threads : {2, 3, 4}) {
    Trial many(c);
    set_num_threads(threads);
    many.forward();
    many.backward();
    EXPECT_TRUE(bitwise_equal(one.out, many.out)) << threads;
    EXPECT_EQ(std::memcmp(one.lse.data(), many.lse.data(), one.lse.size() * sizeof(float)), 0) << threads;
    EXPECT_TRUE(bitwise_equal(one.dq, many.dq)) << threads;
    EXPECT_TRUE(bitwise_equal(one.dk, many.dk)) << threads;
    EXPECT_TRUE(bitwise_equal(one.dv, many.dv)) << threads;
  }
  set_num_threads(before);
}

// Random small shapes, masks and layouts: within kBound of the oracle, and bitwise the same for 1
// and 2 threads (with one head, 2 threads split it into tiles; 1 thread takes it whole).
TEST(SoftmaxAttention, RandomShapes) {
  std::mt19937_64 rng(11);
  auto pick = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  const int before = num_threads();
  for (int trial = 0; trial < 12; ++trial) {
    Case c{1, 1, pick(1, 150), pick(1, 150), pick(1, 70), pick(1, 70), testing::kAllLayouts[trial % 3], trial % 2 == 0};
    if (trial % 4 == 0) {
      c.Nq = pick(65, 150);  // one head of two query tiles or more: split into tiles with 2 threads
    } else {
      c.B = pick(1, 3), c.H = pick(1, 3);
    }
    if (trial % 3 != 0)
      for (int64_t b = 0; b < c.B; ++b) c.key_lengths.push_back(pick(0, c.Nk));
    SCOPED_TRACE(describe(c));
    set_num_threads(1);
    Trial one(c, uint64_t(trial));
    expect_within(errors_of(one));
    set_num_threads(2);
    Trial two(c, uint64_t(trial));
    two.forward();
    two.backward();
    EXPECT_TRUE(bitwise_equal(one.out, two.out));
    EXPECT_EQ(std::memcmp(one.lse.data(), two.lse.data(), one.lse.size() * sizeof(float)), 0);
    EXPECT_TRUE(bitwise_equal(one.dq, two.dq));
    EXPECT_TRUE(bitwise_equal(one.dk, two.dk));
    EXPECT_TRUE(bitwise_equal(one.dv, two.dv));
  }
  set_num_threads(before);
}

// Calling twice gives the same bits, and outputs are overwritten, not accumulated.
TEST(SoftmaxAttention, OutputsAreOverwritten) {
  Case c{1, 1, 70, 70, 16, 16, Layout::bnhd, true};
  Trial first(c);
  first.forward();
  first.backward();
  Trial second(c);
  std::mt19937_64 rng(99);
  for (Tensor32* t : {&second.out, &second.dq, &second.dk, &second.dv}) testing::fill_uniform(t->view, rng, -5, 5);
  second.forward();
  second.backward();
  EXPECT_TRUE(bitwise_equal(first.out, second.out));
  EXPECT_TRUE(bitwise_equal(first.dq, second.dq));
  EXPECT_TRUE(bitwise_equal(first.dk, second.dk));
  EXPECT_TRUE(bitwise_equal(first.dv, second.dv));
}

// Row n of t (all heads) is finite.
bool row_finite(const Tensor32& t, int64_t b, int64_t n) {
  for (int64_t h = 0; h < t.view.heads(); ++h)
    for (int64_t d = 0; d < t.view.dim(); ++d)
      if (!std::isfinite(t.view(b, n, h, d))) return false;
  return true;
}

// A NaN in an input reaches exactly the outputs that depend on it (causal: query i sees keys ≤ i).
TEST(SoftmaxAttention, NanReachesExactlyTheOutputsThatDependOnIt) {
  const Case c{1, 2, 130, 130, 16, 16, Layout::bnhd, true, {120}};
  const float nan = std::numeric_limits<float>::quiet_NaN();
  constexpr int64_t kRow = 70;
  {  // NaN in v[70]: out rows ≥ 70 are NaN, earlier rows are finite; dv[70] only for dv.
    Trial run(c);
    run.v.view(0, kRow, 1, 3) = nan;
    run.forward();
    for (int64_t i = 0; i < c.Nq; ++i) EXPECT_EQ(row_finite(run.out, 0, i), i < kRow) << i;
  }
  {  // NaN in k[70]: the same rows, through the scores.
    Trial run(c);
    run.k.view(0, kRow, 0, 5) = nan;
    run.forward();
    for (int64_t i = 0; i < c.Nq; ++i) EXPECT_EQ(row_finite(run.out, 0, i), i < kRow) << i;
  }
  {  // NaN in q[70]: only out row 70.
    Trial run(c);
    run.q.view(0, kRow, 1, 0) = nan;
    run.forward();
    for (int64_t i = 0; i < c.Nq; ++i) EXPECT_EQ(row_finite(run.out, 0, i), i != kRow) << i;
    EXPECT_TRUE(std::isnan(run.lse[c.Nq + kRow]));
  }
  {  // NaN in k and v beyond the key length (≥ 120): nothing sees them.
    Trial run(c);
    run.k.view(0, 125, 0, 0) = nan;
    run.v.view(0, 121, 1, 0) = nan;
    run.forward();
    run.backward();
    EXPECT_TRUE(testing::all_finite(run.out.view));
    EXPECT_TRUE(testing::all_finite(run.dq.view));
    EXPECT_TRUE(testing::all_finite(run.dk.view));
    EXPECT_TRUE(testing::all_finite(run.dv.view));
  }
  {  // NaN in dout[70]: dq row 70 and the dk, dv rows of the keys it sees (≤ 70).
    Trial run(c);
    run.forward();
    run.dout.view(0, kRow, 1, 2) = nan;
    run.backward();
    for (int64_t i = 0; i < c.Nq; ++i) EXPECT_EQ(row_finite(run.dq, 0, i), i != kRow) << i;
    for (int64_t j = 0; j < c.Nk; ++j) {
      EXPECT_EQ(row_finite(run.dv, 0, j), j > kRow || j >= 120) << j;
      EXPECT_EQ(row_finite(run.dk, 0, j), j > kRow || j >= 120) << j;
    }
  }
}

// An infinity in v does not crash and stays in the results that depend on it: out and dq rows of
// the queries that see it; not dv, which does not depend on v.
TEST(SoftmaxAttention, InfinityStaysInItsRows) {
  const Case c{1, 1, 80, 80, 16, 16, Layout::padded, true};
  Trial run(c);
  run.v.view(0, 40, 0, 1) = std::numeric_limits<float>::infinity();
  run.forward();
  run.backward();
  for (int64_t i = 0; i < c.Nq; ++i) EXPECT_EQ(row_finite(run.out, 0, i), i < 40) << i;
  for (int64_t i = 0; i < c.Nq; ++i) EXPECT_EQ(row_finite(run.dq, 0, i), i < 40) << i;
  EXPECT_TRUE(testing::all_finite(run.dv.view));
}

// A fully masked row ignores a NaN in its dout (it contributes zero gradients).
TEST(SoftmaxAttention, FullyMaskedRowIgnoresItsDout) {
  const Case c{1, 1, 90, 64, 16, 16, Layout::bnhd, true};  // queries 0..25 see no key
  Trial run(c);
  run.forward();
  run.dout.view(0, 10, 0, 0) = std::numeric_limits<float>::quiet_NaN();
  run.backward();
  EXPECT_TRUE(testing::all_finite(run.dq.view));
  EXPECT_TRUE(testing::all_finite(run.dk.view));
  EXPECT_TRUE(testing::all_finite(run.dv.view));
}

}  // namespace
}  // namespace linattn
