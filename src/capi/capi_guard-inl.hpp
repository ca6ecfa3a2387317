#pragma once
// linattn::capi::guard: the one place where C++ exceptions stop.
#include <exception>
#include <new>

#include "linattn/error.hpp"
#include "linattn/memory.hpp"

namespace linattn::capi {

template <class Body>
linattn_status guard(Body&& body, bool io_errors) noexcept {
  try {
    body();
    clear_error();
    return LINATTN_OK;
  } catch (const Failure& f) {
    set_error(f.message.c_str());
    return f.status;
  } catch (const linattn::Error& e) {
    set_error(e.what());
    return io_errors ? LINATTN_ERROR_IO : LINATTN_ERROR_INVALID_ARGUMENT;
  } catch (const linattn::OutOfMemory& e) {  // refused before allocating: its message names the request
    set_error(e.what());
    return LINATTN_ERROR_OUT_OF_MEMORY;
  } catch (const std::bad_alloc&) {
    set_error("linattn: out of memory");
    return LINATTN_ERROR_OUT_OF_MEMORY;
  } catch (const std::exception& e) {
    set_error(e.what());
    return LINATTN_ERROR_INTERNAL;
  } catch (...) {
    set_error("linattn: an unknown C++ exception reached the C API");
    return LINATTN_ERROR_INTERNAL;
  }
}

}  // namespace linattn::capi
