// RecurrentState::save/load: bitwise round trips, the byte layout of docs/state-format.md, and an
// error naming the path for every corruption class (flipped bytes, truncation, trailing bytes, wrong
// magic, future version, absurd sizes under a valid checksum).
#include "io/state_file.hpp"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>

#include "io/bytes.hpp"
#include "linattn/file_io.hpp"
#include "linattn/recurrent_state.hpp"
#include "support/temp_dir.hpp"

namespace linattn {
namespace {

using testing::error_of;
using testing::TempDir;

// Fills S and z with random values plus the awkward ones: ±0, ±inf, NaN with a payload, denormals.
RecurrentState random_state(int64_t B, int64_t H, int64_t M, int64_t E, const std::string& map, uint64_t seed) {
  RecurrentState state(B, H, M, E, map);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  const float specials[] = {-0.0f,
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            std::bit_cast<float>(0x7fc01234u),
                            std::numeric_limits<float>::denorm_min(),
                            0.0f};
  size_t i = 0;
  for (float& x : state.S()) x = i < 6 ? specials[i++] : normal(rng);
  for (float& x : state.z()) x = normal(rng);
  state.set_position(int64_t(rng() % 100000));
  return state;
}

void expect_same(const RecurrentState& a, const RecurrentState& b) {
  EXPECT_EQ(a.batch(), b.batch());
  EXPECT_EQ(a.heads(), b.heads());
  EXPECT_EQ(a.feature_dim(), b.feature_dim());
  EXPECT_EQ(a.value_dim(), b.value_dim());
  EXPECT_EQ(a.position(), b.position());
  EXPECT_EQ(a.feature_map(), b.feature_map());
  ASSERT_EQ(a.S().size(), b.S().size());
  ASSERT_EQ(a.z().size(), b.z().size());
  EXPECT_EQ(std::memcmp(a.S().data(), b.S().data(), 4 * a.S().size()), 0);
  EXPECT_EQ(std::memcmp(a.z().data(), b.z().data(), 4 * a.z().size()), 0);
}

// Recomputes both checksums after a test edits header fields, so that the checks behind them run.
std::string reseal(std::string bytes) {
  const size_t header_end = size_t(io::kStateFixedHeader) + io::get_u32(bytes.data() + io::kStateFixedHeader - 4);
  std::string crc;
  io::put_u32(crc, crc32(std::string_view(bytes).substr(0, header_end)));
  bytes.replace(header_end, 4, crc);
  crc.clear();
  io::put_u32(crc, crc32(std::string_view(bytes).substr(0, bytes.size() - 4)));
  bytes.replace(bytes.size() - 4, 4, crc);
  return bytes;
}

std::string with_i64(std::string bytes, size_t offset, int64_t v) {
  std::string field;
  io::put_i64(field, v);
  bytes.replace(offset, 8, field);
  return reseal(bytes);
}

std::string load_error(const std::string& bytes) {
  return error_of([&] { io::parse_state(bytes, "/some/dir/s.state"); });
}

TEST(StateFile, RoundTripIsBitwise) {
  TempDir dir;
  const struct {
    int64_t B, H, M, E;
    const char* map;
  } cases[] = {
      {1, 1, 1, 1, "elu"}, {2, 3, 5, 7, "relu"}, {3, 1, 59, 64, "performer:m=59:seed=7"}, {1, 3, 16, 128, "identity"}};
  for (const auto& c : cases) {
    const RecurrentState state = random_state(c.B, c.H, c.M, c.E, c.map, uint64_t(c.M));
    state.save(dir / "s.state");
    expect_same(RecurrentState::load(dir / "s.state"), state);
  }
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"s.state"});
}

