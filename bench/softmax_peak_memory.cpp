// Peak memory of one softmax forward: run as a child process by scripts/speed_report.py, it allocates
// q, k, v, out ([B, H, N, D] storage) and lse, runs the forward once, and prints one JSON line with the
// process's peak resident set before the tensors, after them, and after the forward. The peak is VmHWM
// from /proc/self/status: getrusage's ru_maxrss survives exec on Linux, so a child of a big parent (the
// report runs in Python with torch loaded) would report the parent's peak.
// Usage: softmax_peak_memory N [H] [D] [threads]
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "linattn/softmax_attention.hpp"
#include "linattn/threads.hpp"

namespace {

// Peak resident set of this process image in KiB, or -1 when /proc is not there.
long peak_rss_kib() {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return -1;
  char line[256];
  long kib = -1;
  while (std::fgets(line, sizeof line, f))
    if (std::sscanf(line, "VmHWM: %ld kB", &kib) == 1) break;
  std::fclose(f);
  return kib;
}

// Touches every element (so that the pages are resident) with values in [-1, 1).
std::vector<float> filled(int64_t n, uint32_t seed) {
  std::vector<float> x(n);
  uint32_t s = seed;
  for (float& value : x) {
    s = s * 1664525u + 1013904223u;
    value = float(s >> 8) * (2.0f / 16777216.0f) - 1.0f;
  }
  return x;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s N [H=8] [D=64] [threads=2]\n", argv[0]);
    return 2;
  }
  const int64_t N = std::atoll(argv[1]), H = argc > 2 ? std::atoll(argv[2]) : 8,
                D = argc > 3 ? std::atoll(argv[3]) : 64;
  const int threads = argc > 4 ? std::atoi(argv[4]) : 2;
  const int64_t B = 1;
  linattn::set_num_threads(threads);
  const long start = peak_rss_kib();
  std::vector<float> q = filled(B * H * N * D, 1), k = filled(B * H * N * D, 2), v = filled(B * H * N * D, 3),
                     out = filled(B * H * N * D, 4), lse(B * H * N);
  const long allocated = peak_rss_kib();
  const auto t0 = std::chrono::steady_clock::now();
  linattn::softmax_attention_forward(linattn::bhnd(out.data(), B, H, N, D), lse, linattn::bhnd(q.data(), B, H, N, D),
                                     linattn::bhnd(k.data(), B, H, N, D), linattn::bhnd(v.data(), B, H, N, D));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const long peak = peak_rss_kib();
  double checksum = 0;
  for (float x : out) checksum += double(x);
  std::printf(
      "{\"N\": %lld, \"H\": %lld, \"D\": %lld, \"threads\": %d, \"qkvo_bytes\": %lld, \"rss_start_kib\": %ld, "
      "\"rss_after_alloc_kib\": %ld, \"peak_rss_kib\": %ld, \"forward_seconds\": %.3f, \"checksum\": %.6g}\n",
      (long long)N, (long long)H, (long long)D, threads, (long long)(4 * B * H * N * D * 4), start, allocated, peak,
      seconds, checksum);
  return 0;
}
