#pragma once
// A plain text table: a header row, then rows, columns padded to their widest cell.
#include <string>
#include <vector>

namespace linattn::cli {

class Table {
 public:
  // align: one letter per column, 'l' or 'r'; by default the first column is left-aligned and the
  // others, which hold numbers, right-aligned.
  explicit Table(std::vector<std::string> header, std::string align = "")
      : header_(std::move(header)), align_(std::move(align)) {}
  void add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  std::string render() const;

 private:
  std::vector<std::string> header_;
  std::string align_;
  std::vector<std::vector<std::string>> rows_;
};

// printf-style formatting into a std::string.
std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
// Seconds with a unit that keeps 3 significant digits: "812 us", "1.25 ms", "3.40 s".
std::string format_seconds(double seconds);

}  // namespace linattn::cli
