// Every boundary check of softmax_attention_forward / _backward trips, and its message names the
// operator, the argument, the value seen and the value expected.
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "linattn/error.hpp"
#include "linattn/softmax_attention.hpp"
#include "support/temp_dir.hpp"  // error_of

namespace linattn {
namespace {

constexpr int64_t B = 2, Nq = 5, Nk = 7, H = 3, D = 4, E = 6;

// [B, N, H, X] contiguous tensors, each in its own 512-float slot of one arena (so that a view moved
// onto another tensor's slot overlaps that tensor only), and a valid call each test breaks once.
constexpr int64_t kSlot = 512;
struct Call {
  std::vector<float> arena = std::vector<float>(9 * kSlot, 0.5f);
  float* slot(int i) { return arena.data() + i * kSlot; }
  float *qb = slot(0), *kb = slot(1), *vb = slot(2), *ob = slot(3), *dob = slot(4), *dqb = slot(5), *dkb = slot(6),
        *dvb = slot(7), *lseb = slot(8);
  TensorView q = bnhd(qb, B, Nq, H, D), k = bnhd(kb, B, Nk, H, D), v = bnhd(vb, B, Nk, H, E),
             out = bnhd(ob, B, Nq, H, E), dout = bnhd(dob, B, Nq, H, E), dq = bnhd(dqb, B, Nq, H, D),
             dk = bnhd(dkb, B, Nk, H, D), dv = bnhd(dvb, B, Nk, H, E);
  std::span<float> lse_span{lseb, size_t(B* H* Nq)};
  std::vector<int64_t> lengths;
  SoftmaxAttentionOptions options;

