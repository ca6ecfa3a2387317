#pragma once
// Thread control. Results are bitwise identical for every thread count.
namespace linattn {
// Threads used by the operators (OpenMP); 0 restores the OpenMP default. Throws linattn::Error
// outside [0, limits::kMaxThreads].
void set_num_threads(int threads);
int num_threads();
}  // namespace linattn
