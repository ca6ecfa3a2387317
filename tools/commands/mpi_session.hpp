#pragma once
// MPI initialised for a command's lifetime, unless the caller had done it: the --seq-parallel modes of
// bench (bench_seq_parallel.cpp, bench_ring.cpp) and train.
#if defined(LINATTN_HAS_MPI)
#include <mpi.h>

namespace linattn::cli {

class MpiSession {
 public:
  MpiSession() {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
      int provided = 0;
      MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
      owner_ = true;
    }
  }
  ~MpiSession() {
    if (owner_) MPI_Finalize();
  }
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;

 private:
  bool owner_ = false;
};

}  // namespace linattn::cli
#endif
