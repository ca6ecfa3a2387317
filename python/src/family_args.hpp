#pragma once
// The arguments the chunked families share (decay.cpp, delta.cpp): short 1-d vectors (cu_seqlens,
// g_gamma), [N, H, K, V] states in float32 or float64, [B, T, H] tensors given without their unit
// last axis, and the oracle's fp64 copies. Each check names the argument.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "arrays.hpp"
#include "linattn/reference.hpp"

namespace linattn::python {

namespace py = pybind11;

// None: empty. Otherwise a 1-d array of what numpy turns into `T` (integers for cu_seqlens, floats
// for g_gamma), copied: both are a few values.
template <class T>
std::vector<T> vector_arg(const py::object& obj, const char* name, const char* shape) {
  if (obj.is_none()) return {};
  py::array values = py::module_::import("numpy").attr("asarray")(obj);
  const char kind = values.dtype().kind();
  const bool integral = std::is_integral_v<T>;
  if (integral ? kind != 'i' && kind != 'u' : kind != 'f' && kind != 'i' && kind != 'u')
    throw py::type_error(std::string(name) + ": expected " + (integral ? "integers" : "floats") + ", got " +
                         type_name(values));
  if (values.ndim() != 1)
    throw py::value_error(std::string(name) + ": expected 1 dim " + shape + ", got " + std::to_string(values.ndim()));
  auto cast = py::array_t<T, py::array::c_style | py::array::forcecast>::ensure(values);
  return std::vector<T>(cast.data(), cast.data() + cast.size());
}

inline std::string shape_text(std::span<const int64_t> extent) {
  std::string s = "[";
  for (size_t i = 0; i < extent.size(); ++i) s += (i ? ", " : "") + std::to_string(extent[i]);
  return s + "]";
}

// The number of states: B, or the number of packed sequences. With fewer than two offsets N is left
// to the operator's check of cu_seqlens, which names the problem.
inline int64_t state_count(int64_t batch, const std::vector<int64_t>& cu_seqlens) {
  return cu_seqlens.empty() ? batch : std::max<int64_t>(int64_t(cu_seqlens.size()) - 1, 0);
}

// A state argument: a C-order [N, H, K, V] array of T. Another layout is copied (read-only states)
// or refused (`in_place`: the caller's array is the one updated).
template <class T>
py::array_t<T> state_arg(const py::object& obj, const char* name, std::array<int64_t, 4> want, bool in_place) {
  const std::string arg(name);
  // Spelled only for a message: numpy's str(dtype) is Python code, a tenth of a small call's overhead.
  const auto dtype = [] { return py::str(py::dtype::of<T>()).cast<std::string>(); };
  if (!py::isinstance<py::array>(obj))
    throw py::type_error(arg + ": expected a numpy.ndarray of " + dtype() + ", got " + type_name(obj));
  if (!py::isinstance<py::array_t<T>>(obj))
    throw py::type_error(arg + ": expected " + dtype() + ", got " + type_name(obj));
  auto array = py::reinterpret_borrow<py::array>(obj);
  std::vector<int64_t> seen(array.shape(), array.shape() + array.ndim());
  if (seen != std::vector<int64_t>(want.begin(), want.end()))
    throw py::value_error(arg + ": expected shape [N, H, K, V] = " + shape_text(want) + ", got " + shape_text(seen));
  const bool c_order = (array.flags() & py::array::c_style) != 0;
  if (in_place) {
    if (!c_order)
      throw py::value_error(arg + ": expected a C-contiguous array (it is updated in place), got strides " +
                            shape_text(std::vector<int64_t>(array.strides(), array.strides() + array.ndim())) +
                            " bytes; pass numpy.ascontiguousarray(" + arg + ") and read the result from it");
    if (!array.writeable()) throw py::value_error(arg + ": expected a writeable array (it is updated in place)");
    return py::reinterpret_borrow<py::array_t<T>>(obj);
  }
  return py::array_t<T, py::array::c_style>::ensure(obj);  // copies only when not C-contiguous
}

// The values of a state array; a default-constructed one (not given) holds none.
template <class T>
std::span<const T> span_of(const py::array_t<T>& a) {
  return {a.data(), size_t(a.size())};
}
inline std::span<float> mutable_span(py::array_t<float>& a) { return {a.mutable_data(), size_t(a.size())}; }

inline py::array_t<float> zero_state(std::array<int64_t, 4> extent) {
  py::array_t<float> a(std::vector<py::ssize_t>(extent.begin(), extent.end()));
  std::fill_n(a.mutable_data(), a.size(), 0.0f);
  return a;
}

// A [B, T, H, C] view of a tensor that may come as [B, T, H] (C = 1: simple GLA's g, every beta):
// 4 dims as given, 3 dims with a unit axis appended. None: an empty view. `three_dims` records
// which, so that its gradient comes back in its own shape.
template <class T>
struct TrailingView {
  InputView<T> in;
  bool given = false, three_dims = false;
};
// x with a unit axis appended when it is an array of `dims` dims (else x itself, for input_view to judge): a
// view, through numpy's C API (numpy.expand_dims, Python code, was a seventh of a small call's overhead).
inline py::object with_unit_axis(const py::object& x, int dims) {
  if (!py::isinstance<py::array>(x)) return x;
  auto a = py::reinterpret_borrow<py::array>(x);
  if (a.ndim() != dims) return x;
  std::vector<py::ssize_t> shape(a.shape(), a.shape() + dims);
  shape.push_back(1);
  return a.reshape(shape);
}
template <class T>
TrailingView<T> trailing_arg(const py::object& x, const char* name, const char* shape) {
  TrailingView<T> t;
  if (x.is_none()) return t;
  t.given = true;
  const py::object x4 = with_unit_axis(x, 3);
  t.three_dims = !x4.is(x);
  t.in = input_view<T>(x4, name, 4, shape);
  return t;
}
// One token's [B, H] or [B, H, C] tensor (a decode step's beta or gate) as a [B, 1, H, C] view;
// None: an empty view.
template <class T>
InputView<T> token_arg(const py::object& x, const char* name, const char* shape) {
  if (x.is_none()) return {};
  return input_view<T>(with_unit_axis(x, 2), name, 3, shape);
}
// A gradient array in the shape its tensor came in; None where it was not given.
template <class T>
py::object trailing_result(py::array a, const TrailingView<T>& t) {
  if (!t.given) return py::none();
  if (!t.three_dims) return a;
  return a.attr("reshape")(py::make_tuple(a.shape(0), a.shape(1), a.shape(2)));
}

// The oracle's arguments: copies of the float64 arrays into oracle tensors.
inline reference::Tensor tensor64(const py::object& x, const char* name, const char* shape) {
  const InputView<double> in = input_view<double>(x, name, 4, shape);
  reference::Tensor t;
  t.extent = in.view.extent;
  for (int64_t e : t.extent)
    if (e <= 0) return t;  // refused by the oracle's boundary check, which names the axis
  t = reference::Tensor(t.extent);
  const auto& e = t.extent;
  for (int64_t b = 0; b < e[0]; ++b)
    for (int64_t n = 0; n < e[1]; ++n)
      for (int64_t h = 0; h < e[2]; ++h)
        for (int64_t d = 0; d < e[3]; ++d) t(b, n, h, d) = in.view(b, n, h, d);
  return t;
}
inline std::vector<double> state64(const py::object& obj, const char* name, std::array<int64_t, 4> want) {
  const py::array_t<double> a = state_arg<double>(obj, name, want, false);
  return std::vector<double>(a.data(), a.data() + a.size());
}
inline py::array array64(const std::vector<double>& values, std::array<int64_t, 4> extent) {
  py::array_t<double> a(std::vector<py::ssize_t>(extent.begin(), extent.end()));
  std::copy(values.begin(), values.end(), a.mutable_data());
  return a;
}

}  // namespace linattn::python
