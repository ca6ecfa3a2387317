#pragma once
// What every file of the C API shares: the handles' definitions, the thread-local last error, the
// guard that turns every C++ exception into a status, and the descriptor-to-view conversions.
#include <cstdint>
#include <span>
#include <string>

#include "linattn/feature_map.hpp"
#include "linattn/half.hpp"
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

// The operators, which take f32, bf16 or f16 (linattn/half_attention.hpp): body(T{}) runs with T the
// element type of lead's dtype (float, bf16 or f16), and the views of T below require every other
// tensor of the call to have that dtype too.
template <class Body>
void by_dtype(const char* function, const char* name, const linattn_tensor* lead, Body&& body);
template <class T>
View4<T> view_of(const char* function, const char* name, const linattn_tensor* t);
template <class T>
View4<const T> const_view_of(const char* function, const char* name, const linattn_tensor* t) {
  return view_of<const T>(function, name, t);
}
template <class T>
View4<const T> optional_const_view_of(const char* function, const char* name, const linattn_tensor* t) {
  return t == nullptr ? View4<const T>{} : const_view_of<T>(function, name, t);
}
template <class T>
View4<T> optional_view_of(const char* function, const char* name, const linattn_tensor* t) {
  return t == nullptr ? View4<T>{} : view_of<T>(function, name, t);
}

// A (pointer, count) argument: NULL with a count of 0 is empty (none); NULL with a count, and a
// pointer with a count of 0 (which was silently taken as none: a forgotten count), are errors.
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
  if (count == 0)
    fail(LINATTN_ERROR_INVALID_ARGUMENT, function,
         std::string(name) + " is a pointer with a count of 0, expected its count (or NULL for none)");
  return {data, size_t(count)};
}

// The elements of lse, [B, H, Nq] of q: 0 when q's extents are not all positive (q's own check
// then reports them).
int64_t lse_size(const linattn_tensor* q);

}  // namespace linattn::capi

#include "capi/capi_guard-inl.hpp"

namespace linattn::capi {

// "LINATTN_BF16" for a known dtype, nullptr for any other value.
const char* dtype_name(int32_t dtype) noexcept;
[[noreturn]] void fail_unknown_dtype(const char* function, const char* name, int32_t dtype);

template <class Body>
void by_dtype(const char* function, const char* name, const linattn_tensor* lead, Body&& body) {
  require(lead, function, name);
  switch (lead->dtype) {
    case LINATTN_F32:
      return body(float{});
    case LINATTN_BF16:
      return body(bf16{});
    case LINATTN_F16:
      return body(f16{});
    default:
      fail_unknown_dtype(function, name, lead->dtype);
  }
}

}  // namespace linattn::capi