// The layout of docs/state-format.md, byte by byte, for a 1×1×1×2 state.
TEST(StateFile, BytesAreTheDocumentedLittleEndianLayout) {
  RecurrentState state(1, 1, 1, 2, "elu");
  state.S()[0] = 1.0f;   // 0x3f800000
  state.S()[1] = -2.0f;  // 0xc0000000
  state.z()[0] = 0.5f;   // 0x3f000000
  state.set_position(258);
  const std::string b = io::serialize_state(state);
  const std::string header = std::string("LNATSTAT") + std::string("\1\0\0\0", 4) + std::string("\1\0\0\0\0\0\0\0", 8) +
                             std::string("\1\0\0\0\0\0\0\0", 8) + std::string("\1\0\0\0\0\0\0\0", 8) +
                             std::string("\2\0\0\0\0\0\0\0", 8) + std::string("\2\1\0\0\0\0\0\0", 8) +
                             std::string("\3\0\0\0", 4) + "elu";
  ASSERT_EQ(b.size(), header.size() + 4 + 12 + 4);
  EXPECT_EQ(b.substr(0, header.size()), header);
  EXPECT_EQ(io::get_u32(b.data() + header.size()), crc32(header));
  EXPECT_EQ(b.substr(header.size() + 4, 12), std::string("\0\0\x80\x3f\0\0\0\xc0\0\0\0\x3f", 12));
  EXPECT_EQ(io::get_u32(b.data() + b.size() - 4), crc32(std::string_view(b).substr(0, b.size() - 4)));
}

// docs/state-format.md as an independent reader and writer (Python's struct and zlib) sees it.
const char* const kPythonStateFormat = R"(import struct, sys, zlib
def write(path, B, H, M, E, position, name):
    header = b'LNATSTAT' + struct.pack('<I5qI', 1, B, H, M, E, position, len(name)) + name
    n, m = B * H * M * E, B * H * M
    body = header + struct.pack('<I', zlib.crc32(header)) + struct.pack('<%df' % (n + m), *([i * 0.5 for i in range(n)] + [-i for i in range(m)]))
    open(path, 'wb').write(body + struct.pack('<I', zlib.crc32(body)))
def check(path, B, H, M, E, position, name):
    b = open(path, 'rb').read()
    assert b[:8] == b'LNATSTAT'
    version, b_, h, m_, e, pos, L = struct.unpack_from('<I5qI', b, 8)
    assert (version, b_, h, m_, e, pos) == (1, B, H, M, E, position) and b[56:56 + L] == name
    assert struct.unpack_from('<I', b, 56 + L)[0] == zlib.crc32(b[:56 + L])
    n, m = B * H * M * E, B * H * M
    assert len(b) == 64 + L + 4 * (n + m)
    values = struct.unpack_from('<%df' % (n + m), b, 60 + L)
    assert list(values) == [i * 0.25 for i in range(n)] + [i + 1.0 for i in range(m)]
    assert struct.unpack_from('<I', b, len(b) - 4)[0] == zlib.crc32(b[:-4])
{}
)";

TEST(StateFile, MatchesTheDocumentAsPythonReadsAndWritesIt) {
  if (std::system("/usr/bin/python3 -c 'import zlib' >/dev/null 2>&1") != 0) GTEST_SKIP() << "no /usr/bin/python3";
  TempDir dir;
  RecurrentState ours(2, 1, 3, 2, "relu");
  for (size_t i = 0; i < ours.S().size(); ++i) ours.S()[i] = float(i) * 0.25f;
  for (size_t i = 0; i < ours.z().size(); ++i) ours.z()[i] = float(i) + 1.0f;
  ours.set_position(9);
  ours.save(dir / "ours.state");
  std::string script = kPythonStateFormat;
  const std::string calls =
      "write(sys.argv[1] + '/theirs.state', 2, 1, 3, 2, 9, b'relu')\n"
      "check(sys.argv[1] + '/ours.state', 2, 1, 3, 2, 9, b'relu')\n";
  script.replace(script.find("{}"), 2, calls);
  write_file_atomically(dir / "format.py", script);
  ASSERT_EQ(std::system(("/usr/bin/python3 " + (dir / "format.py").string() + " " + dir.path().string()).c_str()), 0);
  const RecurrentState theirs = RecurrentState::load(dir / "theirs.state");
  EXPECT_EQ(theirs.feature_map(), "relu");
  EXPECT_EQ(theirs.position(), 9);
  EXPECT_EQ(theirs.S().size(), 12u);
  for (size_t i = 0; i < theirs.S().size(); ++i) EXPECT_EQ(theirs.S()[i], float(i) * 0.5f);
  for (size_t i = 0; i < theirs.z().size(); ++i) EXPECT_EQ(theirs.z()[i], -float(i));
}

