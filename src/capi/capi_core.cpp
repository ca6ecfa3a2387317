// The C API's foundations: the last error, tensor descriptors, version, info and threads.
#include <cstring>
#include <string>
#include <type_traits>

#include "capi/capi_support.hpp"
#include "linattn/cpu_info.hpp"
#include "linattn/threads.hpp"
#include "linattn/version.hpp"

namespace linattn::capi {
namespace {

// The last error of this thread. Assigning may itself fail for lack of memory: then the fixed
// message is returned instead.
thread_local std::string last_error;
thread_local bool last_error_lost = false;
thread_local std::string info_json;

template <class T>
constexpr int32_t dtype_of() {
  using E = std::remove_const_t<T>;
  return std::is_same_v<E, float> ? LINATTN_F32 : std::is_same_v<E, bf16> ? LINATTN_BF16 : LINATTN_F16;
}

}  // namespace

const char* dtype_name(int32_t dtype) noexcept {
  switch (dtype) {
    case LINATTN_F32:
      return "LINATTN_F32";
    case LINATTN_BF16:
      return "LINATTN_BF16";
    case LINATTN_F16:
      return "LINATTN_F16";
    default:
      return nullptr;
  }
}

void fail_unknown_dtype(const char* function, const char* name, int32_t dtype) {
  fail(LINATTN_ERROR_INVALID_ARGUMENT, function,
       std::string(name) + ".dtype is " + std::to_string(dtype) +
           ", expected LINATTN_F32 (0), LINATTN_BF16 (1) or LINATTN_F16 (2)");
}

void set_error(const char* message) noexcept {
  try {
    last_error = message;
    last_error_lost = false;
  } catch (...) {
    last_error_lost = true;
  }
}

void clear_error() noexcept {
  last_error.clear();
  last_error_lost = false;
}

void fail(linattn_status status, const char* function, const std::string& message) {
  throw Failure{status, std::string(function) + ": " + message};
}

void require(const void* pointer, const char* function, const char* name) {
  if (pointer == nullptr)
    fail(LINATTN_ERROR_NULL_POINTER, function, std::string(name) + " is NULL, expected a pointer");
}

// The descriptor as a view of T, whose dtype it must have (that of the call's first output).
template <class T>
View4<T> view_of(const char* function, const char* name, const linattn_tensor* t) {
  require(t, function, name);
  if (t->dtype != dtype_of<T>()) {
    const char* known = dtype_name(t->dtype);
    if (!known) fail_unknown_dtype(function, name, t->dtype);
    fail(LINATTN_ERROR_INVALID_ARGUMENT, function,
         std::string(name) + ".dtype is " + known + ", expected " + dtype_name(dtype_of<T>()) +
             ": every tensor of one call has the same dtype");
  }
  View4<T> v;
  v.data = static_cast<T*>(t->data);
  for (int i = 0; i < 4; ++i) {
    v.extent[size_t(i)] = t->extent[i];
    v.stride[size_t(i)] = t->stride[i];
  }
  return v;
}

template View4<float> view_of<float>(const char*, const char*, const linattn_tensor*);
template View4<const float> view_of<const float>(const char*, const char*, const linattn_tensor*);
template View4<bf16> view_of<bf16>(const char*, const char*, const linattn_tensor*);
template View4<const bf16> view_of<const bf16>(const char*, const char*, const linattn_tensor*);
template View4<f16> view_of<f16>(const char*, const char*, const linattn_tensor*);
template View4<const f16> view_of<const f16>(const char*, const char*, const linattn_tensor*);
int64_t lse_size(const linattn_tensor* q) {
  if (q == nullptr) return 0;
  const int64_t B = q->extent[0], N = q->extent[1], H = q->extent[2];
  if (B <= 0 || N <= 0 || H <= 0) return 0;
  int64_t size = 0;
  if (__builtin_mul_overflow(B, N, &size) || __builtin_mul_overflow(size, H, &size)) return 0;
  return size;
}

}  // namespace linattn::capi

using namespace linattn::capi;

extern "C" {

linattn_tensor linattn_tensor_bnhd(float* data, int64_t B, int64_t N, int64_t H, int64_t D) {
  return {data, LINATTN_F32, {B, N, H, D}, {N * H * D, H * D, D, 1}};
}

linattn_tensor linattn_tensor_bhnd(float* data, int64_t B, int64_t H, int64_t N, int64_t D) {
  return {data, LINATTN_F32, {B, N, H, D}, {H * N * D, D, N * D, 1}};
}

const char* linattn_last_error(void) {
  return last_error_lost ? "linattn: an error occurred, and its message could not be stored (out of memory)"
                         : last_error.c_str();
}

const char* linattn_status_name(linattn_status status) {
  switch (status) {
    case LINATTN_OK:
      return "LINATTN_OK";
    case LINATTN_ERROR_INVALID_ARGUMENT:
      return "LINATTN_ERROR_INVALID_ARGUMENT";
    case LINATTN_ERROR_NULL_POINTER:
      return "LINATTN_ERROR_NULL_POINTER";
    case LINATTN_ERROR_UNSUPPORTED_DTYPE:
      return "LINATTN_ERROR_UNSUPPORTED_DTYPE";
    case LINATTN_ERROR_OUT_OF_MEMORY:
      return "LINATTN_ERROR_OUT_OF_MEMORY";
    case LINATTN_ERROR_IO:
      return "LINATTN_ERROR_IO";
    case LINATTN_ERROR_INTERNAL:
      return "LINATTN_ERROR_INTERNAL";
  }
  return "LINATTN_STATUS_UNKNOWN";
}

const char* linattn_version(void) { return LINATTN_VERSION_STRING; }

void linattn_version_parts(int* major, int* minor, int* patch) {
  if (major) *major = LINATTN_VERSION_MAJOR;
  if (minor) *minor = LINATTN_VERSION_MINOR;
  if (patch) *patch = LINATTN_VERSION_PATCH;
}

int linattn_c_api_version(void) { return LINATTN_C_API_VERSION; }

const char* linattn_info_json(void) {
  const linattn_status status = guard([] { info_json = linattn::cpu_info_json(linattn::cpu_info()); });
  return status == LINATTN_OK ? info_json.c_str() : "{}";
}

linattn_status linattn_set_num_threads(int threads) {
  return guard([&] { linattn::set_num_threads(threads); });
}

int linattn_num_threads(void) { return linattn::num_threads(); }

}  // extern "C"
