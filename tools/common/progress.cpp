#include "common/progress.hpp"

#include <unistd.h>

#include <cstdio>

namespace linattn::cli {

Progress::Progress(int total, bool shown)
    : total_(total > 0 ? total : 1), enabled_(shown && ::isatty(STDERR_FILENO) == 1) {}

Progress::~Progress() { clear(); }

void Progress::clear() {
  if (enabled_) std::fprintf(stderr, "\r\033[K");
}

void Progress::step(const std::string& label) {
  ++done_;
  show(label);
}

void Progress::show(const std::string& label) {
  if (!enabled_) return;
  constexpr int kWidth = 30;
  const int filled = done_ * kWidth / total_;
  std::fprintf(stderr, "\r\033[K[%.*s%*s] %d/%d %s", filled, "##############################", kWidth - filled, "",
               done_, total_, label.c_str());
  std::fflush(stderr);
}

}  // namespace linattn::cli
