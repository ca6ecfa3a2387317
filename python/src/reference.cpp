// linattn.reference: the fp64 oracle on float64 numpy arrays. Slow (O(N²), no tiling): it serves
// torch's float64 path, so that gradcheck runs at fp64 tolerances, and tests.
#include "linattn/reference.hpp"

#include <pybind11/stl.h>

#include <algorithm>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "arrays.hpp"
#include "bindings.hpp"
#include "core/validate.hpp"
#include "reference_args.hpp"

namespace linattn::python {
namespace {

reference::Tensor tensor_arg(const py::object& x, const char* name, const char* shape) {
  const InputView<double> in = input_view<double>(x, name, 4, shape);
  const View4<const double>& v = in.view;
  reference::Tensor t;
  t.extent = v.extent;
  for (int64_t e : v.extent)
    if (e <= 0) return t;  // refused by check_attention_inputs, which names the axis
  t = reference::Tensor(v.extent);
  for (int64_t b = 0; b < v.extent[0]; ++b)
    for (int64_t n = 0; n < v.extent[1]; ++n)
      for (int64_t h = 0; h < v.extent[2]; ++h)
        for (int64_t d = 0; d < v.extent[3]; ++d) t(b, n, h, d) = v(b, n, h, d);
  return t;
}

// The oracle indexes by the shapes it is given, so they are checked first, with the drivers' checks
// (only the extents matter to them; the dummy pointer is never read).
ConstTensorView shape_of(const reference::Tensor& t) {
  static const float dummy = 0.0f;
  return ConstTensorView(&dummy, t.extent, {0, 0, 0, 0});
}

}  // namespace

py::array to_array(const reference::Tensor& t) {
  OutputArray<double> out = output_array<double>(t.extent);
  std::copy(t.data.begin(), t.data.end(), out.array.mutable_data());
  return out.array;
}

ReferenceInputs reference_inputs(const char* op, const py::object& q, const py::object& k, const py::object& v,
                                 const py::object& key_lengths) {
  ReferenceInputs in{tensor_arg(q, "q", "[B, Nq, H, D]"), tensor_arg(k, "k", "[B, Nk, H, D]"),
                     tensor_arg(v, "v", "[B, Nk, H, E]"), key_lengths_arg(key_lengths)};
  detail::check_attention_inputs(op, shape_of(in.q), shape_of(in.k), shape_of(in.v));
  detail::check_key_lengths(op, in.key_lengths, in.q.extent[0], in.k.extent[1]);
  return in;
}

reference::Tensor reference_dout(const char* op, const py::object& dout, const ReferenceInputs& in) {
  reference::Tensor d = tensor_arg(dout, "dout", "[B, Nq, H, E]");
  const std::array<int64_t, 4> want{in.q.extent[0], in.q.extent[1], in.q.extent[2], in.v.extent[3]};
  const char* because[4] = {"q's batch", "q's sequence length", "q's heads", "v's value dim"};
  for (int axis = 0; axis < 4; ++axis) detail::check_extent(op, "dout", shape_of(d), axis, want[axis], because[axis]);
  return d;
}

namespace {

py::tuple arrays(const reference::Gradients& g) {
  return py::make_tuple(to_array(g.dq), to_array(g.dk), to_array(g.dv));
}

py::array softmax_forward(const py::object& q, const py::object& k, const py::object& v, bool causal,
                          const py::object& key_lengths, std::optional<float> scale) {
  const ReferenceInputs in = reference_inputs("reference::softmax_attention", q, k, v, key_lengths);
  const SoftmaxAttentionOptions options = softmax_options(in.key_lengths, causal, scale);
  reference::Tensor out;
  {
    py::gil_scoped_release nogil;
    out = reference::softmax_attention_forward(in.q, in.k, in.v, options);
  }
  return to_array(out);
}

py::tuple softmax_backward(const py::object& q, const py::object& k, const py::object& v, const py::object& dout,
                           bool causal, const py::object& key_lengths, std::optional<float> scale) {
  const char* op = "reference::softmax_attention_backward";
  const ReferenceInputs in = reference_inputs(op, q, k, v, key_lengths);
  const reference::Tensor d = reference_dout(op, dout, in);
  const SoftmaxAttentionOptions options = softmax_options(in.key_lengths, causal, scale);
  reference::Gradients g;
  {
    py::gil_scoped_release nogil;
    g = reference::softmax_attention_backward(d, in.q, in.k, in.v, options);
  }
  return arrays(g);
}

py::array linear_forward(const py::object& q, const py::object& k, const py::object& v, const std::string& feature_map,
                         bool causal, const py::object& key_lengths, float eps, std::optional<int64_t> n_features,
                         uint64_t seed) {
  const ReferenceInputs in = reference_inputs("reference::linear_attention", q, k, v, key_lengths);
  const LinearAttentionOptions options =
      linear_options(in.key_lengths, in.q.extent[3], feature_map, causal, eps, n_features, seed);
  reference::Tensor out;
  {
    py::gil_scoped_release nogil;
    out = reference::linear_attention_forward(in.q, in.k, in.v, options);
  }
  return to_array(out);
}

py::tuple linear_backward(const py::object& q, const py::object& k, const py::object& v, const py::object& dout,
                          const std::string& feature_map, bool causal, const py::object& key_lengths, float eps,
                          std::optional<int64_t> n_features, uint64_t seed) {
  const char* op = "reference::linear_attention_backward";
  const ReferenceInputs in = reference_inputs(op, q, k, v, key_lengths);
  const reference::Tensor d = reference_dout(op, dout, in);
  const LinearAttentionOptions options =
      linear_options(in.key_lengths, in.q.extent[3], feature_map, causal, eps, n_features, seed);
  reference::Gradients g;
  {
    py::gil_scoped_release nogil;
    g = reference::linear_attention_backward(d, in.q, in.k, in.v, options);
  }
  return arrays(g);
}

}  // namespace

void bind_reference(py::module_& parent) {
  py::module_ m = parent.def_submodule(
      "reference", "The fp64 oracle on float64 arrays: the same functions as linattn's, O(N²) and slow.");
  def_softmax(m, &softmax_forward, &softmax_backward);
  def_linear(m, &linear_forward, &linear_backward);
}

}  // namespace linattn::python
