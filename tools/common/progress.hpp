#pragma once
// A progress bar on stderr, drawn only when stderr is a terminal (logs and pipes stay clean).
#include <string>

namespace linattn::cli {

class Progress {
 public:
  // shown false: never drawn (a rank that does not speak).
  explicit Progress(int total, bool shown = true);
  ~Progress();  // clears the bar's line
  // Marks one more step done; `label` says what runs next.
  void step(const std::string& label);
  void show(const std::string& label);
  // Erases the bar (before printing to stdout on the same terminal); the next show redraws it.
  void clear();

 private:
  int total_, done_ = 0;
  bool enabled_;
};

}  // namespace linattn::cli
