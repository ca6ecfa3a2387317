// Ring attention (include/linattn/distributed/ring.hpp) under mpiexec -n P: every rank's out, lse,
// dq, dk and dv against the single-process softmax operator and its fp64 oracle, run on the whole
// sequence (every rank draws the same inputs), for both layouts, causal and not, uneven shards,
// shards of length 0 and 1, key lengths that mask whole rows; bitwise determinism; the bytes sent;
// disagreements found before any arithmetic; the layout helpers.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "distributed/ring_layout.hpp"
#include "linattn/distributed/comm.hpp"
#include "linattn/distributed/ring.hpp"
#include "linattn/error.hpp"
#include "linattn/reference.hpp"
#include "linattn/softmax_attention.hpp"
#include "linattn/threads.hpp"
#include "support/mpi_support.hpp"
#include "support/tensors.hpp"

namespace linattn::distributed {
namespace {

using test::world_rank;
using test::world_size;
constexpr float kInf = std::numeric_limits<float>::infinity();
// fp32 against fp64 (and against the single-process fp32 result, whose sums run in another order):
// the bound of tests/softmax_attention_test.cpp, for N of a few hundred.
constexpr double kBound = 1e-5;

struct RingCase {
  int64_t B = 2, H = 2, D = 16, E = 8;
  std::vector<int64_t> lengths;        // every rank's shard length
  std::vector<int64_t> early_lengths;  // balanced only; empty: the default ⌈n_r / 2⌉
  RingLayout layout = RingLayout::contiguous;
  bool causal = false;
  std::vector<int64_t> key_lengths;
  std::optional<float> scale;

