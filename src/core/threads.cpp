#include "linattn/threads.hpp"

#include <omp.h>

namespace linattn {

namespace {
int default_threads() {
  static const int threads = omp_get_max_threads();
  return threads;
}
}  // namespace

void set_num_threads(int threads) {
  default_threads();
  omp_set_num_threads(threads > 0 ? threads : default_threads());
}

int num_threads() { return omp_get_max_threads(); }

}  // namespace linattn
