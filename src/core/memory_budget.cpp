// linattn/memory.hpp: the memory this process may still allocate, read from the kernel's three bounds.
#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "linattn/limits.hpp"
#include "linattn/memory.hpp"
#include "linattn/threads.hpp"

namespace linattn {

namespace {

// The first number in a file ("max" and unreadable files: -1).
int64_t file_number(const std::filesystem::path& path) {
  std::ifstream in(path);
  int64_t value = -1;
  in >> value;
  return in ? value : -1;
}

// The memory cgroup's directory under its mount, from /proc/self/cgroup's line for it (v2: "0::/p",
// v1: "N:...memory...:/p"): mount/p where that exists (no cgroup namespace), else the mount itself
// (a container's own cgroup is mounted as the root).
std::filesystem::path cgroup_directory(bool& v2) {
  std::ifstream in("/proc/self/cgroup");
  std::string line;
  std::filesystem::path v1_dir, v2_dir;
  while (std::getline(in, line)) {
    const size_t first = line.find(':'), second = line.find(':', first + 1);
    if (first == std::string::npos || second == std::string::npos) continue;
    const std::string controllers = line.substr(first + 1, second - first - 1), path = line.substr(second + 1);
    auto under = [&](const std::filesystem::path& mount) {
      const std::filesystem::path inside = mount / std::filesystem::path(path).relative_path();
      std::error_code error;
      return std::filesystem::is_directory(inside, error) ? inside : mount;
    };
    if (controllers.empty() && line.compare(0, 2, "0:") == 0) v2_dir = under("/sys/fs/cgroup");
    if (("," + controllers + ",").find(",memory,") != std::string::npos) v1_dir = under("/sys/fs/cgroup/memory");
  }
  v2 = v1_dir.empty();
  return v2 ? v2_dir : v1_dir;
}

// The least limit − usage over the memory cgroup and its ancestors inside the mount; -1: no limit.
int64_t cgroup_available_bytes() {
  bool v2 = false;
  std::filesystem::path dir = cgroup_directory(v2);
  const std::filesystem::path root = v2 ? "/sys/fs/cgroup" : "/sys/fs/cgroup/memory";
  int64_t least = -1;
  for (; !dir.empty(); dir = dir.parent_path()) {
    const int64_t limit = file_number(dir / (v2 ? "memory.max" : "memory.limit_in_bytes"));
    const int64_t usage = file_number(dir / (v2 ? "memory.current" : "memory.usage_in_bytes"));
    // v1 writes "no limit" as about 2^63 rounded to pages.
    if (limit >= 0 && limit < (int64_t(1) << 62) && usage >= 0) {
      const int64_t left = std::max<int64_t>(0, limit - usage);
      least = least < 0 ? left : std::min(least, left);
    }
    if (dir == root || dir == dir.parent_path()) break;
  }
  return least;
}

// RLIMIT_AS less the address space in use (VmSize); -1: no limit.
int64_t address_space_available_bytes() {
  rlimit limit{};
  if (getrlimit(RLIMIT_AS, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return -1;
  const int64_t used = proc_field_bytes("/proc/self/status", "VmSize");
  return std::max<int64_t>(0, int64_t(limit.rlim_cur) - std::max<int64_t>(used, 0));
}

}  // namespace

int64_t proc_field_bytes(const char* path, const char* key) {
  const std::string prefix = std::string(key) + ":";
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.compare(0, prefix.size(), prefix) != 0) continue;
    std::istringstream fields(line.substr(prefix.size()));
    int64_t kib = -1;
    fields >> kib;
    return kib < 0 ? -1 : kib * 1024;
  }
  return -1;
}

MemoryBudget available_memory() {
  MemoryBudget least;
  const MemoryBudget bounds[] = {{proc_field_bytes("/proc/meminfo", "MemAvailable"), "MemAvailable"},
                                 {cgroup_available_bytes(), "the memory cgroup's limit less its usage"},
                                 {address_space_available_bytes(), "RLIMIT_AS less the address space in use"}};
  for (const MemoryBudget& b : bounds)
    if (b.bytes >= 0 && (least.bytes < 0 || b.bytes < least.bytes)) least = b;
  return least;
}

void check_allocation(const std::string& what, double bytes) {
  // Reading the bounds costs a few file reads: small requests, the common case, skip them.
  if (!(bytes > double(int64_t(1) << 24))) return;
  const MemoryBudget budget = available_memory();
  if (budget.bytes >= 0 && bytes > double(budget.bytes))
    throw OutOfMemory("linattn: " + what + " needs about " + format_bytes(bytes) + ", but only " +
                      format_bytes(double(budget.bytes)) + " is available (" + budget.bound +
                      "); make the request smaller");
}

double chunked_scratch_bytes(const ChunkedScratch& s) {
  const int64_t max_chunk = s.delta ? limits::kMaxDeltaChunkSize : limits::kMaxDecayChunkSize;
  if (s.sequences < 1 || s.T < 1 || s.H < 1 || s.K < 1 || s.V < 1 || s.chunk_size < 1 || s.chunk_size > max_chunk)
    return 0;
  const double N = double(s.sequences), T = double(s.T), H = double(s.H), K = double(s.K), V = double(s.V);
  const double C = std::min(double(s.chunk_size), T), threads = std::max(1, num_threads());
  // The forwards and the decayed backward split each sequence's heads into enough groups for every thread, the
  // heads of a group in lockstep, each with its state (ops/recurrence/chunked_driver.hpp); the delta rule's
  // backward runs a task per (sequence, head).
  const bool task_per_head = s.delta && s.backward;
  const double groups = task_per_head ? H : std::clamp(std::ceil(threads / N), 1.0, H);
  const double heads_per_task = task_per_head ? 1 : std::ceil(H / groups);
  const double live = std::min(threads, N * groups);
  const double per_head = K * V * ((s.delta ? 2 : 1) + (s.backward ? std::ceil(T / C) + 1 : 0));
  // A half backward with grouped value heads: a task's fp32 sums of dq and dk, [T, K] each per q/k head.
  const double group_sums =
      s.backward && s.half_group > 1 ? 2 * T * K * std::ceil(heads_per_task / double(s.half_group)) : 0;
  const double per_thread = (s.delta ? 5 : 3) * C * C + 4 * C * (K + V) + std::max(K, V) * C + group_sums;
  return 4 * live * (per_thread + heads_per_task * per_head);
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

}  // namespace linattn
