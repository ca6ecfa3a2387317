#pragma once
// Memory: what the machine has available, and the peak a configuration adds to a process.
#include <cstdint>
#include <string>

#include "linattn/memory.hpp"

namespace linattn::cli {

// /proc/meminfo's MemAvailable in bytes; -1 when it cannot be read.
int64_t mem_available_bytes();

// What this process can still allocate: linattn::available_memory() (the least of MemAvailable, the
// memory cgroup's limit less its usage and RLIMIT_AS less the address space in use), the library's
// one reading of it, which the Python bindings and the C API check their requests against too.
struct Available {
  int64_t bytes = -1;  // -1: no bound could be read
  std::string source;  // the bound that gave bytes, for messages ("MemAvailable", ...)
};
Available available_memory();

// Throws Refused (exit 3) when estimate > available_memory(), naming `what`, both numbers and the bound.
void check_memory(double estimate, const std::string& what);

// The 1-minute load average (/proc/loadavg); -1 when unreadable.
double load_average();
// A one-line stderr warning when the load average exceeds the cores: timings are then unreliable.
void warn_if_busy();

// "1.5 GiB", "312 KiB", "17 B".
using linattn::format_bytes;

// Peak resident memory added after construction: resets the kernel's high-water mark (VmHWM, via
// /proc/self/clear_refs) and remembers VmRSS; growth() is VmHWM − that baseline. Run it in a child
// process of its own so that nothing else shares the count. Counts touched pages: allocations
// never written are not counted.
class PeakMeter {
 public:
  PeakMeter();
  // -1 when the high-water mark could not be reset or read.
  int64_t growth() const;

 private:
  int64_t baseline_ = -1;
};

}  // namespace linattn::cli
