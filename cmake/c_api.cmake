# The C API (include/linattn/linattn.h, implemented in C++ by src/capi/): a shared library of its own,
# liblinattn_c, so that C programs and other languages' FFIs (Python's ctypes) can load it without a
# C++ toolchain. It links the static liblinattn inside and exports only the linattn_* functions
# (hidden visibility, --exclude-libs), so that its C++ symbols never clash with a host's. Its
# SOVERSION is LINATTN_C_API_VERSION, the ABI's own number (docs/c-api.md).
option(LINATTN_BUILD_C_API "Build liblinattn_c, the C API (include/linattn/linattn.h)" ON)
# The model's C API (include/linattn/linattn_model.h, src/capi/model/): load a trained model, generate.
# It brings linattn_model, and with it OpenBLAS, into liblinattn_c; OFF keeps the library BLAS-free.
option(LINATTN_C_API_MODEL "Include the model's C API (linattn_model.h) in liblinattn_c" ON)
if(LINATTN_BUILD_C_API)
  file(GLOB LINATTN_C_API_SOURCES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/capi/*.cpp)
  if(LINATTN_C_API_MODEL)
    file(GLOB LINATTN_C_API_MODEL_SOURCES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/capi/model/*.cpp)
    list(APPEND LINATTN_C_API_SOURCES ${LINATTN_C_API_MODEL_SOURCES})
  endif()
  add_library(linattn_c ${LINATTN_C_API_LIBRARY_TYPE} ${LINATTN_C_API_SOURCES})
  add_library(linattn::c ALIAS linattn_c)
  file(STRINGS ${PROJECT_SOURCE_DIR}/include/linattn/linattn.h LINATTN_C_API_VERSION_LINE
       REGEX "^#define LINATTN_C_API_VERSION ")
  string(REGEX REPLACE ".* ([0-9]+)$" "\\1" LINATTN_C_API_SOVERSION "${LINATTN_C_API_VERSION_LINE}")
  target_include_directories(linattn_c
    PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include> $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>
    PRIVATE ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(linattn_c PRIVATE linattn $<BUILD_INTERFACE:linattn_warnings> $<BUILD_INTERFACE:linattn_flags>)
  if(LINATTN_C_API_MODEL)
    target_link_libraries(linattn_c PRIVATE linattn_model)
  endif()
  set_target_properties(linattn_c PROPERTIES EXPORT_NAME c CXX_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON
                        VERSION ${PROJECT_VERSION} SOVERSION ${LINATTN_C_API_SOVERSION})
  if(CMAKE_SYSTEM_NAME STREQUAL "Linux" AND LINATTN_C_API_LIBRARY_TYPE STREQUAL "SHARED")
    target_link_options(linattn_c PRIVATE -Wl,--exclude-libs,ALL)
    # Every symbol resolved at link time, except in a sanitizer build: clang leaves a shared object's
    # __asan_* references to the runtime that the executable loads.
    if(NOT LINATTN_SANITIZERS)
      target_link_options(linattn_c PRIVATE -Wl,--no-undefined)
    endif()
  endif()
  install(TARGETS linattn_c EXPORT linattnTargets ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
          LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()

# A C program linked to liblinattn_c in a sanitizer build: linked by the C++ driver, because the library's
# UBSan checks of C++ (vptr, function types) need the sanitizer's C++ runtime and libstdc++, which the C
# driver does not link (clang: undefined __ubsan_vptr_type_cache). The program is still compiled as C.
function(linattn_link_sanitized_c_program target)
  if(LINATTN_SANITIZERS)
    set_target_properties(${target} PROPERTIES LINKER_LANGUAGE CXX)
  endif()
endfunction()

# examples/decode: a C99 program that generates from a trained model through the C API only.
if(LINATTN_BUILD_C_API AND LINATTN_C_API_MODEL)
  add_executable(linattn_decode ${PROJECT_SOURCE_DIR}/examples/decode/decode.c)
  set_target_properties(linattn_decode PROPERTIES OUTPUT_NAME decode RUNTIME_OUTPUT_DIRECTORY
                        ${PROJECT_BINARY_DIR}/examples/decode C_STANDARD 99 C_EXTENSIONS OFF)
  target_compile_options(linattn_decode PRIVATE -pedantic -Wall -Wextra $<$<BOOL:${LINATTN_WERROR}>:-Werror>)
  target_link_libraries(linattn_decode PRIVATE linattn_c linattn_flags)
  linattn_link_sanitized_c_program(linattn_decode)
  if(LINATTN_SMALL)
    target_link_options(linattn_decode PRIVATE -Wl,--gc-sections)
  endif()
endif()
