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
#include "reference_args.hpp"

namespace linattn::python {
namespace {

reference::Tensor tensor_arg(const py::object& x, const char* name, const char* shape) {
  const InputView<double> in = input_view<double>(x, name, 4, shape);
  const View4<const double>& v = in.view;
  reference::Tensor t;
  t.extent = v.extent;
  for (int64_t e : v.extent)
    if (e <= 0) return t;  // refused by the oracle's boundary check, which names the axis
  t = reference::Tensor(v.extent);
  for (int64_t b = 0; b < v.extent[0]; ++b)
    for (int64_t n = 0; n < v.extent[1]; ++n)
      for (int64_t h = 0; h < v.extent[2]; ++h)
        for (int64_t d = 0; d < v.extent[3]; ++d) t(b, n, h, d) = v(b, n, h, d);
  return t;
}

}  // namespace

py::array to_array(const reference::Tensor& t) {
  OutputArray<double> out = output_array<double>(t.extent);
  std::copy(t.data.begin(), t.data.end(), out.array.mutable_data());
  return out.array;
}

ReferenceInputs reference_inputs(const py::object& q, const py::object& k, const py::object& v,
                                 const py::object& key_lengths) {
  return {tensor_arg(q, "q", "[B, Nq, H, D]"), tensor_arg(k, "k", "[B, Nk, H, D]"), tensor_arg(v, "v", "[B, Nk, H, E]"),
          key_lengths_arg(key_lengths)};
}

reference::Tensor reference_dout(const py::object& dout) { return tensor_arg(dout, "dout", "[B, Nq, H, E]"); }

namespace {

py::tuple arrays(const reference::Gradients& g) {
  return py::make_tuple(to_array(g.dq), to_array(g.dk), to_array(g.dv));
}

py::array softmax_forward(const py::object& q, const py::object& k, const py::object& v, bool causal,
                          const py::object& key_lengths, std::optional<float> scale, const py::object& cu_seqlens) {
  const ReferenceInputs in = reference_inputs(q, k, v, key_lengths);
  const std::vector<int64_t> cu = cu_seqlens_arg(cu_seqlens);
  const SoftmaxAttentionOptions options = softmax_options(in.key_lengths, causal, scale, cu);
  reference::Tensor out;
  {
    py::gil_scoped_release nogil;
    out = reference::softmax_attention_forward(in.q, in.k, in.v, options);
  }
  return to_array(out);
}

py::tuple softmax_backward(const py::object& q, const py::object& k, const py::object& v, const py::object& dout,
                           bool causal, const py::object& key_lengths, std::optional<float> scale,
                           const py::object& cu_seqlens) {
  const ReferenceInputs in = reference_inputs(q, k, v, key_lengths);
  const reference::Tensor d = reference_dout(dout);
  const std::vector<int64_t> cu = cu_seqlens_arg(cu_seqlens);
  const SoftmaxAttentionOptions options = softmax_options(in.key_lengths, causal, scale, cu);
  reference::Gradients g;
  {
    py::gil_scoped_release nogil;
    g = reference::softmax_attention_backward(d, in.q, in.k, in.v, options);
  }
  return arrays(g);
}

py::array linear_forward(const py::object& q, const py::object& k, const py::object& v, const std::string& feature_map,
                         bool causal, const py::object& key_lengths, float eps, std::optional<int64_t> n_features,
                         uint64_t seed, const py::object& cu_seqlens) {
  const ReferenceInputs in = reference_inputs(q, k, v, key_lengths);
  const std::vector<int64_t> cu = cu_seqlens_arg(cu_seqlens);
  const LinearAttentionOptions options =
      linear_options(in.key_lengths, in.q.extent[3], feature_map, causal, eps, n_features, seed, cu);
  reference::Tensor out;
  {
    py::gil_scoped_release nogil;
    out = reference::linear_attention_forward(in.q, in.k, in.v, options);
  }
  return to_array(out);
}

py::tuple linear_backward(const py::object& q, const py::object& k, const py::object& v, const py::object& dout,
                          const std::string& feature_map, bool causal, const py::object& key_lengths, float eps,
                          std::optional<int64_t> n_features, uint64_t seed, const py::object& cu_seqlens) {
  const ReferenceInputs in = reference_inputs(q, k, v, key_lengths);
  const reference::Tensor d = reference_dout(dout);
  const std::vector<int64_t> cu = cu_seqlens_arg(cu_seqlens);
  const LinearAttentionOptions options =
      linear_options(in.key_lengths, in.q.extent[3], feature_map, causal, eps, n_features, seed, cu);
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
