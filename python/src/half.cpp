// softmax, linear and Linformer attention, forward and backward, on bf16 or f16 tensors: the module
// _linattn.half. Arrays hold the bits as uint16 (numpy has no bfloat16; linattn/__init__.py and
// _torch_ops.py view float16 arrays and torch.float16 / torch.bfloat16 tensors as uint16, no copy);
// dtype ("bf16" or "f16") says what they mean. lse, and Linformer's E and F and their gradients, stay float32.
#include <pybind11/stl.h>

#include <optional>
#include <span>
#include <string>

#include "arrays.hpp"
#include "bindings.hpp"
#include "elements.hpp"
#include "linattn/boundary.hpp"
#include "linattn/half_attention.hpp"
#include "linformer_args.hpp"

namespace linattn::python {
namespace {

using Bits = uint16_t;

struct Inputs {
  InputView<Bits> q, k, v;
  std::vector<int64_t> key_lengths;
  std::array<int64_t, 4> out_extent() const {
    return {q.view.extent[0], q.view.extent[1], q.view.extent[2], v.view.extent[3]};
  }
};
Inputs inputs(const char* op, const py::object& q, const py::object& k, const py::object& v,
              const py::object& lengths) {
  Inputs in{input_view<Bits>(q, "q", 4, "[B, Nq, H, D]"), input_view<Bits>(k, "k", 4, "[B, Nk, H, D]"),
            input_view<Bits>(v, "v", 4, "[B, Nk, H, E]"), key_lengths_arg(lengths)};
  // The shapes in float32 terms: the check reads shapes, not values.
  boundary::check_attention_inputs(op, shape_of(in.q.view), shape_of(in.k.view), shape_of(in.v.view));
  return in;
}
struct Grads {
  OutputArray<Bits> dq, dk, dv;
  explicit Grads(const Inputs& in)
      : dq(output_array<Bits>(in.q.view.extent)),
        dk(output_array<Bits>(in.k.view.extent)),
        dv(output_array<Bits>(in.v.view.extent)) {}
  py::tuple arrays() const { return py::make_tuple(dq.array, dk.array, dv.array); }
};

py::tuple softmax_saving(const py::object& q, const py::object& k, const py::object& v, const std::string& dtype,
                         bool causal, const py::object& key_lengths, std::optional<float> scale,
                         const py::object& cu_seqlens) {
  const Inputs in = inputs("softmax_attention", q, k, v, key_lengths);
  const std::vector<int64_t> cu = cu_seqlens_arg(cu_seqlens);
  const SoftmaxAttentionOptions options = softmax_options(in.key_lengths, causal, scale, cu);
  OutputArray<Bits> out = output_array<Bits>(in.out_extent());
  py::array_t<float> lse(std::vector<py::ssize_t>{in.q.view.extent[0], in.q.view.extent[2], in.q.view.extent[1]});
  const std::span<float> lse_span(lse.mutable_data(), size_t(lse.size()));
  by_element<HalfBits>(dtype, [&]<class H>() {
    py::gil_scoped_release nogil;
    softmax_attention_forward(as_elements<H>(out.view), lse_span, as_elements<H>(in.q.view), as_elements<H>(in.k.view),
                              as_elements<H>(in.v.view), options);
  });
  return py::make_tuple(out.array, lse);
}

py::tuple softmax_backward_saved(const py::object& q, const py::object& k, const py::object& v, const py::object& out,
                                 const py::object& lse, const py::object& dout, const std::string& dtype, bool causal,
                                 const py::object& key_lengths, std::optional<float> scale,
                                 const py::object& cu_seqlens) {
  const Inputs in = inputs("softmax_attention_backward", q, k, v, key_lengths);
  const InputView<Bits> o = input_view<Bits>(out, "out", 4, "[B, Nq, H, E]"),
                        d = input_view<Bits>(dout, "dout", 4, "[B, Nq, H, E]");
  if (!py::isinstance<py::array_t<float>>(lse)) throw py::type_error("lse: expected a numpy.ndarray of float32");
  const auto l = py::array_t<float, py::array::c_style>::ensure(lse);
  const std::vector<int64_t> cu = cu_seqlens_arg(cu_seqlens);
  const SoftmaxAttentionOptions options = softmax_options(in.key_lengths, causal, scale, cu);
  Grads g(in);
  by_element<HalfBits>(dtype, [&]<class H>() {
    py::gil_scoped_release nogil;
    softmax_attention_backward(as_elements<H>(g.dq.view), as_elements<H>(g.dk.view), as_elements<H>(g.dv.view),
                               as_elements<H>(d.view), as_elements<H>(in.q.view), as_elements<H>(in.k.view),
                               as_elements<H>(in.v.view), as_elements<H>(o.view),
                               std::span<const float>(l.data(), size_t(l.size())), options);
  });
  return g.arrays();
}

py::array linear_forward(const py::object& q, const py::object& k, const py::object& v, const std::string& dtype,
                         const std::string& feature_map, bool causal, const py::object& key_lengths, float eps,
                         std::optional<int64_t> n_features, uint64_t seed, const py::object& cu_seqlens) {
  const Inputs in = inputs("linear_attention", q, k, v, key_lengths);
  const std::vector<int64_t> cu = cu_seqlens_arg(cu_seqlens);
  const LinearAttentionOptions options =
      linear_options(in.key_lengths, in.q.view.extent[3], feature_map, causal, eps, n_features, seed, cu);
  OutputArray<Bits> out = output_array<Bits>(in.out_extent());
  by_element<HalfBits>(dtype, [&]<class H>() {
    py::gil_scoped_release nogil;
    linear_attention_forward(as_elements<H>(out.view), as_elements<H>(in.q.view), as_elements<H>(in.k.view),
                             as_elements<H>(in.v.view), options);
  });
  return out.array;
}

py::tuple linear_backward(const py::object& q, const py::object& k, const py::object& v, const py::object& dout,
                          const std::string& dtype, const std::string& feature_map, bool causal,
                          const py::object& key_lengths, float eps, std::optional<int64_t> n_features, uint64_t seed,
                          const py::object& cu_seqlens) {
  const Inputs in = inputs("linear_attention_backward", q, k, v, key_lengths);
  const InputView<Bits> d = input_view<Bits>(dout, "dout", 4, "[B, Nq, H, E]");
  const std::vector<int64_t> cu = cu_seqlens_arg(cu_seqlens);
  const LinearAttentionOptions options =
      linear_options(in.key_lengths, in.q.view.extent[3], feature_map, causal, eps, n_features, seed, cu);
  Grads g(in);
  by_element<HalfBits>(dtype, [&]<class H>() {
    py::gil_scoped_release nogil;
    linear_attention_backward(as_elements<H>(g.dq.view), as_elements<H>(g.dk.view), as_elements<H>(g.dv.view),
                              as_elements<H>(d.view), as_elements<H>(in.q.view), as_elements<H>(in.k.view),
                              as_elements<H>(in.v.view), options);
  });
  return g.arrays();
}

// Linformer: q, k, v, out and their gradients in half; E, F, lse, dE and dF float32.
py::tuple linformer_saving(const py::object& q, const py::object& k, const py::object& v, const py::object& E,
                           const py::object& F, const std::string& dtype, const py::object& key_lengths,
                           std::optional<float> scale) {
  const Inputs in = inputs("linformer_attention", q, k, v, key_lengths);
  const Projections<float> p = projections<float>(E, F, in.key_lengths, scale);
  OutputArray<Bits> out = output_array<Bits>(in.out_extent());
  py::array_t<float> lse(std::vector<py::ssize_t>{in.q.view.extent[0], in.q.view.extent[2], in.q.view.extent[1]});
  const std::span<float> lse_span(lse.mutable_data(), size_t(lse.size()));
  by_element<HalfBits>(dtype, [&]<class H>() {
    py::gil_scoped_release nogil;
    linformer_attention_forward(as_elements<H>(out.view), lse_span, as_elements<H>(in.q.view),
                                as_elements<H>(in.k.view), as_elements<H>(in.v.view), p.e(), p.f(), p.options);
  });
  return py::make_tuple(out.array, lse);
}

py::tuple linformer_backward_saved(const py::object& q, const py::object& k, const py::object& v, const py::object& E,
                                   const py::object& F, const py::object& out, const py::object& lse,
                                   const py::object& dout, const std::string& dtype, const py::object& key_lengths,
                                   std::optional<float> scale) {
  const Inputs in = inputs("linformer_attention_backward", q, k, v, key_lengths);
  const Projections<float> p = projections<float>(E, F, in.key_lengths, scale);
  const InputView<Bits> o = input_view<Bits>(out, "out", 4, "[B, Nq, H, E]"),
                        d = input_view<Bits>(dout, "dout", 4, "[B, Nq, H, E]");
  if (!py::isinstance<py::array_t<float>>(lse)) throw py::type_error("lse: expected a numpy.ndarray of float32");
  const auto l = py::array_t<float, py::array::c_style>::ensure(lse);
  Grads g(in);
  const ProjectionGrads dp(p);
  by_element<HalfBits>(dtype, [&]<class H>() {
    py::gil_scoped_release nogil;
    linformer_attention_backward(as_elements<H>(g.dq.view), as_elements<H>(g.dk.view), as_elements<H>(g.dv.view), dp.de,
                                 dp.df, as_elements<H>(d.view), as_elements<H>(in.q.view), as_elements<H>(in.k.view),
                                 as_elements<H>(in.v.view), p.e(), p.f(), as_elements<H>(o.view),
                                 std::span<const float>(l.data(), size_t(l.size())), p.options);
  });
  return py::make_tuple(g.dq.array, g.dk.array, g.dv.array, dp.e(), dp.f());
}

}  // namespace

void bind_half(py::module_& m) {
  using py::arg;
  py::module_ h = m.def_submodule("half",
                                  "softmax, linear and Linformer attention, the decayed family and the delta rule on "
                                  "bf16/f16 bits held as uint16 arrays.");
  h.def("_linformer_attention_saving", &linformer_saving, arg("q"), arg("k"), arg("v"), arg("E"), arg("F") = py::none(),
        py::kw_only(), arg("dtype"), arg("key_lengths") = py::none(), arg("scale") = py::none(),
        "(out bits [B, Nq, H, E], lse float32 [B, H, Nq]); E and F float32.");
  h.def("_linformer_attention_backward_saved", &linformer_backward_saved, arg("q"), arg("k"), arg("v"), arg("E"),
        arg("F"), arg("out"), arg("lse"), arg("dout"), py::kw_only(), arg("dtype"), arg("key_lengths") = py::none(),
        arg("scale") = py::none(),
        "(dq, dk, dv) bits and (dE, dF) float32 (dF None when F is), from the forward's out and lse.");
  h.def("_softmax_attention_saving", &softmax_saving, arg("q"), arg("k"), arg("v"), py::kw_only(), arg("dtype"),
        arg("causal") = false, arg("key_lengths") = py::none(), arg("scale") = py::none(),
        arg("cu_seqlens") = py::none(), "(out bits [B, Nq, H, E], lse float32 [B, H, Nq]).");
  h.def("_softmax_attention_backward_saved", &softmax_backward_saved, arg("q"), arg("k"), arg("v"), arg("out"),
        arg("lse"), arg("dout"), py::kw_only(), arg("dtype"), arg("causal") = false, arg("key_lengths") = py::none(),
        arg("scale") = py::none(), arg("cu_seqlens") = py::none(),
        "(dq, dk, dv) bits, from the forward's out and lse.");
  h.def("linear_attention", &linear_forward, arg("q"), arg("k"), arg("v"), py::kw_only(), arg("dtype"),
        arg("feature_map") = "elu", arg("causal") = false, arg("key_lengths") = py::none(), arg("eps") = 1e-6f,
        arg("n_features") = py::none(), arg("seed") = 0, arg("cu_seqlens") = py::none(), "out bits [B, Nq, H, E].");
  h.def("linear_attention_backward", &linear_backward, arg("q"), arg("k"), arg("v"), arg("dout"), py::kw_only(),
        arg("dtype"), arg("feature_map") = "elu", arg("causal") = false, arg("key_lengths") = py::none(),
        arg("eps") = 1e-6f, arg("n_features") = py::none(), arg("seed") = 0, arg("cu_seqlens") = py::none(),
        "(dq, dk, dv) bits.");
}

}  // namespace linattn::python