  int64_t N() const {
    int64_t n = 0;
    for (int64_t l : lengths) n += l;
    return n;
  }
  int64_t mine() const { return lengths[size_t(world_rank())]; }
  std::vector<detail::Segment> segments() const {
    std::vector<int64_t> early = early_lengths;
    if (early.empty())
      for (int64_t l : lengths) early.push_back((l + 1) / 2);
    return detail::ring_segments(layout, lengths, early)[size_t(world_rank())];
  }
  RingAttentionOptions options() const {
    RingAttentionOptions o;
    o.causal = causal, o.layout = layout, o.key_lengths = key_lengths, o.scale = scale;
    if (!early_lengths.empty()) o.early_length = early_lengths[size_t(world_rank())];
    return o;
  }
  SoftmaxAttentionOptions single() const {
    SoftmaxAttentionOptions o;
    o.causal = causal, o.key_lengths = key_lengths, o.scale = scale;
    return o;
  }
};

// Shard lengths from contiguous offsets.
std::vector<int64_t> lengths_of(const std::vector<int64_t>& offsets) {
  std::vector<int64_t> l;
  for (size_t r = 0; r + 1 < offsets.size(); ++r) l.push_back(offsets[r + 1] - offsets[r]);
  return l;
}
// The balanced layout's standard cut of N.
std::vector<int64_t> balanced_lengths(int64_t N) {
  std::vector<int64_t> l;
  for (int r = 0; r < world_size(); ++r) l.push_back(balanced_range(N, r, world_size()).length());
  return l;
}

// The whole sequence's tensors, contiguous [B, N, H, ·]: the same on every rank (one seed).
struct Full {
  testing::Tensor32 q, k, v, dout;
  explicit Full(const RingCase& s, uint64_t seed = 5) {
    std::mt19937_64 rng(seed);
    const int64_t N = std::max<int64_t>(s.N(), 1);  // a view of N = 0 is not valid: draw one spare row
    q = testing::random_tensor({s.B, N, s.H, s.D}, testing::Layout::bnhd, rng, -2, 2);
    k = testing::random_tensor({s.B, N, s.H, s.D}, testing::Layout::bnhd, rng, -2, 2);
    v = testing::random_tensor({s.B, N, s.H, s.E}, testing::Layout::bnhd, rng);
    dout = testing::random_tensor({s.B, N, s.H, s.E}, testing::Layout::bnhd, rng);
  }
};

// This rank's rows of a contiguous full tensor [B, N, H, X], contiguous [B, n_r, H, X].
std::vector<float> shard_of(const RingCase& s, ConstTensorView full) {
  const int64_t X = full.dim();
  std::vector<float> shard(size_t(s.B * s.mine() * s.H * X));
  for (const detail::Segment& g : s.segments())
    detail::copy_view(detail::seq_slice(bnhd(shard.data(), s.B, s.mine(), s.H, X), g.local, g.length),
                      detail::seq_slice(full, g.global, g.length));
  return shard;
}
// The same for a [B, H, N] lse.
template <class T>
std::vector<T> lse_shard_of(const RingCase& s, const std::vector<T>& full) {
  std::vector<T> shard(size_t(s.B * s.H * s.mine()));
  for (const detail::Segment& g : s.segments())
    for (int64_t r = 0; r < s.B * s.H; ++r)
      for (int64_t i = 0; i < g.length; ++i)
        shard[size_t(r * s.mine() + g.local + i)] = full[size_t(r * s.N() + g.global + i)];
  return shard;
}

// One rank's results, contiguous.
struct Result {
  std::vector<float> out, lse, dq, dk, dv;
};

Result run_ring(const RingCase& s, const Full& f) {
  const int64_t n = s.mine();
  const std::vector<float> q = shard_of(s, f.q.view), k = shard_of(s, f.k.view), v = shard_of(s, f.v.view),
                           dout = shard_of(s, f.dout.view);
  Result r;
  r.out.assign(size_t(s.B * n * s.H * s.E), std::nanf(""));
  r.lse.assign(size_t(s.B * s.H * n), std::nanf(""));
  r.dq.assign(q.size(), std::nanf(""));
  r.dk.assign(k.size(), std::nanf(""));
  r.dv.assign(v.size(), std::nanf(""));
  auto view = [&](const std::vector<float>& x, int64_t X) { return bnhd(x.data(), s.B, n, s.H, X); };
  auto out_view = [&](std::vector<float>& x, int64_t X) { return bnhd(x.data(), s.B, n, s.H, X); };
  const RingAttentionOptions o = s.options();
  ring_attention_forward(MPI_COMM_WORLD, out_view(r.out, s.E), r.lse, view(q, s.D), view(k, s.D), view(v, s.E), o);
  ring_attention_backward(MPI_COMM_WORLD, out_view(r.dq, s.D), out_view(r.dk, s.D), out_view(r.dv, s.E),
                          view(dout, s.E), view(q, s.D), view(k, s.D), view(v, s.E), view(r.out, s.E), r.lse, o);
  return r;
}

double error_of(const std::vector<float>& got, const std::vector<float>& want) {
  double worst = 0, scale = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    worst = std::max(worst, std::abs(double(got[i]) - double(want[i])));
    scale = std::max(scale, std::abs(double(want[i])));
  }
  if (!(worst == worst)) return std::numeric_limits<double>::infinity();  // a NaN left unwritten
  return scale > 0 ? worst / scale : worst;
}
std::vector<float> narrowed(const std::vector<double>& x) { return std::vector<float>(x.begin(), x.end()); }

// lse within kBound relative, −∞ exactly where the reference has −∞.
void expect_lse(const std::vector<float>& got, const std::vector<double>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isinf(want[i])) {
      EXPECT_EQ(got[i], -kInf) << what << " row " << i;
    } else {
      EXPECT_NEAR(got[i], want[i], kBound * std::max(1.0, std::abs(want[i]))) << what << " row " << i;
    }
  }
}

