// softmax_attention_merge: the attention over keys [0, s) merged with the attention over keys
// [s, Nk) equals the attention over all of them (fp32 and the fp64 oracle), including rows that see
// no key on one side or on both; and its argument checks.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "linattn/error.hpp"
#include "linattn/reference.hpp"
#include "linattn/softmax_attention.hpp"
#include "support/tensors.hpp"

namespace linattn {
namespace {

using testing::Layout;
using testing::Tensor32;
constexpr float kInf = std::numeric_limits<float>::infinity();

// Keys [begin, begin + count) of x: a view into the same memory.
ConstTensorView key_range(ConstTensorView x, int64_t begin, int64_t count) {
  ConstTensorView r = x;
  r.data += begin * x.stride[1];
  r.extent[1] = count;
  return r;
}

// Key lengths of the part [begin, begin + count) of keys that `lengths` (over all keys) allows.
std::vector<int64_t> part_lengths(const std::vector<int64_t>& lengths, int64_t begin, int64_t count) {
  std::vector<int64_t> part;
  for (int64_t l : lengths) part.push_back(std::clamp(l - begin, int64_t(0), count));
  return part;
}

SoftmaxAttentionOptions with_lengths(std::span<const int64_t> lengths) {
  SoftmaxAttentionOptions o;
  o.key_lengths = lengths;
  return o;
}

struct Split {
  int64_t B, H, Nq, Nk, D, E, split;
  std::vector<int64_t> key_lengths;
};

void check_split(const Split& c) {
  std::mt19937_64 rng(11);
  const Tensor32 q = testing::random_tensor({c.B, c.Nq, c.H, c.D}, Layout::padded, rng, -2, 2);
  const Tensor32 k = testing::random_tensor({c.B, c.Nk, c.H, c.D}, Layout::bhnd, rng, -2, 2);
  const Tensor32 v = testing::random_tensor({c.B, c.Nk, c.H, c.E}, Layout::bnhd, rng);
  const size_t rows = size_t(c.B * c.H * c.Nq);
  Tensor32 whole = testing::make_tensor({c.B, c.Nq, c.H, c.E}, Layout::bnhd);
  Tensor32 first = testing::make_tensor({c.B, c.Nq, c.H, c.E}, Layout::padded);
  Tensor32 second = testing::make_tensor({c.B, c.Nq, c.H, c.E}, Layout::bhnd);
  std::vector<float> lse_whole(rows), lse_first(rows), lse_second(rows);
  const auto lengths_first = part_lengths(c.key_lengths, 0, c.split);
  const auto lengths_second = part_lengths(c.key_lengths, c.split, c.Nk - c.split);
  softmax_attention_forward(whole.view, lse_whole, q.view, k.view, v.view, with_lengths(c.key_lengths));
  softmax_attention_forward(first.view, lse_first, q.view, key_range(k.view, 0, c.split), key_range(v.view, 0, c.split),
                            with_lengths(lengths_first));
  softmax_attention_forward(second.view, lse_second, q.view, key_range(k.view, c.split, c.Nk - c.split),
                            key_range(v.view, c.split, c.Nk - c.split), with_lengths(lengths_second));
  softmax_attention_merge(first.view, lse_first, second.view, lse_second);

  std::vector<double> lse_oracle;
  const auto oracle =
      reference::softmax_attention_forward(reference::to_double(q.view), reference::to_double(k.view),
                                           reference::to_double(v.view), with_lengths(c.key_lengths), &lse_oracle);
  EXPECT_LE(testing::relative_error(first.view, oracle), 1e-5);
  EXPECT_LE(testing::relative_error(first.view, reference::to_double(whole.view)), 1e-5);
  for (size_t r = 0; r < rows; ++r) {
    if (std::isinf(lse_oracle[r])) {
      EXPECT_EQ(lse_first[r], -kInf) << "row " << r;
    } else {
      EXPECT_NEAR(lse_first[r], lse_oracle[r], 1e-5 * std::max(1.0, std::abs(lse_oracle[r]))) << "row " << r;
    }
  }
}

TEST(SoftmaxMerge, SplitKeysEqualTheWhole) {
  check_split({1, 1, 1, 2, 1, 1, 1, {}});
  check_split({2, 3, 70, 130, 16, 24, 64, {}});
  check_split({1, 2, 17, 97, 59, 3, 1, {}});
}

// Key lengths that leave one side empty for some batches (lse = −∞ there) and both sides empty for
// one (the merged row is 0 with lse = −∞, as the operator gives for a row that sees no key).
TEST(SoftmaxMerge, RowsThatSeeNoKeyOnOneOrBothSides) { check_split({4, 2, 20, 40, 8, 8, 16, {0, 5, 16, 40}}); }

TEST(SoftmaxMerge, BothSidesEmptyGivesZeroAndMinusInfinity) {
  std::vector<float> out(4, 7.0f), other(4, 3.0f), lse(2, -kInf), lse_other(2, -kInf);
  softmax_attention_merge(bnhd(out.data(), 1, 2, 1, 2), lse, bnhd<const float>(other.data(), 1, 2, 1, 2), lse_other);
  for (float x : out) EXPECT_EQ(x, 0.0f);
  for (float x : lse) EXPECT_EQ(x, -kInf);
  // One side empty: the other side is kept exactly.
  std::vector<float> lse_seen = {0.25f, -1.5f};
  softmax_attention_merge(bnhd(out.data(), 1, 2, 1, 2), lse, bnhd<const float>(other.data(), 1, 2, 1, 2), lse_seen);
  for (float x : out) EXPECT_EQ(x, 3.0f);
  EXPECT_EQ(lse[0], 0.25f);
  EXPECT_EQ(lse[1], -1.5f);
}

TEST(SoftmaxMerge, ArgumentsAreChecked) {
  std::vector<float> out(6), other(6), lse(3), lse_short(2);
  const auto o = bnhd(out.data(), 1, 3, 1, 2);
  EXPECT_THROW(softmax_attention_merge(o, lse, bnhd<const float>(other.data(), 1, 2, 1, 3), lse), Error);
  try {
    softmax_attention_merge(o, lse, bnhd<const float>(other.data(), 1, 3, 1, 2), lse_short);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("lse_other"), std::string::npos) << e.what();
  }
  // out may not be its own other side.
  EXPECT_THROW(softmax_attention_merge(o, lse, o, lse), Error);
}

}  // namespace
}  // namespace linattn
