# LINATTN_SMALL: the build for small targets (docs/c-api.md "Small targets"). What it changes:
# - no OpenMP: compiled without -fopenmp, the #pragma omp lines ignored, and src/small_target/omp.h
#   answering the runtime calls as a one-thread team (the results are the same: every operator is
#   bitwise identical for any thread count);
# - no BLAS: the transformer's two cblas calls go to the loops of src/small_target/cblas.h;
# - static libraries only, liblinattn_c too, and every section its own (-ffunction-sections), so that
#   examples/decode links only what decoding reaches (--gc-sections);
# - no tests, tools, Python module or benchmarks (they assume OpenMP and OpenBLAS).
if(LINATTN_SMALL)
  foreach(off LINATTN_BUILD_TESTS LINATTN_BUILD_TOOLS LINATTN_BUILD_PYTHON LINATTN_BUILD_BENCHMARKS LINATTN_FUZZ)
    set(${off} OFF CACHE BOOL "" FORCE)
  endforeach()
  set(BUILD_SHARED_LIBS OFF)
  set(LINATTN_C_API_LIBRARY_TYPE STATIC)
  add_compile_options(-Wno-unknown-pragmas -ffunction-sections -fdata-sections)
  # Before the compiler's own directories, so that #include <omp.h> finds the one-thread answers.
  include_directories(BEFORE SYSTEM ${PROJECT_SOURCE_DIR}/src/small_target)
else()
  set(LINATTN_C_API_LIBRARY_TYPE SHARED)
endif()
