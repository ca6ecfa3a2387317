#pragma once
// Files that linattn writes and reads: atomic writes and the checksum every format carries.
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace linattn {

// Writes bytes to a temporary file beside path, flushes it to disk, then renames it over path:
// readers see the old file or the whole new one, never a half-written one. Throws linattn::Error
// naming the path and the system's reason on failure, and leaves no temporary file behind. It first
// removes the temporary files of `path` that a killed writer (a process no longer running) left.
void write_file_atomically(const std::filesystem::path& path, std::string_view bytes);

// Several files replaced as one (the outputs of `linattn run`): add() writes each new file whole to a
// temporary beside it, and only commit() renames them over the old ones. A failure before commit
// (a full disk, an error, a kill) leaves every old file as it was. commit() first writes a journal,
// ".FIRST.set" beside the first file, naming each rename; a kill between renames leaves it behind,
// and while it exists the set is being replaced: the next FileSet of the same first file (or
// recover()) finishes the renames. A set destroyed without commit removes its temporaries.
class FileSet {
 public:
  FileSet() = default;
  ~FileSet();
  FileSet(const FileSet&) = delete;
  FileSet& operator=(const FileSet&) = delete;
  void add(const std::filesystem::path& path, std::string_view bytes);
  void commit();
  // Finishes a set whose journal beside `first` a kill left behind; nothing when there is none.
  static void recover(const std::filesystem::path& first);
  static std::filesystem::path journal_for(const std::filesystem::path& first);

 private:
  std::vector<std::pair<std::filesystem::path, std::filesystem::path>> files_;  // temporary, final
};

// The whole file; throws linattn::Error naming the path when it cannot be read.
std::string read_file(const std::filesystem::path& path);

// CRC-32 (the zlib / PNG polynomial), continuing from `crc` (0 to start).
uint32_t crc32(std::string_view bytes, uint32_t crc = 0);

}  // namespace linattn
