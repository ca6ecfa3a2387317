#include "linattn/threads.hpp"

#include <omp.h>

#include "linattn/limits.hpp"

namespace linattn {

namespace {
int default_threads() {
  static const int threads = omp_get_max_threads();
  return threads;
}
}  // namespace

void set_num_threads(int threads) {
  // Bounded: 100,000 threads exhausted memory, and in Python libgomp then ended the process.
  check_bounded("linattn::set_num_threads", "threads", int64_t(threads), 0, limits::kMaxThreads,
                "0: the OpenMP default");
  default_threads();
  omp_set_num_threads(threads > 0 ? threads : default_threads());
}

int num_threads() { return omp_get_max_threads(); }

}  // namespace linattn