  void forward() { softmax_attention_forward(out, lse_span, q, k, v, options); }
  void backward() { softmax_attention_backward(dq, dk, dv, dout, q, k, v, out, lse_span, options); }
};

using testing::error_of;

#define EXPECT_FORWARD_ERROR(setup, text)                                   \
  do {                                                                      \
    Call c;                                                                 \
    setup;                                                                  \
    const std::string m = error_of([&] { c.forward(); });                   \
    EXPECT_NE(m.find("softmax_attention_forward"), std::string::npos) << m; \
    EXPECT_NE(m.find(text), std::string::npos) << m;                        \
  } while (0)

#define EXPECT_BACKWARD_ERROR(setup, text)                                   \
  do {                                                                       \
    Call c;                                                                  \
    c.forward();                                                             \
    setup;                                                                   \
    const std::string m = error_of([&] { c.backward(); });                   \
    EXPECT_NE(m.find("softmax_attention_backward"), std::string::npos) << m; \
    EXPECT_NE(m.find(text), std::string::npos) << m;                         \
  } while (0)

TEST(SoftmaxErrors, ValidCallsThrowNothing) {
  Call c;
  EXPECT_EQ(error_of([&] { c.forward(); }), "<no error>");
  EXPECT_EQ(error_of([&] { c.backward(); }), "<no error>");
}

TEST(SoftmaxErrors, ViewsAreChecked) {
  EXPECT_FORWARD_ERROR(c.q.data = nullptr, "q.data is null");
  EXPECT_FORWARD_ERROR(c.k.extent[1] = 0, "k.extent[1] (sequence) is 0, expected ≥ 1");
  EXPECT_FORWARD_ERROR(c.v.stride[2] = -1, "v.stride[2] (heads) is -1, expected ≥ 0");
  EXPECT_FORWARD_ERROR(c.out.data = nullptr, "out.data is null");
  EXPECT_FORWARD_ERROR((c.q.extent = {int64_t(1) << 40, int64_t(1) << 40, 1, 1}), "q's element count overflows int64");
  EXPECT_BACKWARD_ERROR(c.dout.data = nullptr, "dout.data is null");
  // 2^57 keys fit in a stride-0 view, but not their packed tiles.
  const int64_t huge = int64_t(1) << 57;
  EXPECT_FORWARD_ERROR(
      (c.k = TensorView(c.kb, {B, huge, H, D}, {0, 0, 0, 1}), c.v = TensorView(c.vb, {B, huge, H, E}, {0, 0, 0, 1})),
      "one head's packed size");
  EXPECT_BACKWARD_ERROR(c.dq.data = nullptr, "dq.data is null");
  EXPECT_BACKWARD_ERROR(c.dk.extent[3] = -2, "dk.extent[3] (dim) is -2");
  EXPECT_BACKWARD_ERROR(c.dv.stride[0] = -5, "dv.stride[0] (batch) is -5");
  EXPECT_BACKWARD_ERROR(c.out.stride[1] = -1, "out.stride[1] (sequence) is -1");
}

TEST(SoftmaxErrors, ExtentsMustAgree) {
  EXPECT_FORWARD_ERROR(c.k.extent[0] = 1, "k.extent[0] (batch) is 1, expected 2 (q's batch)");
  EXPECT_FORWARD_ERROR(c.k.extent[2] = 2, "k.extent[2] (heads) is 2, expected 3 (q's heads)");
  EXPECT_FORWARD_ERROR(c.k.extent[3] = 3, "k.extent[3] (dim) is 3, expected 4 (q's head dim)");
  EXPECT_FORWARD_ERROR(c.v.extent[0] = 1, "v.extent[0] (batch) is 1, expected 2 (q's batch)");
  EXPECT_FORWARD_ERROR(c.v.extent[1] = 6, "v.extent[1] (sequence) is 6, expected 7 (k's sequence length)");
  EXPECT_FORWARD_ERROR(c.v.extent[2] = 1, "v.extent[2] (heads) is 1, expected 3 (q's heads)");
  EXPECT_FORWARD_ERROR(c.out.extent[0] = 1, "out.extent[0] (batch) is 1, expected 2 (q's batch)");
  EXPECT_FORWARD_ERROR(c.out.extent[1] = 4, "out.extent[1] (sequence) is 4, expected 5 (q's sequence length)");
  EXPECT_FORWARD_ERROR(c.out.extent[2] = 1, "out.extent[2] (heads) is 1, expected 3 (q's heads)");
  EXPECT_FORWARD_ERROR(c.out.extent[3] = 5, "out.extent[3] (dim) is 5, expected 6 (v's value dim)");
  EXPECT_BACKWARD_ERROR(c.dout.extent[1] = 4, "dout.extent[1] (sequence) is 4, expected 5 (q's sequence length)");
  EXPECT_BACKWARD_ERROR(c.dout.extent[3] = 5, "dout.extent[3] (dim) is 5, expected 6 (v's value dim)");
  EXPECT_BACKWARD_ERROR(c.out.extent[2] = 1, "out.extent[2] (heads) is 1, expected 3 (q's heads)");
  EXPECT_BACKWARD_ERROR(c.dq.extent[1] = 4, "dq.extent[1] (sequence) is 4, expected 5 (q's sequence)");
  EXPECT_BACKWARD_ERROR(c.dk.extent[0] = 1, "dk.extent[0] (batch) is 1, expected 2 (k's batch)");
  EXPECT_BACKWARD_ERROR(c.dv.extent[3] = 5, "dv.extent[3] (dim) is 5, expected 6 (v's dim)");
  EXPECT_BACKWARD_ERROR(c.k.extent[3] = 3, "k.extent[3] (dim) is 3, expected 4 (q's head dim)");
}

TEST(SoftmaxErrors, LseSizeIsChecked) {
  EXPECT_FORWARD_ERROR(c.lse_span = c.lse_span.first(29), "lse has 29 elements, expected 30 ([B, H, Nq])");
  EXPECT_BACKWARD_ERROR(c.lse_span = std::span<float>(), "lse has 0 elements, expected 30 ([B, H, Nq])");
}

TEST(SoftmaxErrors, KeyLengthsAreChecked) {
  EXPECT_FORWARD_ERROR((c.lengths = {7}, c.options.key_lengths = c.lengths),
                       "key_lengths has 1 entries, expected 2 (one per batch)");
  EXPECT_FORWARD_ERROR((c.lengths = {7, 8}, c.options.key_lengths = c.lengths),
                       "key_lengths[1] is 8, expected a value in [0, 7]");
  EXPECT_FORWARD_ERROR((c.lengths = {-1, 3}, c.options.key_lengths = c.lengths),
                       "key_lengths[0] is -1, expected a value in [0, 7]");
  EXPECT_BACKWARD_ERROR((c.lengths = {3, 9}, c.options.key_lengths = c.lengths),
                        "key_lengths[1] is 9, expected a value in [0, 7]");
}

TEST(SoftmaxErrors, ScaleMustBeFinite) {
  EXPECT_FORWARD_ERROR(c.options.scale = std::numeric_limits<float>::infinity(), "options.scale is inf");
  EXPECT_BACKWARD_ERROR(c.options.scale = std::numeric_limits<float>::quiet_NaN(), "options.scale is nan");
}

TEST(SoftmaxErrors, ForwardOutputsMustNotAliasInputs) {
  EXPECT_FORWARD_ERROR(c.out = bnhd(c.vb, B, Nq, H, E), "out overlaps v");
  EXPECT_FORWARD_ERROR(c.out.data = c.qb + 3, "out overlaps q");
  EXPECT_FORWARD_ERROR(c.out.data = c.kb, "out overlaps k");
  EXPECT_FORWARD_ERROR(c.lse_span = std::span<float>(c.qb + 1, 30), "lse overlaps q");
  EXPECT_FORWARD_ERROR(c.lse_span = std::span<float>(c.kb, 30), "lse overlaps k");
  EXPECT_FORWARD_ERROR(c.lse_span = std::span<float>(c.vb + 40, 30), "lse overlaps v");
  EXPECT_FORWARD_ERROR(c.lse_span = std::span<float>(c.ob + 10, 30), "lse overlaps out");
}

TEST(SoftmaxErrors, OutputElementsMustBeDistinct) {
  EXPECT_FORWARD_ERROR(c.out.stride[2] = 0, "out.stride[2] (heads) is 0, expected ≥ 1");
  EXPECT_FORWARD_ERROR(c.out.stride[1] = 17, "out.stride[1] (sequence) is 17, expected ≥ 18");
  EXPECT_BACKWARD_ERROR(c.dq.stride[0] = 0, "dq.stride[0] (batch) is 0, expected ≥ 1");
  EXPECT_BACKWARD_ERROR(c.dk.stride[3] = 0, "dk.stride[3] (dim) is 0, expected ≥ 1");
  EXPECT_BACKWARD_ERROR(c.dv.stride[1] = 6, "dv.stride[2] (heads) is 6, expected ≥ 42");
  // A stride-0 axis of extent 1 is fine.
  Call c;
  c.out.extent[0] = c.q.extent[0] = c.k.extent[0] = c.v.extent[0] = 1;
  c.out.stride[0] = 0;
  c.lse_span = c.lse_span.first(H * Nq);
  EXPECT_EQ(error_of([&] { c.forward(); }), "<no error>");
}

TEST(SoftmaxErrors, GradientsMustNotAliasInputsOrEachOther) {
  EXPECT_BACKWARD_ERROR(c.dq = bnhd(c.qb, B, Nq, H, D), "dq overlaps q");
  EXPECT_BACKWARD_ERROR(c.dq.data = c.kb, "dq overlaps k");
  EXPECT_BACKWARD_ERROR(c.dk.data = c.vb, "dk overlaps v");
  EXPECT_BACKWARD_ERROR(c.dv.data = c.ob, "dv overlaps out");
  EXPECT_BACKWARD_ERROR(c.dv.data = c.dob, "dv overlaps dout");
  EXPECT_BACKWARD_ERROR(c.dk.data = c.lseb, "dk overlaps lse");
  EXPECT_BACKWARD_ERROR(c.dk.data = c.dqb, "dq overlaps dk");
  EXPECT_BACKWARD_ERROR(c.dv.data = c.dqb + 5, "dq overlaps dv");
  EXPECT_BACKWARD_ERROR(c.dv.data = c.dkb, "dk overlaps dv");
}

}  // namespace
}  // namespace linattn
