/* The OpenMP runtime calls linattn makes, for the small-target build (LINATTN_SMALL, docs/c-api.md
 * "Small targets"), which compiles without -fopenmp: one thread, so the #pragma omp lines are ignored
 * and these give the values of a one-thread team. Found before the compiler's omp.h only in that
 * build (its include path); the other builds never see it. */
#ifndef LINATTN_SMALL_TARGET_OMP_H
#define LINATTN_SMALL_TARGET_OMP_H
#ifdef _OPENMP
#error "src/small_target/omp.h is for builds without OpenMP"
#endif
static inline int omp_get_max_threads(void) { return 1; }
static inline int omp_get_num_threads(void) { return 1; }
static inline int omp_get_thread_num(void) { return 0; }
static inline void omp_set_num_threads(int threads) { (void)threads; }
#endif