// The ring against the single-process fp32 operator and the fp64 oracle over the whole sequence.
void check_against_single_process(const RingCase& s) {
  const Full f(s);
  const Result got = run_ring(s, f);
  const int64_t N = s.N();
  if (N == 0) return;  // nothing to compare: the calls above must simply return
  // The single-process fp32 operator.
  testing::Tensor32 out = testing::make_tensor({s.B, N, s.H, s.E}, testing::Layout::bnhd);
  testing::Tensor32 dq = testing::make_tensor({s.B, N, s.H, s.D}, testing::Layout::bnhd);
  testing::Tensor32 dk = testing::make_tensor({s.B, N, s.H, s.D}, testing::Layout::bnhd);
  testing::Tensor32 dv = testing::make_tensor({s.B, N, s.H, s.E}, testing::Layout::bnhd);
  std::vector<float> lse(size_t(s.B * s.H * N));
  const SoftmaxAttentionOptions o = s.single();
  softmax_attention_forward(out.view, lse, f.q.view, f.k.view, f.v.view, o);
  softmax_attention_backward(dq.view, dk.view, dv.view, f.dout.view, f.q.view, f.k.view, f.v.view, out.view, lse, o);
  EXPECT_LE(error_of(got.out, shard_of(s, out.view)), kBound);
  expect_lse(got.lse, lse_shard_of(s, std::vector<double>(lse.begin(), lse.end())), "lse vs fp32");
  EXPECT_LE(error_of(got.dq, shard_of(s, dq.view)), kBound);
  EXPECT_LE(error_of(got.dk, shard_of(s, dk.view)), kBound);
  EXPECT_LE(error_of(got.dv, shard_of(s, dv.view)), kBound);
  // The fp64 oracle, rounded to fp32 and cut the same way.
  const auto q = reference::to_double(f.q.view), k = reference::to_double(f.k.view), v = reference::to_double(f.v.view),
             d = reference::to_double(f.dout.view);
  std::vector<double> lse64;
  const reference::Tensor out64 = reference::softmax_attention_forward(q, k, v, o, &lse64);
  const reference::Gradients g = reference::softmax_attention_backward(d, q, k, v, o);
  auto cut = [&](const reference::Tensor& t) {
    const std::vector<float> x = narrowed(t.data);
    return shard_of(s, bnhd(x.data(), t.extent[0], t.extent[1], t.extent[2], t.extent[3]));
  };
  EXPECT_LE(error_of(got.out, cut(out64)), kBound);
  expect_lse(got.lse, lse_shard_of(s, lse64), "lse vs fp64");
  EXPECT_LE(error_of(got.dq, cut(g.dq)), kBound);
  EXPECT_LE(error_of(got.dk, cut(g.dk)), kBound);
  EXPECT_LE(error_of(got.dv, cut(g.dv)), kBound);
}

TEST(RingAttention, NonCausalUnevenShards) {
  RingCase s;
  s.lengths = lengths_of(test::uneven_offsets(150, world_size()));
  check_against_single_process(s);
}

TEST(RingAttention, CausalContiguousUnevenShards) {
  RingCase s;
  s.causal = true;
  s.lengths = lengths_of(test::uneven_offsets(150, world_size()));
  check_against_single_process(s);
}

TEST(RingAttention, CausalBalanced) {
  RingCase s;
  s.causal = true, s.layout = RingLayout::balanced;
  s.lengths = balanced_lengths(203);
  s.D = 59, s.E = 16, s.H = 3, s.B = 1;
  check_against_single_process(s);
}

// Blocks of the balanced layout cut unevenly: early blocks longer than late ones, some empty.
TEST(RingAttention, CausalBalancedUnevenBlocks) {
  RingCase s;
  s.causal = true, s.layout = RingLayout::balanced;
  for (int r = 0; r < world_size(); ++r) {
    s.early_lengths.push_back(r % 2 == 0 ? 40 + 7 * r : 0);
    s.lengths.push_back(s.early_lengths.back() + (r == 1 ? 0 : 9 + r));
  }
  check_against_single_process(s);
  s.causal = false;
  check_against_single_process(s);
}

// Shards of length 0 and 1 (rank 0 empty, rank 1 one row), each layout, causal and not.
TEST(RingAttention, ShardsOfLengthZeroAndOne) {
  for (RingLayout layout : {RingLayout::contiguous, RingLayout::balanced})
    for (bool causal : {false, true}) {
      RingCase s;
      s.layout = layout, s.causal = causal;
      for (int r = 0; r < world_size(); ++r)
        s.lengths.push_back(r == 0 ? (world_size() == 1 ? 1 : 0) : r == 1 ? 1 : 20 + r);
      SCOPED_TRACE(std::string(causal ? "causal " : "") + (layout == RingLayout::balanced ? "balanced" : "contiguous"));
      check_against_single_process(s);
    }
}

// A whole sequence of one token, and of none (every shard empty: the calls return, nothing hangs).
TEST(RingAttention, SequencesOfOneAndNoToken) {
  for (int64_t N : {1, 0}) {
    RingCase s;
    s.causal = true;
    for (int r = 0; r < world_size(); ++r) s.lengths.push_back(r == world_size() - 1 ? N : 0);
    check_against_single_process(s);
  }
}

