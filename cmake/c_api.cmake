# The C API (include/linattn/linattn.h, implemented in C++ by src/capi/): a shared library of its own,
# liblinattn_c, so that C programs and other languages' FFIs (Python's ctypes) can load it without a
# C++ toolchain. It links the static liblinattn inside and exports only the linattn_* functions
# (hidden visibility, --exclude-libs), so that its C++ symbols never clash with a host's. Its
# SOVERSION is LINATTN_C_API_VERSION, the ABI's own number (docs/c-api.md).
option(LINATTN_BUILD_C_API "Build liblinattn_c, the C API (include/linattn/linattn.h)" ON)
if(LINATTN_BUILD_C_API)
  file(GLOB LINATTN_C_API_SOURCES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/capi/*.cpp)
  add_library(linattn_c SHARED ${LINATTN_C_API_SOURCES})
  add_library(linattn::c ALIAS linattn_c)
  file(STRINGS ${PROJECT_SOURCE_DIR}/include/linattn/linattn.h LINATTN_C_API_VERSION_LINE
       REGEX "^#define LINATTN_C_API_VERSION ")
  string(REGEX REPLACE ".* ([0-9]+)$" "\\1" LINATTN_C_API_SOVERSION "${LINATTN_C_API_VERSION_LINE}")
  target_include_directories(linattn_c
    PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include> $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>
    PRIVATE ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(linattn_c PRIVATE linattn $<BUILD_INTERFACE:linattn_warnings> $<BUILD_INTERFACE:linattn_flags>)
  set_target_properties(linattn_c PROPERTIES EXPORT_NAME c CXX_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON
                        VERSION ${PROJECT_VERSION} SOVERSION ${LINATTN_C_API_SOVERSION})
  if(CMAKE_SYSTEM_NAME STREQUAL "Linux")
    target_link_options(linattn_c PRIVATE -Wl,--exclude-libs,ALL -Wl,--no-undefined)
  endif()
  install(TARGETS linattn_c EXPORT linattnTargets ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
          LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()
