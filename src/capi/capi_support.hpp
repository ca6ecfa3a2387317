#pragma once
// What every file of the C API shares: the handles' definitions, the thread-local last error, the
// guard that turns every C++ exception into a status, and the descriptor-to-view conversions.
#include <cstdint>
#include <span>
#include <string>

#include "linattn/feature_map.hpp"
#include "linattn/linattn.h"
#include "linattn/recurrent_state.hpp"
#include "linattn/view.hpp"

struct linattn_feature_map {
  linattn::FeatureMapPtr map;
  std::string name;  // map->name(), kept so that linattn_feature_map_name can return a pointer
};

struct linattn_state {
  linattn::RecurrentState state;
};

namespace linattn::capi {

// A failure the C layer itself detects, with the status it maps to.
struct Failure {
  linattn_status status;
  std::string message;
};

void set_error(const char* message) noexcept;
void clear_error() noexcept;
// Runs body; LINATTN_OK, or the status of what it threw with its message as the last error. Nothing
// escapes: linattn::Error is an invalid argument (io_errors: an I/O failure), std::bad_alloc out of
// memory, anything else internal.
template <class Body>
linattn_status guard(Body&& body, bool io_errors = false) noexcept;

[[noreturn]] void fail(linattn_status status, const char* function, const std::string& message);
// A required pointer argument.
void require(const void* pointer, const char* function, const char* name);

// A required tensor descriptor of a dtype this build computes in (f32).
TensorView view(const char* function, const char* name, const linattn_tensor* t);
ConstTensorView const_view(const char* function, const char* name, const linattn_tensor* t);
// An optional one: NULL gives the empty view the C++ API takes for "none".
TensorView optional_view(const char* function, const char* name, const linattn_tensor* t);
ConstTensorView optional_const_view(const char* function, const char* name, const linattn_tensor* t);

// A (pointer, count) argument: NULL with a count of 0 is empty; NULL with a count is an error.
template <class T>
std::span<T> buffer(const char* function, const char* name, T* data, int64_t count) {
  if (count < 0)
    fail(LINATTN_ERROR_INVALID_ARGUMENT, function,
         std::string(name) + " count is " + std::to_string(count) + ", expected >= 0");
  if (data == nullptr) {
    if (count > 0)
      fail(LINATTN_ERROR_NULL_POINTER, function,
           std::string(name) + " is NULL with a count of " + std::to_string(count) + ", expected a pointer");
    return {};
  }
  return {data, size_t(count)};
}

// The elements of lse, [B, H, Nq] of q: 0 when q's extents are not all positive (q's own check
// then reports them).
int64_t lse_size(const linattn_tensor* q);

}  // namespace linattn::capi

#include "capi/capi_guard-inl.hpp"
