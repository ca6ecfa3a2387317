#pragma once
// Paths that name one file: a command that writes one file over another it needs (the final model
// over the training state) loses work, whichever spelling, link or relative path names them.
#include <filesystem>
#include <string>
#include <vector>

namespace linattn::cli {

// True when a and b are one file: the same inode when both exist (hard and symbolic links
// included), else the same absolute path once `.`, `..` and the symbolic links of the existing
// part are resolved.
bool same_file(const std::filesystem::path& a, const std::filesystem::path& b);

// A file a command reads or writes, under the flag that named it.
struct NamedFile {
  std::string flag;
  std::string path;  // "" (an absent optional file) is skipped
};

// Throws UsageError (exit 2) when a file written would overwrite another file of the command: two
// of `written`, or one of `written` and one of `read`; the message names both flags and paths.
void check_distinct(const std::vector<NamedFile>& written, const std::vector<NamedFile>& read);

}  // namespace linattn::cli
