#include "common/memory.hpp"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "common/command.hpp"

namespace linattn::cli {

namespace {

// A "Key:   123 kB" line of a /proc file, in bytes; -1 if absent.
int64_t proc_kib_field(const char* path, const std::string& key) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.compare(0, key.size() + 1, key + ":") != 0) continue;
    std::istringstream fields(line.substr(key.size() + 1));
    int64_t kib = -1;
    fields >> kib;
    return kib < 0 ? -1 : kib * 1024;
  }
  return -1;
}

}  // namespace

int64_t mem_available_bytes() { return proc_kib_field("/proc/meminfo", "MemAvailable"); }

void check_memory(double estimate, const std::string& what) {
  const int64_t available = mem_available_bytes();
  if (available >= 0 && estimate > double(available))
    throw Refused(what + " needs about " + format_bytes(estimate) + " (estimate), but only " +
                  format_bytes(double(available)) + " is available (MemAvailable); refusing to start");
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

std::string format_bytes(double bytes) {
  static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int unit = 0;
  while (bytes >= 1024 && unit < 6) {
    bytes /= 1024;
    ++unit;
  }
  char text[48];
  std::snprintf(text, sizeof text, unit == 0 ? "%.0f %s" : bytes >= 1e6 ? "%.3g %s" : "%.1f %s", bytes, units[unit]);
  return text;
}

PeakMeter::PeakMeter() {
  std::ofstream clear("/proc/self/clear_refs");
  clear << "5";  // "5" resets the peak resident set size (Linux ≥ 4.0)
  clear.flush();
  if (clear) baseline_ = proc_kib_field("/proc/self/status", "VmRSS");
}

int64_t PeakMeter::growth() const {
  if (baseline_ < 0) return -1;
  const int64_t peak = proc_kib_field("/proc/self/status", "VmHWM");
  return peak < 0 ? -1 : peak - baseline_;
}

}  // namespace linattn::cli