// Key lengths over global positions: batch 0 sees no key (its rows are 0, lse −∞, gradients 0), batch 1
// keys inside the first shard only, batch 2 up to the middle of the sequence, batch 3 all of it.
TEST(RingAttention, KeyLengthsMaskWholeRows) {
  for (RingLayout layout : {RingLayout::contiguous, RingLayout::balanced})
    for (bool causal : {false, true}) {
      RingCase s;
      s.B = 4, s.layout = layout, s.causal = causal, s.scale = 0.3f;
      s.lengths =
          layout == RingLayout::balanced ? balanced_lengths(97) : lengths_of(test::uneven_offsets(97, world_size()));
      s.key_lengths = {0, 3, 50, 97};
      SCOPED_TRACE(std::string(causal ? "causal " : "") + (layout == RingLayout::balanced ? "balanced" : "contiguous"));
      check_against_single_process(s);
      if (s.mine() == 0) continue;
      const Result r = run_ring(s, Full(s));
      const int64_t per_batch = s.mine() * s.H;
      for (int64_t i = 0; i < per_batch; ++i) EXPECT_EQ(r.lse[size_t(i)], -kInf);
      for (int64_t i = 0; i < per_batch * s.E; ++i) EXPECT_EQ(r.out[size_t(i)], 0.0f);
      for (int64_t i = 0; i < per_batch * s.D; ++i) EXPECT_EQ(r.dq[size_t(i)], 0.0f);
    }
}

// Runs give the same bits, for any thread count (the merge order is the ring position's, not the
// arrival's).
TEST(RingAttention, DeterministicAcrossRuns) {
  RingCase s;
  s.causal = true, s.layout = RingLayout::balanced;
  s.lengths = balanced_lengths(300);
  const Full f(s);
  const int threads = num_threads();
  set_num_threads(1);
  const Result a = run_ring(s, f);
  set_num_threads(3);  // and for any thread count: the single-process blocks promise it
  const Result b = run_ring(s, f), c = run_ring(s, f);
  set_num_threads(threads);
  auto same = [](const Result& x, const Result& y) {
    auto bits = [](const std::vector<float>& u, const std::vector<float>& w) {
      return u.size() == w.size() && std::memcmp(u.data(), w.data(), u.size() * sizeof(float)) == 0;
    };
    return bits(x.out, y.out) && bits(x.lse, y.lse) && bits(x.dq, y.dq) && bits(x.dk, y.dk) && bits(x.dv, y.dv);
  };
  EXPECT_TRUE(same(b, c));
  EXPECT_TRUE(same(a, b));
}

// The forward sends P − 1 k/v shards: doubling every shard adds exactly that many bytes again.
TEST(RingAttention, BytesSentGrowWithTheShards) {
  auto forward_bytes = [](int64_t n) {
    RingCase s;
    for (int r = 0; r < world_size(); ++r) s.lengths.push_back(n);
    const Full f(s);
    std::vector<float> q = shard_of(s, f.q.view), k = shard_of(s, f.k.view), v = shard_of(s, f.v.view);
    std::vector<float> out(size_t(s.B * n * s.H * s.E)), lse(size_t(s.B * s.H * n));
    reset_comm_stats();
    ring_attention_forward(MPI_COMM_WORLD, bnhd(out.data(), s.B, n, s.H, s.E), lse, bnhd(q.data(), s.B, n, s.H, s.D),
                           bnhd(k.data(), s.B, n, s.H, s.D), bnhd(v.data(), s.B, n, s.H, s.E), s.options());
    return comm_stats().bytes_sent;
  };
  const RingCase s;
  const int64_t n = 40, shard_bytes = 4 * s.B * n * s.H * (s.D + s.E);
  EXPECT_EQ(forward_bytes(2 * n) - forward_bytes(n), int64_t(world_size() - 1) * shard_bytes);
}

// The message every rank threw from f (empty: none did).
template <class F>
std::string thrown(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return {};
}

