/* The two CBLAS routines the transformer calls (src/model/layers.cpp), for the small-target build
 * (LINATTN_SMALL), which links no BLAS: plain row-major loops, c = alpha op(a) op(b) + beta c. Decoding
 * multiplies one token's row by each weight matrix, a matrix-vector product that these loops serve
 * without the size or threads of OpenBLAS. Only that build has this folder on its include path. */
#ifndef LINATTN_SMALL_TARGET_CBLAS_H
#define LINATTN_SMALL_TARGET_CBLAS_H

enum CBLAS_ORDER { CblasRowMajor = 101, CblasColMajor = 102 };
enum CBLAS_TRANSPOSE { CblasNoTrans = 111, CblasTrans = 112 };

#define LINATTN_SMALL_GEMM(NAME, T)                                                                               \
  static inline void NAME(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb, int M, int N, \
                          int K, T alpha, const T* a, int lda, const T* b, int ldb, T beta, T* c, int ldc) {      \
    (void)order; /* row-major only: the only order linattn passes */                                              \
    for (int i = 0; i < M; ++i) {                                                                                 \
      T* ci = c + (long)i * ldc;                                                                                  \
      for (int j = 0; j < N; ++j) ci[j] = beta == 0 ? (T)0 : beta * ci[j];                                        \
      for (int p = 0; p < K; ++p) {                                                                               \
        const T aip = alpha * (ta == CblasNoTrans ? a[(long)i * lda + p] : a[(long)p * lda + i]);                 \
        if (tb == CblasNoTrans) {                                                                                 \
          const T* bp = b + (long)p * ldb;                                                                        \
          for (int j = 0; j < N; ++j) ci[j] += aip * bp[j];                                                       \
        } else {                                                                                                  \
          for (int j = 0; j < N; ++j) ci[j] += aip * b[(long)j * ldb + p];                                        \
        }                                                                                                         \
      }                                                                                                           \
    }                                                                                                             \
  }
LINATTN_SMALL_GEMM(cblas_sgemm, float)
LINATTN_SMALL_GEMM(cblas_dgemm, double)
#undef LINATTN_SMALL_GEMM

#endif
