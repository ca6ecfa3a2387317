// The dataset file (docs/datasets.md): round trips, every truncation and corruption a clear error that
// names the file and the field, sizes checked before anything is allocated, and its task's batches.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "io/bytes.hpp"
#include "linattn/error.hpp"
#include "linattn/file_io.hpp"
#include "linattn/model/dataset.hpp"
#include "support/file_bytes.hpp"

namespace linattn::model {
namespace {

// A small dataset: split s holds 2 + s sequences of L tokens, token i of sequence j = (7j + 3i + s) % vocab.
Dataset sample(int64_t seq_len = 5, int64_t vocab = 11, int64_t classes = 3) {
  Dataset d;
  d.task = "image";
  d.seq_len = seq_len;
  d.vocab = vocab;
  for (int64_t c = 0; c < classes; ++c) d.class_names.push_back("class " + std::to_string(c));
  for (int64_t s = 0; s < 3; ++s) {
    DatasetSplit& split = d.splits[size_t(s)];
    split.count = 2 + s;
    for (int64_t j = 0; j < split.count; ++j) {
      for (int64_t i = 0; i < seq_len; ++i) split.tokens.push_back(uint16_t((7 * j + 3 * i + s) % vocab));
      split.labels.push_back(int32_t((j + s) % classes));
    }
  }
  return d;
}

using testing::with_crc;

std::string parse_error(const std::string& bytes) {
  return testing::error_of([](const std::string& b) { parse_dataset(b, "test.ds"); }, bytes);
}

// Offsets in the sample's bytes (docs/datasets.md's layout).
constexpr size_t kTokenBytesAt = 12, kSeqLenAt = 16, kVocabAt = 24, kClassesAt = 32, kTaskAt = 40;

size_t first_split_at(const Dataset& d) {
  size_t at = kTaskAt + 8 + d.task.size();
  for (const std::string& c : d.class_names) at += 8 + c.size();
  return at;
}

void put_i64_at(std::string& bytes, size_t at, int64_t v) {
  std::string le;
  io::put_i64(le, v);
  bytes.replace(at, 8, le);
}

TEST(DatasetFile, RoundTripsOneAndTwoByteTokens) {
  for (int64_t vocab : {2, 256, 257, 65536}) {
    Dataset d = sample(7, vocab, 4);
    if (vocab > 256) d.splits[1].tokens[3] = uint16_t(vocab - 1);  // the largest token survives two bytes
    const std::string bytes = serialize_dataset(d);
    EXPECT_EQ(io::get_u32(bytes.data() + kTokenBytesAt), vocab <= 256 ? 1u : 2u);
    const Dataset back = parse_dataset(bytes, "test.ds");
    EXPECT_EQ(back.task, d.task);
    EXPECT_EQ(back.seq_len, d.seq_len);
    EXPECT_EQ(back.vocab, d.vocab);
    EXPECT_EQ(back.class_names, d.class_names);
    EXPECT_EQ(back.crc, d.crc);
    EXPECT_EQ(back.crc, crc32(std::string_view(bytes).substr(0, bytes.size() - 4)));
    for (size_t s = 0; s < 3; ++s) {
      EXPECT_EQ(back.splits[s].count, d.splits[s].count);
      EXPECT_EQ(back.splits[s].tokens, d.splits[s].tokens);
      EXPECT_EQ(back.splits[s].labels, d.splits[s].labels);
    }
  }
}

TEST(DatasetFile, EveryTruncationIsAClearError) {
  Dataset d = sample();
  const std::string bytes = serialize_dataset(d);
  for (size_t n = 0; n < bytes.size(); ++n) {
    const std::string error = parse_error(bytes.substr(0, n));
    ASSERT_NE(error, "") << n;
    EXPECT_NE(error.find("test.ds"), std::string::npos) << error;
  }
}

TEST(DatasetFile, EveryFlippedByteIsRefused) {
  Dataset d = sample();
  const std::string bytes = serialize_dataset(d);
  for (size_t i = 0; i < bytes.size(); ++i) {
    std::string bad = bytes;
    bad[i] = char(bad[i] ^ 0x40);
    const std::string error = parse_error(bad);
    ASSERT_NE(error, "") << i;
    EXPECT_NE(error.find("test.ds"), std::string::npos) << error;
  }
}

TEST(DatasetFile, NamesTheBadField) {
  Dataset d = sample();
  const std::string good = serialize_dataset(d);
  auto expect = [&](std::string bad, const char* words) {
    const std::string error = parse_error(bad);
    EXPECT_NE(error.find(words), std::string::npos) << "expected \"" << words << "\" in: " << error;
  };
  expect("NOTADATASETFILE" + good.substr(15), "magic");
  {
    std::string bad = good;
    bad[8] = 2;
    expect(bad, "format version is 2, expected 1");
  }
  {
    std::string bad = good;
    bad[good.size() - 10] ^= 1;  // a label, under an unchanged CRC
    expect(bad, "CRC-32");
  }
  {
    std::string bad = good;
    bad[kTokenBytesAt] = 2;
    expect(with_crc(bad), "token_bytes is 2, expected 1");
  }
  {
    std::string bad = good;
    put_i64_at(bad, kSeqLenAt, 0);
    expect(with_crc(bad), "seq_len is 0");
  }
  {
    std::string bad = good;
    put_i64_at(bad, kVocabAt, 3);  // the sample's tokens run to 10
    expect(with_crc(bad), "expected < vocab 3");
  }
  {
    std::string bad = good;
    put_i64_at(bad, kClassesAt, int64_t(1) << 40);
    expect(with_crc(bad), "classes is 1099511627776");
  }
  {
    std::string bad = good;
    bad[kTaskAt + 8] = 'I';  // "Image": not the task alphabet
    expect(with_crc(bad), "task is \"Image\"");
  }
  {  // a count the file cannot hold is refused before the tokens are allocated
    std::string bad = good;
    put_i64_at(bad, first_split_at(d), int64_t(1) << 60);
    expect(with_crc(bad), "train split count is 1152921504606846976");
  }
  {
    std::string bad = good;
    put_i64_at(bad, first_split_at(d), 0);
    expect(with_crc(bad), "train split count is 0");
  }
  {  // the last test label (class 2 of 3) made 3
    std::string bad = good;
    bad[good.size() - 8] = 3;
    expect(with_crc(bad), "test split label of sequence 3 is 3, expected < classes 3");
  }
  {
    std::string bad = good;
    bad.insert(bad.size() - 4, "x");
    expect(with_crc(bad), "1 unexpected bytes");
  }
}

TEST(DatasetFile, WriterRefusesWhatTheReaderWould) {
  auto refused = [](Dataset d, const char* words) {
    try {
      serialize_dataset(d);
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
      return;
    }
    ADD_FAILURE() << "accepted; expected an error with \"" << words << "\"";
  };
  Dataset d = sample();
  d.splits[0].tokens[2] = 11;
  refused(d, "train split holds token 11, expected < vocab 11");
  d = sample();
  d.splits[2].labels[0] = -1;
  refused(d, "test split holds label -1");
  d = sample();
  d.splits[1].tokens.pop_back();
  refused(d, "validation split has count 3");
  d = sample();
  d.class_names.resize(1);
  refused(d, "classes is 1");
  d = sample();
  d.task = "";
  refused(d, "task is \"\"");
}

TEST(DatasetFile, TaskServesTheSplitsAsTheyAre) {
  Dataset d = sample(6, 20, 3);
  serialize_dataset(d);
  const DatasetTask task(d, "test.ds");
  EXPECT_EQ(task.classes(), 3);
  EXPECT_EQ(task.tokenizer().size(), 20);
  EXPECT_EQ(task.split_size(Split::test), 4);
  const std::vector<Batch> test = task.split_batches(Split::test, 3, 6, 0);
  ASSERT_EQ(test.size(), 2u);
  EXPECT_EQ(test[0].B, 3);
  EXPECT_EQ(test[1].B, 1);
  for (int64_t j = 0; j < 4; ++j) {
    const Batch& b = test[size_t(j / 3)];
    const int64_t r = j % 3;
    EXPECT_EQ(b.labels[size_t(r)], d.splits[2].labels[size_t(j)]);
    for (int64_t i = 0; i < 6; ++i) {
      EXPECT_EQ(b.tokens[size_t(r * 6 + i)], d.splits[2].tokens[size_t(j * 6 + i)]);
      EXPECT_EQ(b.weights[size_t(r * 6 + i)], 1.0f);
    }
  }
  // Training batches draw from the train split only, the same for the same (seed, index).
  const Batch a = task.train_batch(8, 6, 5, 2), again = task.train_batch(8, 6, 5, 2);
  EXPECT_EQ(a.tokens, again.tokens);
  for (int64_t b = 0; b < 8; ++b) {
    const bool first = a.tokens[size_t(b * 6)] == d.splits[0].tokens[0];
    const size_t j = first ? 0 : 1;
    EXPECT_EQ(a.labels[size_t(b)], d.splits[0].labels[j]);
    for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(a.tokens[size_t(b * 6 + i)], d.splits[0].tokens[j * 6 + size_t(i)]);
  }
  EXPECT_THROW(task.train_batch(2, 7, 1, 0), Error);  // seq_len is the file's
  Dataset wide = sample(6, 300, 3);
  serialize_dataset(wide);
  try {
    DatasetTask too_wide(wide, "wide.ds");
    ADD_FAILURE() << "a vocabulary of 300 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("wide.ds: vocab is 300, expected ≤ 256"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace linattn::model
