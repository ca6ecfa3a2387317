// softmax_attention and linear_attention, forward and backward, on float32 numpy arrays.
#include <pybind11/stl.h>

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "arrays.hpp"
#include "bindings.hpp"
#include "linattn/linear_attention.hpp"
#include "linattn/softmax_attention.hpp"

namespace linattn::python {
namespace {

// out and lse of the forward, which the backward needs.
Saved softmax_run(const AttentionInputs& in, const SoftmaxAttentionOptions& options) {
  Saved saved(in);
  {
    py::gil_scoped_release nogil;
    softmax_attention_forward(saved.out.view, saved.lse_span(), in.q.view, in.k.view, in.v.view, options);
  }
  return saved;
}

AttentionGradients softmax_gradients(const AttentionInputs& in, const InputView<float>& dout, ConstTensorView out,
                                     std::span<const float> lse, const SoftmaxAttentionOptions& options) {
  AttentionGradients g(in);
  {
    py::gil_scoped_release nogil;
    softmax_attention_backward(g.dq.view, g.dk.view, g.dv.view, dout.view, in.q.view, in.k.view, in.v.view, out, lse,
                               options);
  }
  return g;
}

py::array softmax_forward(const py::object& q, const py::object& k, const py::object& v, bool causal,
                          const py::object& key_lengths, std::optional<float> scale, const py::object& cu_seqlens) {
  const AttentionInputs in = attention_inputs("softmax_attention", q, k, v, key_lengths);
  const std::vector<int64_t> cu = cu_seqlens_arg(cu_seqlens);
  return softmax_run(in, softmax_options(in.key_lengths, causal, scale, cu)).out.array;
}

// The C++ backward needs the forward's out and lse: recomputed here.
py::tuple softmax_backward(const py::object& q, const py::object& k, const py::object& v, const py::object& dout,
                           bool causal, const py::object& key_lengths, std::optional<float> scale,
                           const py::object& cu_seqlens) {
  const AttentionInputs in = attention_inputs("softmax_attention_backward", q, k, v, key_lengths);
  const InputView<float> d = dout_arg(dout);
  const std::vector<int64_t> cu = cu_seqlens_arg(cu_seqlens);
  const SoftmaxAttentionOptions options = softmax_options(in.key_lengths, causal, scale, cu);
  Saved saved = softmax_run(in, options);
  return softmax_gradients(in, d, saved.out.view, saved.lse_span(), options).arrays();
}

// linattn.torch's pair: the forward hands (out, lse) over, and the backward takes them back instead
// of recomputing them.
py::tuple softmax_forward_saving(const py::object& q, const py::object& k, const py::object& v, bool causal,
                                 const py::object& key_lengths, std::optional<float> scale,
                                 const py::object& cu_seqlens) {
  const AttentionInputs in = attention_inputs("softmax_attention", q, k, v, key_lengths);
  const std::vector<int64_t> cu = cu_seqlens_arg(cu_seqlens);
  Saved saved = softmax_run(in, softmax_options(in.key_lengths, causal, scale, cu));
  return py::make_tuple(saved.out.array, saved.lse);
}

py::tuple softmax_backward_saved(const py::object& q, const py::object& k, const py::object& v, const py::object& out,
                                 const py::object& lse, const py::object& dout, bool causal,
                                 const py::object& key_lengths, std::optional<float> scale,
                                 const py::object& cu_seqlens) {
  const AttentionInputs in = attention_inputs("softmax_attention_backward", q, k, v, key_lengths);
  const SavedInputs saved = saved_inputs(out, lse);
  const InputView<float> d = dout_arg(dout);
  const std::vector<int64_t> cu = cu_seqlens_arg(cu_seqlens);
  const SoftmaxAttentionOptions options = softmax_options(in.key_lengths, causal, scale, cu);
  return softmax_gradients(in, d, saved.out.view, saved.lse_span(), options).arrays();
}

py::array linear_forward(const py::object& q, const py::object& k, const py::object& v, const std::string& feature_map,
                         bool causal, const py::object& key_lengths, float eps, std::optional<int64_t> n_features,
                         uint64_t seed, const py::object& cu_seqlens) {
  const AttentionInputs in = attention_inputs("linear_attention", q, k, v, key_lengths);
  const std::vector<int64_t> cu = cu_seqlens_arg(cu_seqlens);
  const LinearAttentionOptions options =
      linear_options(in.key_lengths, in.q.view.extent[3], feature_map, causal, eps, n_features, seed, cu);
  OutputArray<float> out = output_array<float>(out_extent(in));
  {
    py::gil_scoped_release nogil;
    linear_attention_forward(out.view, in.q.view, in.k.view, in.v.view, options);
  }
  return out.array;
}

py::tuple linear_backward(const py::object& q, const py::object& k, const py::object& v, const py::object& dout,
                          const std::string& feature_map, bool causal, const py::object& key_lengths, float eps,
                          std::optional<int64_t> n_features, uint64_t seed, const py::object& cu_seqlens) {
  const AttentionInputs in = attention_inputs("linear_attention_backward", q, k, v, key_lengths);
  const InputView<float> d = dout_arg(dout);
  const std::vector<int64_t> cu = cu_seqlens_arg(cu_seqlens);
  const LinearAttentionOptions options =
      linear_options(in.key_lengths, in.q.view.extent[3], feature_map, causal, eps, n_features, seed, cu);
  AttentionGradients g(in);
  {
    py::gil_scoped_release nogil;
    linear_attention_backward(g.dq.view, g.dk.view, g.dv.view, d.view, in.q.view, in.k.view, in.v.view, options);
  }
  return g.arrays();
}

// How input_view saw an array: (data address, element strides of the [B, N, H, D] view, copied).
py::tuple view_info(const py::object& x) {
  const InputView<float> in = input_view<float>(x, "x", 4, "[B, N, H, D]");
  return py::make_tuple(reinterpret_cast<std::uintptr_t>(in.view.data), in.view.stride, in.copied);
}

}  // namespace

void bind_attention(py::module_& m) {
  def_softmax(m, &softmax_forward, &softmax_backward);
  def_linear(m, &linear_forward, &linear_backward);
  using py::arg;
  m.def("_softmax_attention_saving", &softmax_forward_saving, arg("q"), arg("k"), arg("v"), py::kw_only(),
        arg("causal") = false, arg("key_lengths") = py::none(), arg("scale") = py::none(),
        arg("cu_seqlens") = py::none(),
        "softmax_attention, returning (out, lse) for _softmax_attention_backward_saved (linattn.torch).");
  m.def("_softmax_attention_backward_saved", &softmax_backward_saved, arg("q"), arg("k"), arg("v"), arg("out"),
        arg("lse"), arg("dout"), py::kw_only(), arg("causal") = false, arg("key_lengths") = py::none(),
        arg("scale") = py::none(), arg("cu_seqlens") = py::none(),
        "softmax_attention_backward with the forward's out and lse given.");
  m.def("_view_info", &view_info, py::arg("x"), "Testing aid: (address, element strides, copied) of x's view.");
}

}  // namespace linattn::python
