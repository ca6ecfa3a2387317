// .npy: bytes identical to numpy.save's, numpy interoperability both ways
// (through /usr/bin/python3), Fortran order and big-endian data, and an error
// naming the file for every bad header or body.
#include "linattn/npy.hpp"

#include <gtest/gtest.h>

#include <bit>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "io/bytes.hpp"
#include "linattn/file_io.hpp"
#include "support/temp_dir.hpp"

namespace linattn {
namespace {

using testing::error_of;
using testing::TempDir;

// The values numpy's side of the tests writes too: (i % 97) * 0.25 - 7 at
// C-order index i.
std::vector<float> ramp(int64_t n) {
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) x[size_t(i)] = float(i % 97) * 0.25f - 7.0f;
  return x;
}

int64_t count_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// A .npy file around a hand-written header dict; the dict is padded with spaces
// and '\n' to 64 bytes.
std::string npy_bytes(const std::string& dict, const std::string& data, int major = 1) {
  std::string text = dict;
  const size_t prefix = major == 1 ? 10 : 12;
  text.append(64 - (prefix + text.size() + 1) % 64, ' ');
  text += '\n';
  std::string out = std::string("\x93NUMPY", 6) + char(major) + '\0';
  io::put_le(out, text.size(), major == 1 ? 2 : 4);
  return out + text + data;
}

std::string le_floats(const std::vector<float>& x) {
  std::string s;
  io::put_f32s(s, x);
  return s;
}

std::string parse_error(const std::string& bytes) {
  return error_of([&] { npy::parse(bytes, "/data/x.npy"); });
}

// Expects the parse of `bytes` to fail with a message containing `want` and the
// file's name.
void expect_error(const std::string& bytes, const std::string& want) {
  const std::string m = parse_error(bytes);
  EXPECT_NE(m.find(want), std::string::npos) << "want '" << want << "' in: " << m;
  EXPECT_NE(m.find("/data/x.npy"), std::string::npos) << m;
}

const std::string kDict2x3 = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";

bool have_numpy() { return std::system("/usr/bin/python3 -c 'import numpy' >/dev/null 2>&1") == 0; }

// Runs a Python script (with numpy imported as np and `d` the directory) in
// /usr/bin/python3.
int run_python(const TempDir& dir, const std::string& body) {
  const std::string script = "import sys, numpy as np\nd = sys.argv[1]\n" + body;
  write_file_atomically(dir / "script.py", script);
  return std::system(("/usr/bin/python3 " + (dir / "script.py").string() + " " + dir.path().string()).c_str());
}

// kind + i + ".npy", appended piecewise: GCC 12 at -O3 misreports "literal" +
// string under -Wrestrict.
std::string file_name(const char* kind, size_t i) {
  std::string name(kind);
  name += std::to_string(i);
  name += ".npy";
  return name;
}

const std::vector<std::vector<int64_t>> kShapes = {
    {}, {0}, {1}, {5}, {2, 3}, {3, 0, 2}, {1, 97, 3, 59}, {2, 1, 65, 16}};

std::string py_tuple(const std::vector<int64_t>& shape) {
  std::string s = "(";
  for (int64_t d : shape) s += std::to_string(d) + ",";
  return s + ")";
}

TEST(Npy, NumpyWritesWeReadAndWeWriteTheSameBytes) {
  if (!have_numpy()) GTEST_SKIP() << "/usr/bin/python3 has no numpy";
  TempDir dir;
  std::string body =
      "def ramp(shape): return ((np.arange(int(np.prod(shape))) "
      "% 97) * 0.25 - 7).astype('<f4').reshape(shape)\n";
  for (size_t i = 0; i < kShapes.size(); ++i) {
    const std::string s = py_tuple(kShapes[i]), n = std::to_string(i);
    body += "np.save(d + '/c" + n + ".npy', ramp(" + s + "))\n";
    // asfortranarray makes a 0-d array 1-d, so the 0-d case saves it as it is.
    body += "x = ramp(" + s + ")\nnp.save(d + '/f" + n + ".npy', np.asfortranarray(x) if x.ndim else x)\n";
    body += "np.save(d + '/b" + n + ".npy', ramp(" + s + ").astype('>f4'))\n";
    body += "with open(d + '/v2_" + n + ".npy', 'wb') as f: np.lib.format.write_array(f, ramp(" + s + "), (2, 0))\n";
    body += "with open(d + '/v3_" + n + ".npy', 'wb') as f: np.lib.format.write_array(f, ramp(" + s + "), (3, 0))\n";
  }
  ASSERT_EQ(run_python(dir, body), 0);
  for (size_t i = 0; i < kShapes.size(); ++i) {
    const std::vector<float> want = ramp(count_of(kShapes[i]));
    for (const char* kind : {"c", "f", "b", "v2_", "v3_"}) {
      const auto path = dir / file_name(kind, i);
      const npy::Array a = npy::load(path);
      EXPECT_EQ(a.shape, kShapes[i]) << path;
      EXPECT_EQ(a.data, want) << path;
    }
    // numpy.save's bytes, header padding included, are exactly ours.
    EXPECT_EQ(npy::serialize(kShapes[i], want), read_file(dir / file_name("c", i))) << py_tuple(kShapes[i]);
  }
  EXPECT_TRUE(npy::parse_header(read_file(dir / "f4.npy")).fortran_order);  // the Fortran files really are
  EXPECT_EQ(npy::parse_header(read_file(dir / "b4.npy")).descr, ">f4");
}

TEST(Npy, WeWriteNumpyReads) {
  if (!have_numpy()) GTEST_SKIP() << "/usr/bin/python3 has no numpy";
  TempDir dir;
  std::string body;
  for (size_t i = 0; i < kShapes.size(); ++i) {
    std::vector<float> x = ramp(count_of(kShapes[i]));
    for (float& v : x) v = v * 1.5f + 0.125f;
    npy::save(dir / file_name("ours", i), kShapes[i], x);
    const std::string n = std::to_string(i), s = py_tuple(kShapes[i]);
    body += "a = np.load(d + '/ours" + n + ".npy')\n";
    body += "assert a.dtype == np.float32 and a.shape == " + s + ", (a.dtype, a.shape)\n";
    body += "want = (((np.arange(int(np.prod(" + s +
            "))) % 97) * 0.25 - 7).astype('<f4') * np.float32(1.5) + "
            "np.float32(0.125)).reshape(" +
            s + ")\n";
    body += "assert np.array_equal(a, want), " + n + "\n";
  }
  EXPECT_EQ(run_python(dir, body), 0);
}

TEST(Npy, RoundTripIsBitwise) {
  TempDir dir;
  std::vector<float> x = {-0.0f,
                          std::bit_cast<float>(0x7fc01234u),
                          std::bit_cast<float>(0xff800000u),
                          std::bit_cast<float>(0x00000001u),
                          1e38f,
                          -3.5f};
  npy::save(dir / "x.npy", std::vector<int64_t>{3, 2}, x);
  const npy::Array a = npy::load(dir / "x.npy");
  EXPECT_EQ(a.shape, (std::vector<int64_t>{3, 2}));
  ASSERT_EQ(a.data.size(), x.size());
  EXPECT_EQ(std::memcmp(a.data.data(), x.data(), 4 * x.size()), 0);
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"x.npy"});
}

