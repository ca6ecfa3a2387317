// The defects of the bad-input and fault campaign (issue 17), one test each, named after the defect:
// each test tripped before its fix. docs/reliability.md lists them with the class of input.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <future>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "io/bytes.hpp"
#include "io/state_file.hpp"
#include "linattn/favor.hpp"
#include "linattn/file_io.hpp"
#include "linattn/limits.hpp"
#include "linattn/linear_attention.hpp"
#include "linattn/model/model_file.hpp"
#include "linattn/model/train.hpp"
#include "linattn/npy.hpp"
#include "linattn/recurrent_state.hpp"
#include "linattn/threads.hpp"
#include "model/key_values.hpp"
#include "support/temp_dir.hpp"

namespace linattn {
namespace {

using testing::error_of;
using testing::TempDir;

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

model::ModelConfig tiny_config() {
  model::ModelConfig c;
  c.d_model = 16, c.heads = 2, c.layers = 1, c.mlp_hidden = 32, c.chunk_size = 8;
  return c;
}
model::TrainOptions tiny_options() {
  model::TrainOptions o;
  o.steps = 4, o.batch = 2, o.seq_len = 12, o.warmup = 1, o.eval_batches = 1;
  return o;
}

// A checkpoint of a tiny run whose stored training options have `key` replaced by `value`; the CRC is
// recomputed (serialize_model_file), so only the deeper checks can refuse it.
std::filesystem::path crafted_checkpoint(const TempDir& dir, const std::string& key, const std::string& value) {
  model::Trainer trainer(tiny_config(), tiny_options());
  const std::filesystem::path path = dir / "crafted.ckpt";
  trainer.save_checkpoint(path);
  model::ModelFile f = model::load_model_file(path);
  std::string& text = f.train_options;
  const size_t at = text.find("\n" + key + "=") + 1;
  const size_t eol = text.find('\n', at);
  text.replace(at, eol - at, key + "=" + value);
  write_file_atomically(path, model::serialize_model_file(f));
  return path;
}

// 1. batch = 2^62 overflowed B*T in the data; seq_len = 10^7 and batch = 10^9 died of memory.
TEST(Reliability, Defect01CheckpointBatchAndSeqLenAreBounded) {
  TempDir dir;
  const std::string huge =
      error_of([&] { model::Trainer::resume(crafted_checkpoint(dir, "batch", "4611686018427387904")); });
  EXPECT_TRUE(contains(huge, "crafted.ckpt")) << huge;
  EXPECT_TRUE(contains(huge, "batch is 4611686018427387904, expected in [1, 65536]")) << huge;
  EXPECT_TRUE(contains(error_of([&] { model::Trainer::resume(crafted_checkpoint(dir, "seq_len", "10000000")); }),
                       "seq_len is 10000000, expected in [2, 1048576]"));
  EXPECT_TRUE(contains(error_of([&] { model::Trainer::resume(crafted_checkpoint(dir, "batch", "1000000000")); }),
                       "batch is 1000000000"));
  EXPECT_TRUE(contains(error_of([&] { model::Trainer::resume(crafted_checkpoint(dir, "seq_len", "1000000")); }),
                       "batch × seq_len is 2000000, expected in [2, 1048576]"));  // each within bounds, not both
  EXPECT_TRUE(
      contains(error_of([&] { model::Trainer::resume(crafted_checkpoint(dir, "steps", "9223372036854775807")); }),
               "steps is 9223372036854775807, expected in [1, 1099511627776]"));
}

// A model file of `config` (any config: serialize checks none), its CRC right.
std::string model_bytes(model::ModelConfig config) {
  model::ModelFile f;
  f.config = config;
  f.config.vocab_size = 3;
  f.vocab = "abc";
  f.params.assign(size_t(model::param_count(f.config)), 0.0f);
  return model::serialize_model_file(f);
}

// 2. favor_features = 16384 in a 2.9 KB model file asked for a gigabyte of causal chunk scratch.
TEST(Reliability, Defect02ModelFileFavorFeaturesAreBounded) {
  model::ModelConfig c = tiny_config();
  c.attention = model::AttentionKind::favor;
  c.favor_features = 16384;
  const std::string message = error_of([&] { model::parse_model_file(model_bytes(c), "big.model"); });
  EXPECT_TRUE(contains(message, "big.model: linattn::model: favor_features is 16384, expected in [1, 4096]") ||
              contains(message, "big.model: favor_features is 16384, expected in [1, 4096]"))
      << message;
  c = tiny_config();
  c.chunk_size = int64_t(1) << 62;
  EXPECT_TRUE(contains(error_of([&] { model::parse_model_file(model_bytes(c), "chunk.model"); }),
                       "chunk_size is 4611686018427387904, expected in [1, 65536]"));
}

// Issue 42 item 15: a config value with a trailing CR (a file edited on Windows) was quoted as is, so the
// message showed "64" and the CR stayed invisible; bytes outside printable ASCII are shown as \xNN.
TEST(Reliability, ConfigValueWithTrailingCarriageReturnShowsIt) {
  const model::detail::KeyValues kv("d_model=64\r\n", "model config");
  const std::string message = error_of([&] { kv.get_int("d_model"); });
  EXPECT_TRUE(contains(message, "d_model is \"64\\x0d\", expected an integer")) << message;
  const std::string unknown = error_of([&] { model::detail::KeyValues("ke\ty=1\n", "model config").check_all_read(); });
  EXPECT_TRUE(contains(unknown, "key ke\\x09y (=1) is unknown")) << unknown;
  const std::string attention = error_of([] { model::attention_by_name("gla\r"); });
  EXPECT_TRUE(contains(attention, "attention is \"gla\\x0d\", expected one of")) << attention;
}

// Issue 42 item 1: a model file or checkpoint of a decayed or delta kind saying chunk_size = 65536 (inside the
// model's old bound, chosen for the causal linear chunk) asked for gigabytes of [C, C] scratch at its first
// forward; it is refused on load, naming the operators' bound.
TEST(Reliability, DecayedAndDeltaModelChunkSizeIsBoundedOnLoad) {
  for (model::AttentionKind kind :
       {model::AttentionKind::gla, model::AttentionKind::retnet, model::AttentionKind::deltanet,
        model::AttentionKind::gated_deltanet, model::AttentionKind::kda}) {
    model::ModelConfig c = tiny_config();
    c.attention = kind;
    c.chunk_size = 65536;
    EXPECT_TRUE(contains(error_of([&] { model::parse_model_file(model_bytes(c), "chunk.model"); }),
                         "chunk_size is 65536, expected in [1, 1024]"))
        << model::attention_name(kind);
    c.chunk_size = 1024;
    EXPECT_NO_THROW(model::parse_model_file(model_bytes(c), "chunk.model")) << model::attention_name(kind);
  }
  model::ModelConfig c = tiny_config();  // causal linear attention keeps its linear-scratch bound
  c.chunk_size = 65536;
  EXPECT_NO_THROW(model::parse_model_file(model_bytes(c), "chunk.model"));
}

// 2. The causal chunk scratch was [max(M, E), max(Cp, Mp)] floats, quadratic in M: m = 16384 peaked at
// 1.07 GB for a 1×4×2×4 input. Now it is linear in M (this process's peak grows by far less).
TEST(Reliability, Defect02CausalFavorScratchIsNotQuadraticInFeatures) {
  const int64_t B = 1, N = 4, H = 2, D = 4, M = 16384;
  std::vector<float> q(size_t(B * N * H * D), 0.5f), k = q, v = q, out(q.size());
  const auto view = [&](std::vector<float>& x) { return TensorView{x.data(), {B, N, H, D}, {N * H * D, H * D, D, 1}}; };
  LinearAttentionOptions o;
  o.feature_map = favor_feature_map(D, FavorOptions{M, 1, true});
  o.causal = true;
  set_num_threads(1);
  struct rusage before {
  }, after{};
  getrusage(RUSAGE_SELF, &before);
  causal_linear_attention_forward(view(out), view(q), view(k), view(v), o);
  getrusage(RUSAGE_SELF, &after);
  set_num_threads(0);
  const double grown_mib = double(after.ru_maxrss - before.ru_maxrss) / 1024;  // ru_maxrss is in KiB
  EXPECT_LT(grown_mib, 256) << "the causal forward's peak grew by " << grown_mib << " MiB at M = " << M;
}

// 4. A checkpoint's stored checkpoint= path chose where the resumed run wrote, and data= what it read.
TEST(Reliability, Defect04CheckpointNeverChoosesAPath) {
  TempDir dir;
  const std::filesystem::path victim = dir / "victim.txt";
  write_file_atomically(victim, "keep me");
  const std::filesystem::path ckpt = crafted_checkpoint(dir, "checkpoint", victim.string());
  model::Trainer resumed = model::Trainer::resume(ckpt);
  EXPECT_EQ(resumed.options().checkpoint, ckpt.string());
  resumed.run({}, 1);
  EXPECT_EQ(read_file(victim), "keep me");
  EXPECT_EQ(model::Trainer::resume(ckpt).step(), 4);  // the run's checkpoints went over the resumed file
  // A text run names its data again; the stored path is only quoted.
  const std::filesystem::path text_ckpt = crafted_checkpoint(dir, "task", "text");
  const std::string message = error_of([&] { model::Trainer::resume(text_ckpt); });
  EXPECT_TRUE(contains(message, "expected the data file given again (--data FILE)")) << message;
}

// A state file with `position` written in, both checksums recomputed.
std::string state_with_position(int64_t position) {
  RecurrentState state(1, 1, 2, 2, "elu");
  std::string bytes = io::serialize_state(state);
  std::string patched;
  io::put_i64(patched, position);
  bytes.replace(12 + 8 * 4, 8, patched);
  const size_t header_end = size_t(io::kStateFixedHeader) + 3;  // "elu"
  std::string crc;
  io::put_u32(crc, crc32(std::string_view(bytes).substr(0, header_end)));
  bytes.replace(header_end, 4, crc);
  crc.clear();
  io::put_u32(crc, crc32(std::string_view(bytes).substr(0, bytes.size() - 4)));
  bytes.replace(bytes.size() - 4, 4, crc);
  return bytes;
}

// 6. A state loaded with position INT64_MAX overflowed on the next step and then could not be saved.
TEST(Reliability, Defect06StatePositionIsBounded) {
  EXPECT_NO_THROW(io::parse_state(state_with_position(5), "ok.state"));
  const std::string message = error_of([&] { io::parse_state(state_with_position(INT64_MAX), "max.state"); });
  EXPECT_TRUE(contains(message, "max.state: position is 9223372036854775807, expected in [0, 4611686018427387904]"))
      << message;
  // A state at the bound refuses the step before it changes S, and still saves.
  RecurrentState state = io::parse_state(state_with_position(limits::kMaxPosition), "edge.state");
  std::vector<float> x(2, 1.0f), out(2);
  const TensorView o{out.data(), {1, 1, 1, 2}, {2, 2, 2, 1}};
  const ConstTensorView t{x.data(), {1, 1, 1, 2}, {2, 2, 2, 1}};
  const std::string step = error_of([&] { recurrent_step(o, t, t, t, state, LinearAttentionOptions{}); });
  EXPECT_TRUE(contains(step, "state.position() is 4611686018427387904")) << step;
  EXPECT_EQ(state.S()[0], 0.0f);
  EXPECT_NO_THROW(io::serialize_state(state));
}

// 7. weight_decay = inf (and other non-finite options) in a checkpoint turned the weights infinite.
TEST(Reliability, Defect07NonFiniteCheckpointOptionsAreRefused) {
  TempDir dir;
  for (const char* key : {"weight_decay", "lr", "min_lr", "clip"})
    for (const char* value : {"inf", "nan", "-inf"}) {
      const std::string message = error_of([&] { model::Trainer::resume(crafted_checkpoint(dir, key, value)); });
      EXPECT_TRUE(contains(message, std::string(key) + " is ")) << key << "=" << value << ": " << message;
      EXPECT_TRUE(contains(message, "crafted.ckpt")) << message;
    }
}

// 8. A FIFO (or any non-regular file) given as an input blocked every reader forever.
TEST(Reliability, Defect08FifoInputIsRefusedWithoutBlocking) {
  TempDir dir;
  const std::filesystem::path fifo = dir / "input.npy";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto result = std::make_shared<std::promise<std::string>>();
  std::future<std::string> done = result->get_future();
  std::thread([fifo, result] {
    std::string messages = error_of([&] { npy::load(fifo); }) + " | " + error_of([&] { read_file(fifo); }) + " | " +
                           error_of([&] { RecurrentState::load(fifo); });
    result->set_value(messages);
  }).detach();
  if (done.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
    const int unblock = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);  // lets a blocked open return
    ADD_FAILURE() << "reading a FIFO blocked";
    done.wait();
    if (unblock >= 0) ::close(unblock);
    return;
  }
  const std::string messages = done.get();
  EXPECT_EQ(messages.find("<no error>"), std::string::npos) << messages;
  EXPECT_TRUE(contains(messages, "input.npy: is not a regular file")) << messages;
}

// 9. run's outputs were left half old, half new after a full disk or a kill: a set is all old until
// commit, and a commit a kill interrupted is finished by the next set.
TEST(Reliability, Defect09OutputSetIsAllOldOrAllNew) {
  TempDir dir;
  const auto a = dir / "out.npy", b = dir / "dq.npy";
  write_file_atomically(a, "old a");
  write_file_atomically(b, "old b");
  {
    FileSet set;
    set.add(a, "new a");
    set.add(b, "new b");
  }  // abandoned (an error after the first file): nothing changed, no temporaries
  EXPECT_EQ(read_file(a), "old a");
  EXPECT_EQ(read_file(b), "old b");
  EXPECT_EQ(dir.entries(), (std::vector<std::string>{"dq.npy", "out.npy"}));
  // A full disk on the second file: the first stays old too.
  {
    FileSet set;
    set.add(a, "new a");
    EXPECT_THROW(set.add(dir / "missing-folder" / "dq.npy", "new b"), Error);
  }
  EXPECT_EQ(read_file(a), "old a");
  // A kill between the renames: the journal and b's temporary are left, a is already new.
  const std::string temp_b = (dir / ".dq.npy.tmp.999999.0.0").string();
  write_file_atomically(temp_b, "new b");
  write_file_atomically(a, "new a");
  write_file_atomically(FileSet::journal_for(a), temp_b + "\t" + b.string() + "\n");
  FileSet::recover(a);
  EXPECT_EQ(read_file(a), "new a");
  EXPECT_EQ(read_file(b), "new b");
  EXPECT_EQ(dir.entries(), (std::vector<std::string>{"dq.npy", "out.npy"}));
  FileSet set;
  set.add(a, "newer a");
  set.add(b, "newer b");
  set.commit();
  EXPECT_EQ(read_file(a), "newer a");
  EXPECT_EQ(read_file(b), "newer b");
  EXPECT_EQ(dir.entries(), (std::vector<std::string>{"dq.npy", "out.npy"}));
}

// 10. set_num_threads(100000) exhausted memory (in Python libgomp ended the process).
TEST(Reliability, Defect10SetNumThreadsIsBounded) {
  const std::string message = error_of([] { set_num_threads(100000); });
  EXPECT_TRUE(contains(message, "threads is 100000, expected in [0, 1024]")) << message;
  EXPECT_TRUE(contains(error_of([] { set_num_threads(-1); }), "threads is -1"));
  EXPECT_NO_THROW(set_num_threads(2));
  EXPECT_EQ(num_threads(), 2);
  set_num_threads(0);
}

// 12. The temporary files of killed writes were never cleaned up.
TEST(Reliability, Defect12StaleTemporariesOfKilledWritersAreRemoved) {
  TempDir dir;
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ASSERT_GT(child, 0);
  ::waitpid(child, nullptr, 0);  // its pid no longer runs
  const std::string stale = ".out.npy.tmp." + std::to_string(child) + ".0.123";
  const std::string live = ".out.npy.tmp." + std::to_string(::getppid()) + ".0.123";  // a running process
  const std::string other = ".other.npy.tmp." + std::to_string(child) + ".0.123";     // another file's
  for (const std::string& name : {stale, live, other}) std::ofstream(dir / name) << "partial";
  write_file_atomically(dir / "out.npy", "whole");
  EXPECT_EQ(dir.entries(), (std::vector<std::string>{other, live, "out.npy"}));  // sorted
}

// 15. Model-file errors did not name the file.
TEST(Reliability, Defect15ModelFileErrorsNameTheFile) {
  model::ModelConfig c = tiny_config();
  c.heads = 3;  // d_model 16 is no multiple of 3
  const std::string message = error_of([&] { model::parse_model_file(model_bytes(c), "some/dir/bad.model"); });
  EXPECT_TRUE(contains(message, "linattn::model: some/dir/bad.model: d_model is 16, expected a multiple of heads (3)"))
      << message;
}

}  // namespace
}  // namespace linattn
