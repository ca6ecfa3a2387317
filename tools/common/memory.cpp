#include "common/memory.hpp"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "common/command.hpp"

namespace linattn::cli {

int64_t mem_available_bytes() { return proc_field_bytes("/proc/meminfo", "MemAvailable"); }

Available available_memory() {
  const MemoryBudget budget = linattn::available_memory();
  return {budget.bytes, budget.bound};
}

void check_memory(double estimate, const std::string& what) {
  const Available available = available_memory();
  if (available.bytes >= 0 && estimate > double(available.bytes))
    throw Refused(what + " needs about " + format_bytes(estimate) + " (estimate), but only " +
                  format_bytes(double(available.bytes)) + " is available (" + available.source +
                  "); refusing to start");
}

double load_average() {
  std::ifstream in("/proc/loadavg");
  double load = -1;
  in >> load;
  return in ? load : -1;
}

void warn_if_busy() {
  const double load = load_average();
  const long cores = sysconf(_SC_NPROCESSORS_ONLN);
  if (cores > 0 && load > double(cores))
    std::fprintf(stderr,
                 "linattn: warning: the machine is busy (load average %.1f on %ld cores): timings will be noisy\n",
                 load, cores);
}

PeakMeter::PeakMeter() {
  std::ofstream clear("/proc/self/clear_refs");
  clear << "5";  // "5" resets the peak resident set size (Linux ≥ 4.0)
  clear.flush();
  if (clear) baseline_ = proc_field_bytes("/proc/self/status", "VmRSS");
}

int64_t PeakMeter::growth() const {
  if (baseline_ < 0) return -1;
  const int64_t peak = proc_field_bytes("/proc/self/status", "VmHWM");
  return peak < 0 ? -1 : peak - baseline_;
}

}  // namespace linattn::cli