TEST(Npy, FortranOrderIsTransposedToC) {
  // Logical a[i][j][k] = 100 i + 10 j + k, shape (2, 3, 4), stored with i
  // fastest.
  std::vector<float> f;
  for (int k = 0; k < 4; ++k)
    for (int j = 0; j < 3; ++j)
      for (int i = 0; i < 2; ++i) f.push_back(float(100 * i + 10 * j + k));
  const npy::Array a =
      npy::parse(npy_bytes("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3, 4), }", le_floats(f)));
  ASSERT_EQ(a.data.size(), 24u);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k) EXPECT_EQ(a.data[size_t(12 * i + 4 * j + k)], float(100 * i + 10 * j + k));
}

TEST(Npy, BigEndianIsSwapped) {
  std::string data;
  for (uint32_t bits : {0x3f800000u, 0xc0000000u}) {
    for (int b = 3; b >= 0; --b) data += char(uint8_t(bits >> (8 * b)));
  }
  const npy::Array a = npy::parse(npy_bytes("{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", data));
  EXPECT_EQ(a.data, (std::vector<float>{1.0f, -2.0f}));
}

TEST(Npy, AcceptsTheSpellingsPythonAllows) {
  const std::string data = le_floats(ramp(6));
  for (const std::string dict : {
           "{'descr':'<f4','fortran_order':False,'shape':(2,3)}",
           "{\"descr\": \"<f4\", \"fortran_order\": False, \"shape\": (2, 3,)}",
           "  {'shape': (2 , 3 ,), 'fortran_order': False, 'descr': '<f4',}",
           "{\n 'descr': '<f4',\n 'fortran_order': False,\n 'shape': (2L, "
           "3L),\n}",
       }) {
    const npy::Array a = npy::parse(npy_bytes(dict, data));
    EXPECT_EQ(a.shape, (std::vector<int64_t>{2, 3})) << dict;
    EXPECT_EQ(a.data, ramp(6)) << dict;
  }
  for (int major : {2, 3}) EXPECT_EQ(npy::parse(npy_bytes(kDict2x3, data, major)).data, ramp(6));
  EXPECT_EQ(npy::parse_header(npy_bytes(kDict2x3, data)).data_offset,
            128);  // 10 + 60 + 1 rounded up to 64
}