// Shapes that disagree, and a bad argument on one rank, end the call on every rank before any arithmetic,
// naming the rank; out is left as it was.
TEST(RingAttention, DisagreementsAreFoundBeforeArithmetic) {
  const int last = world_size() - 1;
  const int64_t n = 5, B = 1, H = 2, E = 4;
  auto call = [&](int64_t D, size_t lse_size, std::vector<int64_t> key_lengths, std::vector<float>& out) {
    std::vector<float> q(size_t(B * n * H * D), 0.5f), v(size_t(B * n * H * E), 0.5f), lse(lse_size);
    RingAttentionOptions o;
    o.key_lengths = key_lengths;
    return thrown([&] {
      ring_attention_forward(MPI_COMM_WORLD, bnhd(out.data(), B, n, H, E), lse, bnhd<const float>(q.data(), B, n, H, D),
                             bnhd<const float>(q.data(), B, n, H, D), bnhd<const float>(v.data(), B, n, H, E), o);
    });
  };
  std::vector<float> out(size_t(B * n * H * E), 7.0f);
  const size_t lse_size = size_t(B * H * n);
  if (last > 0) {
    const std::string dim = call(world_rank() == last ? 15 : 16, lse_size, {}, out);
    EXPECT_NE(dim.find("rank " + std::to_string(last) + "'s q/k head dim is 15, rank 0's is 16"), std::string::npos)
        << dim;
    const std::string lengths = call(16, lse_size, {world_rank() == last ? 3 : 4}, out);
    EXPECT_NE(lengths.find("rank " + std::to_string(last) + "'s options.key_lengths' hash"), std::string::npos)
        << lengths;
  }
  const std::string lse = call(16, world_rank() == last ? lse_size - 1 : lse_size, {}, out);
  EXPECT_NE(lse.find("rank " + std::to_string(last) + " failed its local checks"), std::string::npos) << lse;
  EXPECT_NE(lse.find("lse"), std::string::npos) << lse;
  const std::string too_long = call(16, lse_size, {n * world_size() + 1}, out);
  EXPECT_NE(too_long.find("key_lengths[0] is " + std::to_string(n * world_size() + 1)), std::string::npos) << too_long;
  for (float x : out) EXPECT_EQ(x, 7.0f);  // no arithmetic happened
}

TEST(RingAttention, BalancedShardAndUnshardRoundTrip) {
  for (int64_t N : {0, 1, 7, 64, 101}) {
    // Every position is some rank's exactly once.
    std::vector<int> owner(size_t(N), 0);
    for (int r = 0; r < world_size(); ++r) {
      const BalancedRange b = balanced_range(N, r, world_size());
      EXPECT_GE(b.early_length, b.late_length);
      EXPECT_LE(b.early_length - b.late_length, 1);
      EXPECT_LT(b.early_begin + b.early_length, b.late_begin + (b.late_length > 0 ? 1 : N + 1));
      for (int64_t i = 0; i < b.early_length; ++i) ++owner[size_t(b.early_begin + i)];
      for (int64_t i = 0; i < b.late_length; ++i) ++owner[size_t(b.late_begin + i)];
    }
    for (int64_t i = 0; i < N; ++i) EXPECT_EQ(owner[size_t(i)], 1) << "position " << i << " of " << N;
    if (N == 0) continue;
    std::mt19937_64 rng(3);
    const testing::Tensor32 full = testing::random_tensor({2, N, 3, 5}, testing::Layout::padded, rng);
    testing::Tensor32 back = testing::make_tensor({2, N, 3, 5}, testing::Layout::bhnd);
    for (int r = 0; r < world_size(); ++r) {
      const int64_t n = balanced_range(N, r, world_size()).length();
      if (n == 0) continue;
      std::vector<float> shard(size_t(2 * n * 3 * 5));
      balanced_shard(bnhd(shard.data(), 2, n, 3, 5), full.view, r, world_size());
      balanced_unshard(back.view, bnhd<const float>(shard.data(), 2, n, 3, 5), r, world_size());
    }
    EXPECT_EQ(testing::relative_error(back.view, reference::to_double(full.view)), 0.0);
  }
  // Blocks adjacent in both the shard and the sequence form one segment: one operator call at P = 1.
  const std::vector<int64_t> one = {10}, half = {5};
  const auto single = detail::ring_segments(RingLayout::balanced, one, half);
  ASSERT_EQ(single.size(), 1u);
  ASSERT_EQ(single[0].size(), 1u);
  EXPECT_EQ(single[0][0].length, 10);
  std::vector<float> wrong(10);
  EXPECT_THROW(balanced_shard(bnhd(wrong.data(), 1, 10, 1, 1), bnhd<const float>(wrong.data(), 1, 10, 1, 1), 0, 2),
               Error);
}

}  // namespace
}  // namespace linattn::distributed
