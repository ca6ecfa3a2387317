#pragma once
// Linformer's projection arguments E and F, parsed once for the fp32 / fp64 bindings (linformer.cpp) and
// the half-precision ones (half.cpp).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <optional>
#include <span>
#include <string>
#include <vector>

#include "arrays.hpp"
#include "linattn/linformer.hpp"

namespace linattn::python {

// E or F: [P, N_max] (one projection for all heads) or [H, P, N_max] (one per head), as a C-order
// array of T: strided ones are copied (they are small), other dtypes refused.
template <class T>
inline py::array_t<T> projection_arg(const py::object& x, const char* name) {
  const std::string arg(name);
  if (!py::isinstance<py::array>(x))
    throw py::type_error(arg + ": expected a numpy.ndarray of " + std::string(py::str(py::dtype::of<T>())) + ", got " +
                         type_name(x));
  if (!py::isinstance<py::array_t<T>>(x))
    throw py::type_error(arg + ": expected " + std::string(py::str(py::dtype::of<T>())) + ", got " + type_name(x));
  const auto array = py::reinterpret_borrow<py::array>(x);
  if (array.ndim() != 2 && array.ndim() != 3)
    throw py::value_error(arg + ": expected 2 dims [P, N_max] or 3 dims [H, P, N_max], got " +
                          std::to_string(array.ndim()));
  return py::array_t<T, py::array::c_style>::ensure(array);
}

// E and F (F None: keys = values, both projected by E) and the options they imply.
template <class T>
struct Projections {
  py::array_t<T> E, F;  // F: only when has_F
  bool has_F = false;
  LinformerOptions options;
  std::span<const T> e() const { return {E.data(), size_t(E.size())}; }
  std::span<const T> f() const { return has_F ? std::span<const T>(F.data(), size_t(F.size())) : std::span<const T>(); }
};

template <class T>
inline Projections<T> projections(const py::object& E, const py::object& F, std::span<const int64_t> key_lengths,
                                  std::optional<float> scale) {
  Projections<T> p;
  p.E = projection_arg<T>(E, "E");
  const py::ssize_t dims = p.E.ndim();
  if (!F.is_none()) {
    p.F = projection_arg<T>(F, "F");
    p.has_F = true;
    const std::vector<py::ssize_t> e(p.E.shape(), p.E.shape() + dims), f(p.F.shape(), p.F.shape() + p.F.ndim());
    if (e != f)
      throw py::value_error("F: shape " + std::string(py::str(py::tuple(py::cast(f)))) + ", expected " +
                            std::string(py::str(py::tuple(py::cast(e)))) + " (E's shape)");
  }
  if (p.E.shape(dims - 2) < 1 || p.E.shape(dims - 1) < 1)
    throw py::value_error("E has an empty axis, expected P ≥ 1 and N_max ≥ 1");
  p.options.projected_length = p.E.shape(dims - 2);
  p.options.max_length = p.E.shape(dims - 1);
  p.options.share_heads = dims == 2;
  p.options.share_key_value = F.is_none();
  p.options.scale = scale;
  p.options.key_lengths = key_lengths;
  return p;
}

// dE and dF, shaped like E and F (dF absent when F is): what the backwards fill.
struct ProjectionGrads {
  py::array_t<float> dE, dF;
  std::span<float> de, df;
  explicit ProjectionGrads(const Projections<float>& p)
      : dE(std::vector<py::ssize_t>(p.E.shape(), p.E.shape() + p.E.ndim())),
        dF(p.has_F ? py::array_t<float>(std::vector<py::ssize_t>(p.F.shape(), p.F.shape() + p.F.ndim()))
                   : py::array_t<float>()),
        de(dE.mutable_data(), size_t(dE.size())),
        df(p.has_F ? std::span<float>(dF.mutable_data(), size_t(dF.size())) : std::span<float>()) {}
  // dE, then dF or None.
  py::object e() const { return dE; }
  py::object f() const { return df.empty() ? py::object(py::none()) : py::object(dF); }
};

}  // namespace linattn::python