// float16 files ('<f2' and '>f2') load widened exactly; save with DType::f16 writes '<f2', rounded.
TEST(Npy, Float16) {
  const std::vector<float> values{1.0f, -2.5f, 65504.0f, 0.0009765625f, 3.140625f, -0.0f};
  const int64_t shape[] = {2, 3};
  const std::string bytes = npy::serialize(shape, values, DType::f16);
  EXPECT_NE(bytes.find("'descr': '<f2'"), std::string::npos);
  const npy::Array a = npy::parse(bytes);
  EXPECT_EQ(a.dtype, DType::f16);
  EXPECT_EQ(a.data, values);  // every value is a float16 already
  EXPECT_EQ(npy::parse(npy::serialize(shape, std::vector<float>(6, 1.0001f), DType::f16)).data[0], 1.0f);
  std::string big =
      npy_bytes("{'descr': '>f2', 'fortran_order': False, 'shape': (2,), }", std::string("\x3c\x00\xc0\x00", 4));
  EXPECT_EQ(npy::parse(big).data, (std::vector<float>{1.0f, -2.0f}));
  expect_error(npy_bytes("{'descr': '<f2', 'fortran_order': False, 'shape': (3,), }", "1234"),
               "truncated: data is 4 bytes, expected 6 (float16, shape (3,))");
  EXPECT_THROW(npy::serialize(shape, values, DType::bf16), Error);
}

