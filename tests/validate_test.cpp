// The shared boundary checks: each one trips with a message that names the argument.
#include "core/validate.hpp"

#include <gtest/gtest.h>

#include <limits>

#include "linattn/error.hpp"
#include "linattn/recurrent_state.hpp"
#include "support/temp_dir.hpp"

namespace linattn {
namespace {

using detail::check_extent;
using detail::check_key_lengths;
using detail::check_outputs;
using detail::check_view;
using detail::region;
using testing::error_of;

TEST(Validate, NullPointerNamesTheArgument) {
  ConstTensorView v(nullptr, {1, 2, 3, 4}, {24, 12, 4, 1});
  EXPECT_NE(error_of([&] { check_view("op", "q", v); }).find("q.data is null"), std::string::npos);
}

TEST(Validate, NonPositiveExtentNamesAxisAndValue) {
  float x[4];
  ConstTensorView v(x, {1, 0, 1, 4}, {4, 4, 4, 1});
  const std::string m = error_of([&] { check_view("op", "k", v); });
  EXPECT_NE(m.find("k.extent[1] (sequence) is 0, expected ≥ 1"), std::string::npos) << m;
}

TEST(Validate, NegativeStride) {
  float x[4];
  ConstTensorView v(x, {1, 1, 1, 4}, {4, 4, 4, -1});
  EXPECT_NE(error_of([&] { check_view("op", "v", v); }).find("v.stride[3] (dim) is -1"), std::string::npos);
}

TEST(Validate, ElementCountOverflow) {
  float x[1];
  const int64_t big = int64_t(1) << 40;
  ConstTensorView v(x, {big, big, 1, 1}, {1, 1, 1, 1});
  EXPECT_NE(error_of([&] { check_view("op", "q", v); }).find("overflows int64"), std::string::npos);
}

TEST(Validate, MismatchedExtentSaysWhatWasExpected) {
  float x[8];
  ConstTensorView v(x, {1, 2, 1, 4}, {8, 4, 4, 1});
  const std::string m = error_of([&] { check_extent("op", "k", v, 3, 5, "q's head dim"); });
  EXPECT_NE(m.find("k.extent[3] (dim) is 4, expected 5 (q's head dim)"), std::string::npos) << m;
}

TEST(Validate, AliasedOutputIsRejected) {
  float x[16];
  ConstTensorView a(x, {1, 2, 1, 4}, {8, 4, 4, 1});
  ConstTensorView b(x + 4, {1, 2, 1, 4}, {8, 4, 4, 1});
  ConstTensorView c(x + 8, {1, 2, 1, 4}, {8, 4, 4, 1});
  EXPECT_NE(error_of([&] { check_outputs("op", {region("out", b)}, {region("q", a)}); }).find("out overlaps q"),
            std::string::npos);
  EXPECT_EQ(error_of([&] { check_outputs("op", {region("out", c)}, {region("q", a)}); }), "<no error>");
}

TEST(Validate, KeyLengthsOutOfRange) {
  const int64_t lengths[] = {3, 9};
  EXPECT_NE(
      error_of([&] { check_key_lengths("op", lengths, 2, 8); }).find("key_lengths[1] is 9, expected a value in [0, 8]"),
      std::string::npos);
  EXPECT_NE(error_of([&] { check_key_lengths("op", lengths, 3, 9); }).find("key_lengths has 2 entries, expected 3"),
            std::string::npos);
  const int64_t negative[] = {-1};
  EXPECT_NE(error_of([&] { check_key_lengths("op", negative, 1, 4); }).find("key_lengths[0] is -1"), std::string::npos);
  EXPECT_EQ(error_of([&] { check_key_lengths("op", lengths, 2, 9); }), "<no error>");
}

TEST(Validate, RecurrentStateRejectsBadSizes) {
  EXPECT_THROW(RecurrentState(0, 1, 1, 1), Error);
  EXPECT_THROW(RecurrentState(1, 1, -2, 1), Error);
  const int64_t big = int64_t(1) << 32;
  EXPECT_THROW(RecurrentState(big, big, 2, 2), Error);
}

}  // namespace
}  // namespace linattn
