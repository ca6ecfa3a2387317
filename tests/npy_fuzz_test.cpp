// Seeded mutation fuzzing of the .npy and state-file readers, run in CI: bit
// flips, byte edits, truncations, splices and random header dicts. Every input
// must either parse into a consistent array or throw linattn::Error; any other
// exception, crash or sanitizer report fails.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <random>

#include "io/bytes.hpp"
#include "io/state_file.hpp"
#include "linattn/error.hpp"
#include "linattn/file_io.hpp"
#include "linattn/npy.hpp"
#include "support/temp_dir.hpp"

namespace linattn {
namespace {

using Rng = std::mt19937_64;

size_t below(Rng& rng, size_t n) { return n == 0 ? 0 : size_t(rng() % n); }
template <class T, size_t N>
const T& pick(Rng& rng, const T (&items)[N]) {
  return items[below(rng, N)];
}

std::string npy_file(const std::string& dict, size_t data_bytes, int major, Rng& rng) {
  std::string text = dict;
  const size_t prefix = major == 1 ? 10 : 12;
  text.append(below(rng, 3) ? 64 - (prefix + text.size() + 1) % 64 : below(rng, 5), ' ');
  text += '\n';
  std::string out = std::string("\x93NUMPY", 6) + char(major) + '\0';
  io::put_le(out, text.size(), major == 1 ? 2 : 4);
  out += text;
  for (size_t i = 0; i < data_bytes; ++i) out += char(rng());
  return out;
}

// A header dict assembled from plausible and implausible pieces, with a data
// size near the one the shape implies. Two in three are well formed (numpy-like
// keys, values and sizes) with small deviations, so that both the accepting and
// the rejecting paths stay busy.
std::string random_npy(Rng& rng) {
  static const char* const good_descrs[] = {"'<f4'", "'>f4'", "\"<f4\""};
  static const char* const descrs[] = {"'<f4'", "'>f4'",   "'|f4'",          "'<f8'", "'<i4'", "'f4'",
                                       "''",    "\"<f4\"", "[('a', '<f4')]", "'<f4",  "<f4",   "'\\x3cf4'"};
  static const char* const good_bools[] = {"True", "False"};
  static const char* const bools[] = {"True", "False", "0", "None", "'True'", "Tru", "FalseX"};
  static const char* const good_dims[] = {"0", "1", "2", "3", "7", "64", "1L"};
  static const char* const dims[] = {
      "0",  "1",   "2",   "3", "7",  "64", "-1", "-0", "2147483648", "4611686018427387904", "99999999999999999999",
      "1L", "'a'", "1.5", "",  " 5 "};
  static const char* const spaces[] = {"", " ", "  ", "\n", "\t"};
  static const char* const keys[] = {"'descr'", "'fortran_order'", "'shape'", "\"shape\"", "'extra'", "descr"};
  const bool good = below(rng, 3) != 0;
  std::vector<size_t> order = {0, 1, 2};
  std::shuffle(order.begin(), order.end(), rng);
  if (!good || below(rng, 10) == 0) {
    if (below(rng, 2)) order.erase(order.begin() + long(below(rng, 3)));
    if (below(rng, 2)) order.insert(order.begin() + long(below(rng, order.size() + 1)), below(rng, 6));
  }
  std::string dict = pick(rng, spaces) + std::string("{");
  int64_t count = 1;
  for (size_t e = 0; e < order.size(); ++e) {
    const size_t k = order[e];
    dict += std::string(pick(rng, spaces)) + keys[k] + pick(rng, spaces) + ":" + pick(rng, spaces);
    if (k == 0 || k == 5) dict += good ? pick(rng, good_descrs) : pick(rng, descrs);
    if (k == 1) dict += good ? pick(rng, good_bools) : pick(rng, bools);
    if (k >= 2 && k <= 4) {
      dict += good || below(rng, 10) ? "(" : "[";
      const size_t rank = good ? below(rng, 5) : below(rng, 11);
      for (size_t r = 0; r < rank; ++r) {
        const char* d = good && below(rng, 20) ? pick(rng, good_dims) : pick(rng, dims);
        const int64_t v = std::atoll(d);
        if (v > 0 && v < 100) count *= v;
        dict += std::string(d) + (r + 1 < rank || rank == 1 || below(rng, 2) ? "," : "") + pick(rng, spaces);
      }
      dict += good || below(rng, 10) ? ")" : "";
    }
    dict += e + 1 < order.size() || below(rng, 2) ? "," : "";
  }
  dict += good || below(rng, 10) ? "}" : "";
  const size_t data = size_t(std::min<int64_t>(count, 4096)) * 4;
  return npy_file(dict, good || below(rng, 4) ? data : below(rng, 2 * data + 2), int(1 + below(rng, 3)), rng);
}

// One random edit: bit flip, byte set, insertion, deletion, truncation, splice
// or length-field poke.
std::string mutate(std::string s, const std::vector<std::string>& corpus, Rng& rng) {
  static const char interesting[] = {'\0', '\xff', '\x80', '(', ')', ',',  '-', '9',
                                     '\'', '{',    '}',    ':', ' ', '\n', 'L'};
  const int edits = 1 + int(below(rng, 4));
  for (int e = 0; e < edits; ++e) {
    const size_t at = below(rng, s.size() + 1);
    switch (below(rng, 7)) {
      case 0:
        if (at < s.size()) s[at] = char(s[at] ^ char(1 << below(rng, 8)));
        break;
      case 1:
        if (at < s.size()) s[at] = pick(rng, interesting);
        break;
      case 2:
        s.insert(at, 1, pick(rng, interesting));
        break;
      case 3:
        if (at < s.size()) s.erase(at, 1 + below(rng, 8));
        break;
      case 4:
        s.resize(at);
        break;
      case 5: {
        const std::string& other = corpus[below(rng, corpus.size())];
        const size_t from = below(rng, other.size() + 1);
        s = s.substr(0, at) + other.substr(from);
        break;
      }
      case 6:
        if (s.size() >= 12) {
          std::string field;
          io::put_le(field, rng() >> (8 * below(rng, 8)), 4);
          s.replace(8, below(rng, 2) ? 2 : 4, field.substr(0, 4));
        }
        break;
    }
  }
  return s;
}

std::vector<std::string> npy_corpus() {
  std::vector<std::string> corpus;
  const std::vector<std::vector<int64_t>> shapes = {{}, {0}, {3}, {2, 3}, {1, 4, 1, 2}, {2, 0, 5}};
  for (const auto& shape : shapes) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    corpus.push_back(npy::serialize(shape, std::vector<float>(size_t(n), 1.5f)));
  }
  corpus.push_back(corpus[3]);
  corpus.back().replace(corpus.back().find("<f4"), 3, ">f4");
  corpus.push_back(corpus[3]);
  corpus.back().replace(corpus.back().find("False"), 5, "True ");
  return corpus;
}

// Parses `bytes`; a result must be self-consistent. Returns whether it parsed.
bool parses_consistently(const std::string& bytes) {
  try {
    const npy::Array a = npy::parse(bytes, "fuzz.npy");
    int64_t n = 1;
    for (int64_t d : a.shape) {
      EXPECT_GE(d, 0);
      n *= d;
    }
    EXPECT_EQ(int64_t(a.data.size()), n);
    EXPECT_LE(a.data.size() * 4, bytes.size());
    return true;
  } catch (const Error&) {
    return false;
  }
}

TEST(NpyFuzz, MutatedAndRandomInputsParseOrThrowError) {
  Rng rng(20261129);
  const std::vector<std::string> corpus = npy_corpus();
  for (const std::string& seed : corpus) ASSERT_TRUE(parses_consistently(seed));
  int parsed = 0;
  const int iterations = 40000;
  for (int i = 0; i < iterations; ++i) {
    const std::string input = i % 2 ? mutate(corpus[below(rng, corpus.size())], corpus, rng)
                                    : (i % 4 ? random_npy(rng) : mutate(random_npy(rng), corpus, rng));
    parsed += parses_consistently(input);
    try {
      npy::parse_header(input);
    } catch (const Error&) {
    }
  }
  // Both outcomes must occur, or the generator has stopped exercising one side.
  EXPECT_GT(parsed, iterations / 100);
  EXPECT_LT(parsed, iterations / 2);
  std::printf("npy fuzz: %d of %d inputs parsed\n", parsed, iterations);
}

TEST(NpyFuzz, MutatedStateFilesParseOrThrowError) {
  Rng rng(7);
  std::vector<std::string> corpus;
  for (const auto& [b, h, m, e] : {std::array<int64_t, 4>{1, 1, 1, 1}, {2, 3, 4, 5}, {1, 2, 16, 3}}) {
    RecurrentState state(b, h, m, e, "elu");
    for (float& x : state.S()) x = float(rng() % 1000) / 7.0f;
    corpus.push_back(io::serialize_state(state));
  }
  int parsed = 0;
  const int iterations = 20000;
  for (int i = 0; i < iterations; ++i) {
    const std::string input = mutate(corpus[below(rng, corpus.size())], corpus, rng);
    try {
      const RecurrentState s = io::parse_state(input, "fuzz.state");
      EXPECT_EQ(int64_t(s.S().size()), s.batch() * s.heads() * s.feature_dim() * s.value_dim());
      ++parsed;
    } catch (const Error&) {
    }
  }
  // Only edits that undo themselves (or splice a whole valid file) may survive
  // both checksums.
  EXPECT_LT(parsed, iterations / 10);
}

// Differential check against numpy: every mutated input that we accept,
// numpy.load accepts too and reads as the same array (we compare by
// re-serializing both).
TEST(NpyFuzz, WhatWeAcceptNumpyReadsTheSame) {
  if (std::system("/usr/bin/python3 -c 'import numpy' >/dev/null 2>&1") != 0) GTEST_SKIP() << "no numpy";
  testing::TempDir dir;
  Rng rng(99);
  const std::vector<std::string> corpus = npy_corpus();
  int accepted = 0;
  for (int i = 0; i < 5000 && accepted < 200; ++i) {
    const std::string input = i % 2 ? mutate(corpus[below(rng, corpus.size())], corpus, rng) : random_npy(rng);
    try {
      const npy::Array a = npy::parse(input);
      // Plain writes: hundreds of fsyncs would dominate the test's time.
      std::ofstream(dir / ("in" + std::to_string(accepted) + ".npy"), std::ios::binary) << input;
      std::ofstream(dir / ("want" + std::to_string(accepted) + ".npy"), std::ios::binary)
          << npy::serialize(a.shape, a.data);
      ++accepted;
    } catch (const Error&) {
    }
  }
  ASSERT_GT(accepted, 50);
  const std::string script =
      "import sys, numpy as np\nd, n = sys.argv[1], int(sys.argv[2])\nbad = "
      "[]\n"
      "for i in range(n):\n"
      "  a = np.load(f'{d}/in{i}.npy').astype('<f4', order='C')  # "
      "(ascontiguousarray makes 0-d 1-d)\n"
      "  b = np.load(f'{d}/want{i}.npy')\n"
      "  if a.shape != b.shape or a.tobytes() != b.tobytes(): bad.append(i)\n"
      "print('numpy disagrees on', bad)\nsys.exit(1 if bad else 0)\n";
  write_file_atomically(dir / "check.py", script);
  EXPECT_EQ(std::system(("/usr/bin/python3 " + (dir / "check.py").string() + " " + dir.path().string() + " " +
                         std::to_string(accepted))
                            .c_str()),
            0);
}

}  // namespace
}  // namespace linattn