TEST(Npy, RejectsOtherDtypesNamingThem) {
  for (const char* descr : {"<f8", "<i4", "|f4", "f4", "=f4", "|f2", "|b1", "|O", "<c8", ""}) {
    const std::string bytes =
        npy_bytes(std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': (2,), }", "12345678");
    EXPECT_EQ(npy::parse_header(bytes).descr,
              descr);  // a header check, not a dtype check
    expect_error(bytes, std::string("dtype is '") + descr + "', expected float32 ('<f4') or float16 ('<f2')");
  }
  expect_error(npy_bytes("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }", "12345678"),
               "structured dtype");
}

TEST(Npy, TruncationAtEveryLength) {
  const std::string good = npy::serialize(std::vector<int64_t>{3, 5}, ramp(15));
  for (size_t n = 0; n < good.size(); ++n) {
    const std::string m = parse_error(good.substr(0, n));
    const char* want = n < 6     ? "not a .npy file"
                       : n < 10  ? "truncated"
                       : n < 128 ? "header length 118 exceeds the file"
                                 : "truncated: data is";
    EXPECT_NE(m.find(want), std::string::npos) << n << ": " << m;
  }
  expect_error(good + "x", "trailing bytes: data is 61 bytes, expected 60");
}

// load reads the header and the data separately; it must see every file exactly as parse does.
TEST(Npy, LoadAgreesWithParseOnEveryTruncationAndTail) {
  TempDir dir;
  const std::string good =
      npy_bytes("{'descr': '>f4', 'fortran_order': True, 'shape': (3, 4), }", le_floats(ramp(12)), 2);
  testing::expect_load_agrees_with_parse(
      dir / "t.npy", good, [](const auto& path) { return npy::load(path); },
      [](std::string_view bytes, const std::string& name) { return npy::parse(bytes, name); });
  // and the same values (big-endian Fortran data, swapped and transposed).
  write_file_atomically(dir / "good.npy", good);
  const npy::Array loaded = npy::load(dir / "good.npy"), parsed = npy::parse(good);
  ASSERT_EQ(loaded.data.size(), parsed.data.size());
  EXPECT_EQ(std::memcmp(loaded.data.data(), parsed.data.data(), 4 * parsed.data.size()), 0);
}

TEST(Npy, MagicAndVersion) {
  expect_error("PK\3\4not numpy at all", "not a .npy file");
  std::string bytes = npy_bytes(kDict2x3, le_floats(ramp(6)));
  for (const auto& [major, minor] : {std::pair{0, 0}, {4, 0}, {1, 1}, {255, 255}}) {
    bytes[6] = char(major);
    bytes[7] = char(minor);
    expect_error(bytes, "format version is " + std::to_string(major) + "." + std::to_string(minor) +
                            ", expected 1.0, 2.0 or 3.0");
  }
}

TEST(Npy, AbsurdHeaderLengths) {
  std::string v1 = std::string("\x93NUMPY\1\0", 8) + "\xff\xff" + "{}";
  expect_error(v1, "header length 65535 exceeds 10000 (numpy's own limit)");
  v1 = std::string("\x93NUMPY\1\0", 8) + "\x10\x27" + "{}";
  expect_error(v1, "header length 10000 exceeds the file (2 bytes after the length field)");
  std::string v2 = std::string("\x93NUMPY\2\0", 8) + "\xff\xff\xff\xff" + "{}";
  expect_error(v2, "header length 4294967295 exceeds 10000");
  // A header longer than numpy allows, inside a file that holds it.
  std::string v3 = std::string("\x93NUMPY\3\0", 8);
  io::put_le(v3, 20000, 4);
  v3 += kDict2x3 + std::string(20000 - kDict2x3.size(), ' ');
  expect_error(v3, "header length 20000 exceeds 10000");
}

TEST(Npy, MalformedHeaderDicts) {
  const std::string data = le_floats(ramp(6));
  const std::pair<std::string, std::string> cases[] = {
      {"", "is not a dict"},
      {"[1, 2]", "is not a dict"},
      {"'descr'", "is not a dict"},
      {"{", "expected a key string"},
      {"{'descr': '<f4'", "expected ',' or '}'"},
      {"{'descr' '<f4'}", "expected ':' after key 'descr'"},
      {"{'descr': '<f4", "unterminated string at offset 10"},
      {"{'descr': '<f4', 'fortran_order': False}", "is missing key 'shape'"},
      {"{'fortran_order': False, 'shape': (2, 3)}", "is missing key 'descr'"},
      {"{'descr': '<f4', 'shape': (2, 3)}", "is missing key 'fortran_order'"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), 'extra': 1}", "unknown key 'extra'"},
      {"{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2, "
       "3)}",
       "key 'descr' twice"},
      {"{'descr': '<f4', 'fortran_order': 0, 'shape': (2, 3)}", "fortran_order is not True or False"},
      {"{'descr': '<f4', 'fortran_order': Falsey, 'shape': (2, 3)}", "expected ',' or '}'"},
      {"{'descr': '<f\\x34', 'fortran_order': False, 'shape': (2, 3)}", "escape sequence"},
      {"{'descr': '<f4, 'fortran_order': False, 'shape': (2, 3)}", "expected ',' or '}'"},
      {"{'descr': <f4, 'fortran_order': False, 'shape': (2, 3)}", "expected descr as a string"},
      {"{descr: '<f4'}", "expected a key string"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': [2, 3]}", "shape is not a tuple"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (6)}", "shape (6) is not a tuple"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,, 3)}", "shape[1] is not an integer"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2 3)}", "expected ',' or ')' in shape"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (1.5,)}", "expected ',' or ')' in shape"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': ('2',)}", "shape[0] is not an integer"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (-2, -3)}", "shape[0] is -2, expected ≥ 0"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, -3)}", "shape[1] is -3, expected ≥ 0"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': "
       "(99999999999999999999,)}",
       "shape[0] overflows int64"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, "
       "4294967296)}",
       "element count of shape"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1, 1, 1, 1, 1, "
       "1, 1, 6)}",
       "more than 8 dims"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)} x", "text after the dict"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)}{}", "text after the dict"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), 'ü': 1}",
       "header byte 59 is 0xc3, expected printable ASCII"},
      {std::string("{'descr': '<f4'\0", 16), "header byte 15 is 0x0"},
  };
  for (const auto& [dict, want] : cases) expect_error(npy_bytes(dict, data), want);
  // Python 3 literals: no leading zeros; the long suffix only where numpy filters it (1.0 and 2.0).
  expect_error(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 03)}", data),
               "shape[1] has a leading zero");
  expect_error(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2L, 3L)}", data, 3),
               "expected ',' or ')'");
  EXPECT_EQ(npy::parse(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2L, 3L)}", data, 2)).data,
            ramp(6));
  EXPECT_EQ(npy::parse(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (00, 3)}", "")).shape,
            (std::vector<int64_t>{0, 3}));
}

