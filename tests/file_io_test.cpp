// write_file_atomically, read_file and crc32: round trips, failures that leave the old file and no
// temporary behind, and errors that name the path.
#include "linattn/file_io.hpp"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <random>
#include <thread>
#include <vector>

#include "linattn/error.hpp"
#include "support/temp_dir.hpp"

namespace linattn {
namespace {

namespace fs = std::filesystem;
using testing::error_of;
using testing::TempDir;

std::string random_bytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = char(rng());
  return s;
}

TEST(FileIo, RoundTripsBytesIncludingNuls) {
  TempDir dir;
  for (size_t n : {size_t(0), size_t(1), size_t(4097), size_t(1) << 20}) {
    const std::string bytes = random_bytes(n, n);
    write_file_atomically(dir / "x.bin", bytes);
    EXPECT_EQ(read_file(dir / "x.bin"), bytes) << n;
  }
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"x.bin"});  // no temporary left beside it
}

TEST(FileIo, ReplacedFileKeepsItsPermissions) {
  TempDir dir;
  write_file_atomically(dir / "private.bin", "a");
  fs::permissions(dir / "private.bin", fs::perms::owner_read | fs::perms::owner_write);
  write_file_atomically(dir / "private.bin", "b");
  EXPECT_EQ(fs::status(dir / "private.bin").permissions(), fs::perms::owner_read | fs::perms::owner_write);
  EXPECT_EQ(read_file(dir / "private.bin"), "b");
}

TEST(FileIo, LongestFileNameStillGetsATemporary) {
  TempDir dir;
  const std::string name(255, 'n');  // NAME_MAX on Linux file systems
  write_file_atomically(dir / name, "abc");
  EXPECT_EQ(read_file(dir / name), "abc");
  EXPECT_EQ(dir.entries(), std::vector<std::string>{name});
}

TEST(FileIo, RelativePathWithoutDirectory) {
  TempDir dir;
  const fs::path old_cwd = fs::current_path();
  fs::current_path(dir.path());
  write_file_atomically("plain.bin", "abc");
  fs::current_path(old_cwd);
  EXPECT_EQ(read_file(dir / "plain.bin"), "abc");
}

TEST(FileIo, ConcurrentWritersLeaveOneWholeFile) {
  TempDir dir;
  std::vector<std::string> contents;
  for (int t = 0; t < 4; ++t) contents.push_back(random_bytes(100000, uint64_t(t)));
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 5; ++i) write_file_atomically(dir / "shared.bin", contents[t]);
    });
  for (auto& th : threads) th.join();
  const std::string got = read_file(dir / "shared.bin");
  EXPECT_NE(std::find(contents.begin(), contents.end(), got), contents.end());
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"shared.bin"});
}

TEST(FileIo, MissingFileNamesPathAndReason) {
  TempDir dir;
  const std::string m = error_of([&] { read_file(dir / "absent.npy"); });
  EXPECT_NE(m.find((dir / "absent.npy").string()), std::string::npos) << m;
  EXPECT_NE(m.find("No such file"), std::string::npos) << m;
}

TEST(FileIo, ReadingADirectoryFails) {
  TempDir dir;
  const std::string m = error_of([&] { read_file(dir.path()); });
  EXPECT_NE(m.find("not a regular file"), std::string::npos) << m;
}

TEST(FileIo, MissingDirectoryNamesPath) {
  TempDir dir;
  const std::string m = error_of([&] { write_file_atomically(dir / "no" / "x.bin", "abc"); });
  EXPECT_NE(m.find((dir / "no" / "x.bin").string()), std::string::npos) << m;
  EXPECT_NE(m.find("No such file"), std::string::npos) << m;
  EXPECT_TRUE(dir.entries().empty());
}

TEST(FileIo, PathWithoutFileName) {
  TempDir dir;
  const std::string m = error_of([&] { write_file_atomically(dir.path().string() + "/", "abc"); });
  EXPECT_NE(m.find("names no file"), std::string::npos) << m;
}

// The rename fails after the data is written: the target (a directory here) and its contents stay,
// and the temporary file is removed.
TEST(FileIo, FailedRenameLeavesTargetAndNoTemporary) {
  TempDir dir;
  fs::create_directory(dir / "target");
  write_file_atomically(dir / "target" / "inside.bin", "keep");
  const std::string m = error_of([&] { write_file_atomically(dir / "target", random_bytes(5000, 1)); });
  EXPECT_NE(m.find("rename"), std::string::npos) << m;
  EXPECT_NE(m.find((dir / "target").string()), std::string::npos) << m;
  EXPECT_EQ(read_file(dir / "target" / "inside.bin"), "keep");
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"target"});
}

// A write that fails half way (file size limit, which binds root too) leaves the old file whole.
TEST(FileIo, FailedWriteLeavesOldFileAndNoTemporary) {
  TempDir dir;
  write_file_atomically(dir / "model.bin", "old contents");
  rlimit old_limit{};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old_limit), 0);
  auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  rlimit small = old_limit;
  small.rlim_cur = 4096;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  const std::string m = error_of([&] { write_file_atomically(dir / "model.bin", random_bytes(100000, 2)); });
  setrlimit(RLIMIT_FSIZE, &old_limit);
  std::signal(SIGXFSZ, old_handler);
  EXPECT_NE(m.find("cannot write"), std::string::npos) << m;
  EXPECT_NE(m.find("File too large"), std::string::npos) << m;
  EXPECT_EQ(read_file(dir / "model.bin"), "old contents");
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"model.bin"});
}

// A directory the writer may not write to. Root ignores permissions, so as root the write runs in a
// child process that has dropped to the unprivileged user "nobody".
TEST(FileIo, ReadOnlyDirectoryLeavesOldFile) {
  TempDir dir;
  write_file_atomically(dir / "model.bin", "old");
  fs::permissions(dir.path(), fs::perms::owner_read | fs::perms::owner_exec | fs::perms::group_read |
                                  fs::perms::group_exec | fs::perms::others_read | fs::perms::others_exec);
  auto attempt = [&] { return error_of([&] { write_file_atomically(dir / "model.bin", "new"); }); };
  if (geteuid() == 0) {
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      if (setgid(65534) != 0 || setuid(65534) != 0) _exit(2);
      _exit(attempt().find("Permission denied") != std::string::npos ? 0 : 1);
    }
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0) << "1: no 'Permission denied' error; 2: could not drop privileges";
  } else {
    const std::string m = attempt();
    EXPECT_NE(m.find("Permission denied"), std::string::npos) << m;
  }
  fs::permissions(dir.path(), fs::perms::owner_all);
  EXPECT_EQ(read_file(dir / "model.bin"), "old");
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"model.bin"});
}

TEST(FileIo, Crc32MatchesTheStandardCheckValue) {
  EXPECT_EQ(crc32("123456789"), 0xCBF43926u);  // the CRC-32/ISO-HDLC check value
  EXPECT_EQ(crc32(""), 0u);
  const std::string a = random_bytes(1000, 3), b = random_bytes(777, 4);
  EXPECT_EQ(crc32(b, crc32(a)), crc32(a + b));
  EXPECT_NE(crc32(a), crc32(b));
}

}  // namespace
}  // namespace linattn
