#include "common/table.hpp"

#include <algorithm>
#include <cstdarg>
#include <cstdio>

namespace linattn::cli {

namespace {
// Display width: counts UTF-8 code points, not bytes (headers hold "×" and "≤").
size_t width(const std::string& s) {
  return size_t(
      std::count_if(s.begin(), s.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; }));
}
}  // namespace

std::string Table::render() const {
  std::vector<size_t> widths(header_.size(), 0);
  for (size_t c = 0; c < header_.size(); ++c) widths[c] = width(header_[c]);
  for (const auto& row : rows_)
    for (size_t c = 0; c < row.size() && c < widths.size(); ++c) widths[c] = std::max(widths[c], width(row[c]));
  std::string text;
  const auto line = [&](const std::vector<std::string>& row) {
    for (size_t c = 0; c < widths.size(); ++c) {
      const std::string cell = c < row.size() ? row[c] : "";
      const std::string pad(widths[c] - width(cell), ' ');
      const bool left = c < align_.size() ? align_[c] == 'l' : c == 0;
      text += (c == 0 ? "" : "  ") + (left ? cell + pad : pad + cell);
    }
    text += '\n';
  };
  line(header_);
  size_t total = 0;
  for (size_t w : widths) total += w + 2;
  text += std::string(total - 2, '-') + '\n';
  for (const auto& row : rows_) line(row);
  return text;
}

std::string format(const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  char buffer[512];
  std::vsnprintf(buffer, sizeof buffer, fmt, args);
  va_end(args);
  return buffer;
}

std::string format_seconds(double seconds) {
  if (seconds < 1e-3) return format("%.3g us", seconds * 1e6);
  if (seconds < 1) return format("%.3g ms", seconds * 1e3);
  return format("%.3g s", seconds);
}

}  // namespace linattn::cli