// A shape whose byte count overflows int64 although its element count does not,
// and a shape that fits int64 but not the file: both refused before anything is
// allocated.
TEST(Npy, HugeShapesAreRefusedBeforeAllocating) {
  expect_error(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': "
                         "(4611686018427387904,)}",
                         ""),
               "the data size overflows int64");
  expect_error(npy_bytes("{'descr': '<f4', 'fortran_order': True, 'shape': "
                         "(65536, 65536, 1024)}",
                         "abcd"),
               "truncated: data is 4 bytes, expected 17592186044416");
  // Zero elements behind huge dims is a valid empty array, in either order.
  const npy::Array empty =
      npy::parse(npy_bytes("{'descr': '<f4', 'fortran_order': True, 'shape': (0, 4611686018427387904, 9), }", ""));
  EXPECT_EQ(empty.shape, (std::vector<int64_t>{0, 4611686018427387904, 9}));
  EXPECT_TRUE(empty.data.empty());
}

TEST(Npy, SerializeChecksItsArguments) {
  const std::vector<float> six = ramp(6);
  std::string m = error_of([&] { npy::serialize(std::vector<int64_t>{2, 2}, six); });
  EXPECT_NE(m.find("data has 6 elements, expected 4 (shape (2, 2))"), std::string::npos) << m;
  m = error_of([&] { npy::serialize(std::vector<int64_t>{-2, -3}, six); });
  EXPECT_NE(m.find("shape[0] is -2, expected ≥ 0"), std::string::npos) << m;
  m = error_of([&] { npy::serialize(std::vector<int64_t>(9, 1), std::vector<float>{1.0f}); });
  EXPECT_NE(m.find("shape has 9 dims, expected at most 8"), std::string::npos) << m;
  m = error_of([&] { npy::serialize(std::vector<int64_t>{int64_t(1) << 40, int64_t(1) << 40}, six); });
  EXPECT_NE(m.find("overflows int64"), std::string::npos) << m;
}

TEST(Npy, MissingFileNamesPath) {
  TempDir dir;
  const std::string m = error_of([&] { npy::load(dir / "q.npy"); });
  EXPECT_NE(m.find((dir / "q.npy").string()), std::string::npos) << m;
}

}  // namespace
}  // namespace linattn
