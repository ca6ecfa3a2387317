#include "common/paths.hpp"

#include <system_error>

#include "common/command.hpp"

namespace linattn::cli {

bool same_file(const std::filesystem::path& a, const std::filesystem::path& b) {
  std::error_code error;
  if (std::filesystem::equivalent(a, b, error)) return true;
  // equivalent is false (with an error) unless both exist: a file still to be written compares by path.
  const std::filesystem::path x = std::filesystem::weakly_canonical(std::filesystem::absolute(a, error), error);
  if (error) return a.lexically_normal() == b.lexically_normal();
  const std::filesystem::path y = std::filesystem::weakly_canonical(std::filesystem::absolute(b, error), error);
  return !error && x == y;
}

void check_distinct(const std::vector<NamedFile>& written, const std::vector<NamedFile>& read) {
  auto clash = [](const NamedFile& w, const NamedFile& other) {
    if (w.path.empty() || other.path.empty() || !same_file(w.path, other.path)) return;
    throw UsageError(w.flag + " " + w.path + " and " + other.flag + " " + other.path + " are one file: writing " +
                     w.flag + " would overwrite " + other.flag + "'s contents (give " + w.flag + " another path)");
  };
  for (size_t i = 0; i < written.size(); ++i) {
    for (size_t j = i + 1; j < written.size(); ++j) clash(written[i], written[j]);
    for (const NamedFile& r : read) clash(written[i], r);
  }
}

}  // namespace linattn::cli
