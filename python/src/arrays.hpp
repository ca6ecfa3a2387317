#pragma once
// numpy arrays in, linattn views out: checks that name the argument, and no copies of the data.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "linattn/view.hpp"

namespace linattn::python {

namespace py = pybind11;

// A read-only [B, N, H, D] view of a numpy argument. `keep` holds the memory the view points into:
// the caller's array itself, or a C-order copy when its strides cannot be expressed as a view
// (negative, or not a whole number of elements, or a misaligned pointer).
template <class T>
struct InputView {
  py::array keep;
  View4<const T> view;
  bool copied = false;
};

// obj must be a numpy array of T (float32 or float64) with `dims` dims: TypeError naming `name`
// for another type or dtype, ValueError for another number of dims. `shape` (e.g. "[B, Nk, H, E]")
// is quoted in the message. 4 dims give [B, N, H, D] as is; 3 dims ([B, H, D], one token) give
// [B, 1, H, D].
template <class T>
InputView<T> input_view(py::handle obj, const char* name, int dims, const char* shape);

// A fresh zeroed C-order array of T and a [B, N, H, D] view over it. With tokens == false the array
// is [B, H, D] and the view [B, 1, H, D] (one token).
template <class T>
struct OutputArray {
  py::array_t<T> array;
  View4<T> view;
};
template <class T>
OutputArray<T> output_array(std::array<int64_t, 4> extent, bool tokens = true);

// None: empty (all keys). Otherwise a 1-d array of integers (anything numpy turns into one),
// converted to int64: TypeError for non-integers, ValueError for another number of dims.
std::vector<int64_t> key_lengths_arg(py::handle obj);

// q: [B, Nq, H, D]; k: [B, Nk, H, D]; v: [B, Nk, H, E] as float32 views (which keep their arrays
// alive while the GIL is released), and key_lengths. Their shapes are checked against each other
// (boundary::check_attention_inputs, naming `op`) before any output is sized from them.
struct AttentionInputs {
  InputView<float> q, k, v;
  std::vector<int64_t> key_lengths;
};
AttentionInputs attention_inputs(const char* op, const py::object& q, const py::object& k, const py::object& v,
                                 const py::object& key_lengths);
// Fresh arrays shaped like q, k and v, for the gradients.
struct AttentionGradients {
  OutputArray<float> dq, dk, dv;
  explicit AttentionGradients(const AttentionInputs& in);
  py::tuple arrays() const { return py::make_tuple(dq.array, dk.array, dv.array); }
};
// dout: [B, Nq, H, E].
InputView<float> dout_arg(const py::object& dout);
// [B, Nq, H, E]: the output's shape (the operator checks k and v against q).
std::array<int64_t, 4> out_extent(const AttentionInputs& in);
// What the softmax and Linformer forwards save for their backward: out [B, Nq, H, E] and the
// log-sum-exp lse [B, H, Nq], as fresh arrays (linattn.torch keeps them between the two calls).
struct Saved {
  OutputArray<float> out;
  py::array_t<float> lse;
  explicit Saved(const AttentionInputs& in);
  std::span<float> lse_span() { return {lse.mutable_data(), size_t(lse.size())}; }
};
// out and lse handed back by a caller: float32 arrays, out [B, Nq, H, E] in any strides and lse in C
// order (their shapes are the operator's to check).
struct SavedInputs {
  InputView<float> out;
  py::array_t<float> lse;
  std::span<const float> lse_span() const { return {lse.data(), size_t(lse.size())}; }
};
SavedInputs saved_inputs(const py::object& out, const py::object& lse);

// The Python type name of obj's dtype ("float64") or of obj itself ("list").
std::string type_name(py::handle obj);

}  // namespace linattn::python
