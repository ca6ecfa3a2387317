#pragma once
// A fresh directory per test, removed afterwards, and the message of the linattn::Error a call throws.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "linattn/error.hpp"

namespace linattn::testing {

class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    path_ = std::filesystem::temp_directory_path() /
            ("linattn-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::permissions(path_, std::filesystem::perms::owner_all, ec);
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }
  // Names in the directory, sorted.
  std::vector<std::string> entries() const {
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(path_)) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }

 private:
  std::filesystem::path path_;
};

// The message of the linattn::Error that f throws, or "<no error>". Other exceptions propagate.
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

// Writes every prefix of `good`, and `good` plus one byte, to `path`, and expects load(path) to throw
// the same linattn::Error as parse(bytes, path) (none for `good` itself): a reader that streams the
// file must see it exactly as the one that parses its bytes.
template <class Load, class Parse>
void expect_load_agrees_with_parse(const std::filesystem::path& path, const std::string& good, Load&& load,
                                   Parse&& parse) {
  for (size_t n = 0; n <= good.size() + 1; ++n) {
    const std::string bytes = n <= good.size() ? good.substr(0, n) : good + "x";
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
    const std::string want = error_of([&] { parse(bytes, path.string()); });
    EXPECT_EQ(error_of([&] { load(path); }), want) << "length " << n;
    if (n == good.size()) {
      EXPECT_EQ(want, "<no error>");
    }
  }
}

}  // namespace linattn::testing
