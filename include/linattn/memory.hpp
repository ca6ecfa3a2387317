#pragma once
// What this process may still allocate, and the check a request makes with it before allocating:
// inputs with stride 0 (and a C caller's size arguments) can describe far more memory than they hold,
// and a request past the process's limit ended in the OOM killer rather than in an error.
#include <cstdint>
#include <new>
#include <string>
#include <utility>

namespace linattn {

// The least of MemAvailable (/proc/meminfo), the memory cgroup's limit less its usage (v2 memory.max −
// memory.current, v1 memory.limit_in_bytes − memory.usage_in_bytes; the process's own cgroup and each
// visible ancestor) and RLIMIT_AS less the address space in use. A process in a container sees the
// host's MemAvailable but is killed at its cgroup's limit, so MemAvailable alone is not the bound.
struct MemoryBudget {
  int64_t bytes = -1;          // -1: no bound could be read (not Linux)
  const char* bound = "none";  // the bound that gave bytes: "MemAvailable", "the memory cgroup's limit ..."
};
MemoryBudget available_memory();

// An allocation refused before it was made. It is a std::bad_alloc, so every boundary that maps running
// out of memory maps it too, with its message: the C API to LINATTN_ERROR_OUT_OF_MEMORY, Python
// (pybind11) to MemoryError.
class OutOfMemory : public std::bad_alloc {
 public:
  explicit OutOfMemory(std::string message) : message_(std::move(message)) {}
  const char* what() const noexcept override { return message_.c_str(); }

 private:
  std::string message_;
};

// Throws OutOfMemory "linattn: <what> needs about 16 GiB, but only 2.5 GiB is available (<bound>)" when
// bytes exceeds available_memory(). bytes is a double so that products of huge extents cannot overflow.
// Requests of 16 MiB or less are let through unread: they are the common case, and reading the bounds
// costs a few file reads.
void check_allocation(const std::string& what, double bytes);

// The scratch the chunked forms of the decayed family (decayed_attention_*) and the delta rule
// (delta_rule_*) hold besides their inputs, outputs and states, in bytes: per running thread its [C, C]
// matrices (3 and 5 of them), [C, K] and [C, V] row blocks and transposes, and the [K, V] state of every
// head it runs (the delta rule keeps its gradient too), with the backward's state before every chunk.
// A lower bound of the operators' buffers, so that a request refused on it would have run out of memory;
// 0 for shapes or a chunk_size the operators refuse (their checks name the argument). The bindings that
// know a call's shapes (Python, the C API) check it before the operator allocates: K = V = 2^15 is a
// 4 GiB state per thread.
struct ChunkedScratch {
  bool delta = false;     // the delta rule's scratch, else the decayed family's
  int64_t sequences = 0;  // N: the batch, or the packed sequences
  int64_t T = 0, H = 0, K = 0, V = 0, chunk_size = 0;
  bool backward = false;
  // A half-precision backward with grouped value heads (half_group value heads per q/k head): a task sums each
  // of its q/k heads' dq and dk rows in fp32, [T, K] each.
  int64_t half_group = 1;
};
double chunked_scratch_bytes(const ChunkedScratch& s);

// A "Key:   123 kB" field of a /proc file (/proc/meminfo, /proc/self/status) in bytes; -1 if absent.
int64_t proc_field_bytes(const char* path, const char* key);

// "1.5 GiB", "312 KiB", "17 B".
std::string format_bytes(double bytes);

}  // namespace linattn
