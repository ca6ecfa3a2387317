#include "arrays.hpp"

#include <algorithm>
#include <cstring>
#include <string>

#include "linattn/boundary.hpp"
#include "linattn/memory.hpp"

namespace linattn::python {

template <class T>
static std::string dtype_name() {
  return py::str(py::dtype::of<T>()).cast<std::string>();
}

std::string type_name(py::handle obj) {
  if (py::isinstance<py::array>(obj)) return py::str(py::reinterpret_borrow<py::array>(obj).dtype());
  return py::str(obj.get_type().attr("__name__"));
}

template <class T>
InputView<T> input_view(py::handle obj, const char* name, int dims, const char* shape) {
  const std::string arg(name);
  if (!py::isinstance<py::array>(obj))
    throw py::type_error(arg + ": expected a numpy.ndarray of " + dtype_name<T>() + ", got " + type_name(obj));
  // Exactly T in native byte order: another dtype is never cast silently.
  if (!py::isinstance<py::array_t<T>>(obj))
    throw py::type_error(arg + ": expected " + dtype_name<T>() + ", got " + type_name(obj));
  InputView<T> in;
  in.keep = py::reinterpret_borrow<py::array>(obj);
  if (in.keep.ndim() != dims)
    throw py::value_error(arg + ": expected " + std::to_string(dims) + " dims " + shape + ", got " +
                          std::to_string(in.keep.ndim()));
  // Views take whole, non-negative element strides from an aligned pointer; anything else is copied.
  bool expressible = reinterpret_cast<std::uintptr_t>(in.keep.data()) % alignof(T) == 0;
  for (int i = 0; i < dims; ++i)
    expressible = expressible && in.keep.strides(i) >= 0 && in.keep.strides(i) % py::ssize_t(sizeof(T)) == 0;
  if (!expressible) {
    in.keep = py::module_::import("numpy").attr("array")(in.keep, py::arg("order") = "C", py::arg("copy") = true);
    in.copied = true;
  }
  std::array<int64_t, 4> extent{}, stride{};
  const int axes3[3] = {0, 2, 3};  // [B, H, D] fills the batch, heads and dim axes
  for (int i = 0; i < dims; ++i) {
    const int axis = dims == 4 ? i : axes3[i];
    extent[axis] = in.keep.shape(i);
    stride[axis] = in.keep.strides(i) / py::ssize_t(sizeof(T));
  }
  if (dims == 3) extent[1] = 1, stride[1] = 0;
  in.view = View4<const T>(static_cast<const T*>(in.keep.data()), extent, stride);
  return in;
}

template <class T>
OutputArray<T> output_array(std::array<int64_t, 4> extent, bool tokens) {
  OutputArray<T> out;
  const auto [B, N, H, D] = extent;
  // Refused before numpy allocates: inputs with stride 0 can have a logical shape far larger than their
  // memory, and an output of that shape ended in a bare MemoryError or the OOM killer. OutOfMemory is a
  // std::bad_alloc, which pybind11 raises as MemoryError with its message.
  const double bytes = double(B) * double(tokens ? N : 1) * double(H) * double(D) * double(sizeof(T));
  check_allocation("output of shape [" + std::to_string(B) + ", " + std::to_string(tokens ? N : 1) + ", " +
                       std::to_string(H) + ", " + std::to_string(D) + "]",
                   bytes);
  if (tokens) {
    out.array = py::array_t<T>(std::vector<py::ssize_t>{B, N, H, D});
    out.view = bnhd(out.array.mutable_data(), B, N, H, D);
  } else {
    out.array = py::array_t<T>(std::vector<py::ssize_t>{B, H, D});
    out.view = View4<T>(out.array.mutable_data(), {B, 1, H, D}, {H * D, 0, D, 1});
  }
  std::fill_n(out.array.mutable_data(), out.array.size(), T(0));
  return out;
}

std::vector<int64_t> key_lengths_arg(py::handle obj) {
  if (obj.is_none()) return {};
  py::array lengths = py::module_::import("numpy").attr("asarray")(obj);
  const char kind = lengths.dtype().kind();
  if (kind != 'i' && kind != 'u') throw py::type_error("key_lengths: expected integers, got " + type_name(lengths));
  if (lengths.ndim() != 1)
    throw py::value_error("key_lengths: expected 1 dim [B], got " + std::to_string(lengths.ndim()));
  auto as_int64 = py::array_t<int64_t, py::array::c_style | py::array::forcecast>::ensure(lengths);
  return std::vector<int64_t>(as_int64.data(), as_int64.data() + as_int64.size());
}

AttentionInputs attention_inputs(const char* op, const py::object& q, const py::object& k, const py::object& v,
                                 const py::object& key_lengths) {
  AttentionInputs in{input_view<float>(q, "q", 4, "[B, Nq, H, D]"), input_view<float>(k, "k", 4, "[B, Nk, H, D]"),
                     input_view<float>(v, "v", 4, "[B, Nk, H, E]"), key_lengths_arg(key_lengths)};
  boundary::check_attention_inputs(op, in.q.view, in.k.view, in.v.view);
  return in;
}

AttentionGradients::AttentionGradients(const AttentionInputs& in)
    : dq(output_array<float>(in.q.view.extent)),
      dk(output_array<float>(in.k.view.extent)),
      dv(output_array<float>(in.v.view.extent)) {}

InputView<float> dout_arg(const py::object& dout) { return input_view<float>(dout, "dout", 4, "[B, Nq, H, E]"); }

std::array<int64_t, 4> out_extent(const AttentionInputs& in) {
  return {in.q.view.extent[0], in.q.view.extent[1], in.q.view.extent[2], in.v.view.extent[3]};
}

Saved::Saved(const AttentionInputs& in)
    : out(output_array<float>(out_extent(in))),
      lse(std::vector<py::ssize_t>{in.q.view.extent[0], in.q.view.extent[2], in.q.view.extent[1]}) {}

SavedInputs saved_inputs(const py::object& out, const py::object& lse) {
  SavedInputs s{input_view<float>(out, "out", 4, "[B, Nq, H, E]"), {}};
  if (!py::isinstance<py::array_t<float>>(lse))
    throw py::type_error("lse: expected a numpy.ndarray of float32, got " + type_name(lse));
  s.lse = py::array_t<float, py::array::c_style>::ensure(lse);
  return s;
}

template InputView<float> input_view<float>(py::handle, const char*, int, const char*);
template InputView<double> input_view<double>(py::handle, const char*, int, const char*);
template InputView<uint16_t> input_view<uint16_t>(py::handle, const char*, int, const char*);
template OutputArray<uint16_t> output_array<uint16_t>(std::array<int64_t, 4>, bool);
template OutputArray<float> output_array<float>(std::array<int64_t, 4>, bool);
template OutputArray<double> output_array<double>(std::array<int64_t, 4>, bool);

}  // namespace linattn::python
