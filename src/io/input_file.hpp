#pragma once
// A regular file opened for reading in pieces, so that a reader can check a header before it
// allocates for the body. Errors are linattn::Error naming the path and the system's reason.
#include <cstdint>
#include <filesystem>

namespace linattn::io {

class InputFile {
 public:
  // `op` names the public function in error messages.
  InputFile(const std::filesystem::path& path, const char* op);
  ~InputFile();
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  // The size when opened.
  int64_t size() const { return size_; }
  // Reads up to n bytes from the current position; returns how many (fewer only at end of file).
  size_t read_some(char* dst, size_t n);

 private:
  std::filesystem::path path_;
  const char* op_;
  int fd_ = -1;
  int64_t size_ = 0;
};

}  // namespace linattn::io