TEST(StateFile, EveryFlippedByteIsCaught) {
  const std::string good = io::serialize_state(random_state(1, 2, 3, 2, "elu", 1));
  const size_t header_end = size_t(io::kStateFixedHeader) + 3;
  for (size_t i = 0; i < good.size(); ++i) {
    for (uint8_t mask : {uint8_t(0x01), uint8_t(0x80), uint8_t(0xff)}) {
      std::string bad = good;
      bad[i] = char(uint8_t(bad[i]) ^ mask);
      const std::string m = load_error(bad);
      EXPECT_NE(m.find("/some/dir/s.state"), std::string::npos) << m;
      const char* want = i < 8                ? "magic"
                         : i < 12             ? "version"
                         : i >= 52 && i < 56  ? ""  // the name length: checksum or bound
                         : i < header_end + 4 ? "header checksum mismatch"
                                              : "checksum mismatch (corrupt data)";
      EXPECT_NE(m.find(want), std::string::npos) << "byte " << i << " mask " << int(mask) << ": " << m;
      if (i >= 52 && i < 56) {
        EXPECT_TRUE(m.find("checksum") != std::string::npos || m.find("name length") != std::string::npos) << m;
      }
    }
  }
}

TEST(StateFile, EveryTruncationIsCaught) {
  const std::string good = io::serialize_state(random_state(2, 1, 3, 4, "relu", 2));
  for (size_t n = 0; n < good.size(); ++n) {
    const std::string m = load_error(good.substr(0, n));
    EXPECT_NE(m.find("truncated: file is " + std::to_string(n) + " bytes"), std::string::npos) << m;
  }
}

// load reads the file front to back; it must see every file exactly as parse_state does.
TEST(StateFile, LoadAgreesWithParseOnEveryTruncationAndTail) {
  TempDir dir;
  const std::string good = io::serialize_state(random_state(1, 2, 3, 2, "elu", 6));
  testing::expect_load_agrees_with_parse(
      dir / "t.state", good, [](const auto& path) { return RecurrentState::load(path); },
      [](std::string_view bytes, const std::string& name) { return io::parse_state(bytes, name); });
}

TEST(StateFile, TrailingBytesAreCaught) {
  const std::string good = io::serialize_state(random_state(1, 1, 2, 2, "elu", 3));
  for (const std::string& tail : {std::string(1, '\0'), std::string("garbage"), good}) {
    const std::string m = load_error(good + tail);
    EXPECT_NE(m.find("trailing bytes: file is " + std::to_string(good.size() + tail.size())), std::string::npos) << m;
  }
}

TEST(StateFile, WrongMagic) {
  const char npy[] = "\x93NUMPY\1\0v\0{'descr': '<f4'}";
  EXPECT_NE(load_error(std::string(npy, sizeof npy - 1)).find("not a linattn state file"), std::string::npos);
  std::string bad = io::serialize_state(RecurrentState(1, 1, 1, 1));
  bad[7] = 'X';
  EXPECT_NE(load_error(reseal(bad)).find("magic is not \"LNATSTAT\""), std::string::npos);
}

TEST(StateFile, FutureAndZeroVersions) {
  std::string bytes = io::serialize_state(RecurrentState(1, 1, 1, 1));
  bytes[8] = 3;
  std::string m = load_error(reseal(bytes));
  EXPECT_NE(m.find("written by a newer linattn (version 3), this build reads up to 2"), std::string::npos) << m;
  bytes[8] = 0;
  m = load_error(reseal(bytes));
  EXPECT_NE(m.find("format version is 0, expected 1..2"), std::string::npos) << m;
}

