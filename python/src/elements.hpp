#pragma once
// The element types a binding runs on: float32 and float64 arrays as they are, and bf16/f16 as their
// bits in uint16 arrays (numpy has no bfloat16), with each call's dtype keyword saying which.
#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>
#include <type_traits>

#include "linattn/half.hpp"
#include "linattn/view.hpp"

namespace linattn::python {

namespace py = pybind11;

// The numpy element that holds a T: T itself, or a half type's bits (numpy has no bfloat16).
template <class T>
struct Stored {
  using type = T;
};
template <HalfType H>
struct Stored<H> {
  using type = uint16_t;
};
template <class T>
using stored_t = typename Stored<T>::type;

// A view of stored elements as the T they hold, const where they are (the same view for float and double).
template <class T, class S, class Target = std::conditional_t<std::is_const_v<S>, const T, T>>
View4<Target> as_elements(View4<S> x) {
  return {reinterpret_cast<Target*>(x.data), x.extent, x.stride};
}

// A view with x's shape and strides in float32 terms, for the memory estimate (which reads only those).
template <class T>
ConstTensorView shape_of(View4<const T> x) {
  return {reinterpret_cast<const float*>(x.data), x.extent, x.stride};
}

template <class T>
const char* dtype_name() {
  if constexpr (std::is_same_v<T, float>) return "float32";
  if constexpr (std::is_same_v<T, double>) return "float64";
  return "uint16 (half-precision bits)";
}

// The element of the half-precision module, m.half: each call's dtype ("bf16" or "f16") says which.
struct HalfBits {};

// The keyword that names a call's element type: required in m.half, elsewhere defaulting to the module's own.
template <class P>
auto dtype_arg() {
  if constexpr (std::is_same_v<P, HalfBits>)
    return py::arg("dtype");
  else
    return py::arg("dtype") = std::is_same_v<P, float> ? "float32" : "float64";
}

// Runs body.template operator()<E>() for the element type of one call: P itself (float, double), or for
// P = HalfBits bf16 or f16 as dtype names; ValueError for any other dtype.
template <class P, class Body>
auto by_element(const std::string& dtype, Body&& body) {
  if constexpr (std::is_same_v<P, HalfBits>) {
    if (dtype == "bf16") return body.template operator()<bf16>();
    if (dtype != "f16") throw py::value_error("dtype: expected \"bf16\" or \"f16\", got \"" + dtype + "\"");
    return body.template operator()<f16>();
  } else {
    const std::string own = std::is_same_v<P, float> ? "float32" : "float64";
    if (dtype != own)
      throw py::value_error("dtype: expected \"" + own + "\" (this module's), got \"" + dtype +
                            "\"; bf16 and f16 run in _linattn.half");
    return body.template operator()<P>();
  }
}

}  // namespace linattn::python