// Header fields edited under valid checksums: the size checks, not the checksum, must catch them,
// and before any allocation the sizes would drive.
TEST(StateFile, AbsurdSizesUnderValidChecksums) {
  const std::string good = io::serialize_state(RecurrentState(2, 2, 2, 2));
  const size_t batch = 12, heads = 20, feature_dim = 28, value_dim = 36, position = 44;
  EXPECT_NE(load_error(with_i64(good, batch, 0)).find("batch is 0, expected ≥ 1"), std::string::npos);
  EXPECT_NE(load_error(with_i64(good, heads, -3)).find("heads is -3, expected ≥ 1"), std::string::npos);
  EXPECT_NE(load_error(with_i64(good, feature_dim, std::numeric_limits<int64_t>::min())).find("feature_dim is -"),
            std::string::npos);
  EXPECT_NE(load_error(with_i64(good, value_dim, -1)).find("value_dim is -1"), std::string::npos);
  EXPECT_NE(load_error(with_i64(good, position, -1)).find("position is -1, expected in [0, 4611686018427387904]"),
            std::string::npos);
  // Each size alone fits int64 but the product does not.
  std::string m = load_error(with_i64(with_i64(good, batch, int64_t(1) << 40), heads, int64_t(1) << 40));
  EXPECT_NE(m.find("overflows int64"), std::string::npos) << m;
  // The product fits int64 but the byte count does not.
  m = load_error(with_i64(good, value_dim, int64_t(1) << 59));
  EXPECT_NE(m.find("overflow int64"), std::string::npos) << m;
  // Huge but representable: 2^40 elements must be refused by the file size, not allocated.
  m = load_error(with_i64(good, value_dim, int64_t(1) << 37));
  EXPECT_NE(m.find("truncated: file is " + std::to_string(good.size()) +
                   " bytes, expected 4398046511203 (header: batch 2, heads 2, feature_dim 2, value_dim 137438953472)"),
            std::string::npos)
      << m;
  // Fewer elements than the data holds.
  m = load_error(with_i64(good, value_dim, 1));
  EXPECT_NE(m.find("trailing bytes"), std::string::npos) << m;
}

TEST(StateFile, FeatureMapNameIsBounded) {
  // A name length past the end of the file.
  std::string bytes = io::serialize_state(RecurrentState(1, 1, 1, 1));
  std::string field;
  io::put_u32(field, 0xfffffff0u);
  bytes.replace(io::kStateFixedHeader - 4, 4, field);
  std::string m = load_error(bytes);
  EXPECT_NE(m.find("feature map name length is 4294967280, expected ≤ 256"), std::string::npos) << m;
  // A long name inside a big enough file, under a valid header checksum.
  RecurrentState big(1, 1, 16, 16, "elu");
  bytes = io::serialize_state(big);
  field.clear();
  io::put_u32(field, 300);
  bytes.replace(io::kStateFixedHeader - 4, 4, field);
  m = load_error(reseal(bytes));
  EXPECT_NE(m.find("feature map name length is 300, expected ≤ 256"), std::string::npos) << m;
  // Bytes outside printable ASCII.
  bytes = io::serialize_state(RecurrentState(1, 1, 1, 1, "elu"));
  bytes[io::kStateFixedHeader + 1] = char(0xc3);
  m = load_error(reseal(bytes));
  EXPECT_NE(m.find("not printable ASCII"), std::string::npos) << m;
}

TEST(StateFile, SaveRejectsWhatLoadWouldReject) {
  TempDir dir;
  EXPECT_NE(error_of([&] { RecurrentState().save(dir / "s.state"); }).find("state is empty"), std::string::npos);
  EXPECT_NE(error_of([&] { RecurrentState(1, 1, 1, 1, "has space").save(dir / "s.state"); }).find("printable ASCII"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              RecurrentState(1, 1, 1, 1, std::string(257, 'a')).save(dir / "s.state");
            }).find("feature map name"),
            std::string::npos);
  RecurrentState negative(1, 1, 1, 1);
  negative.set_position(-1);
  EXPECT_NE(error_of([&] { negative.save(dir / "s.state"); }).find("position is -1"), std::string::npos);
  EXPECT_TRUE(dir.entries().empty());
}

TEST(StateFile, MissingFileNamesPath) {
  TempDir dir;
  const std::string m = error_of([&] { RecurrentState::load(dir / "none.state"); });
  EXPECT_NE(m.find((dir / "none.state").string()), std::string::npos) << m;
  EXPECT_NE(m.find("No such file"), std::string::npos) << m;
}

TEST(StateFile, FailedSaveLeavesTheOldFile) {
  TempDir dir;
  const RecurrentState old_state = random_state(1, 2, 3, 4, "elu", 5);
  old_state.save(dir / "s.state");
  std::filesystem::create_directory(dir / "d.state");
  EXPECT_NE(error_of([&] { old_state.save(dir / "d.state"); }).find("rename"), std::string::npos);
  expect_same(RecurrentState::load(dir / "s.state"), old_state);
  EXPECT_EQ(dir.entries(), (std::vector<std::string>{"d.state", "s.state"}));
}

}  // namespace
}  // namespace linattn
