// linattn.linformer_attention and its backward (fp32, and fp64 in linattn.reference), bound when
// include/linattn/linformer.hpp is part of the build.
#include "bindings.hpp"

#if __has_include("linattn/linformer.hpp")
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <span>
#include <string>
#include <vector>

#include "arrays.hpp"
#include "linattn/linformer.hpp"
#include "linformer_args.hpp"
#include "reference_args.hpp"

namespace linattn::python {
namespace {

// out and lse of the forward, which the backward needs.
Saved linformer_run(const AttentionInputs& in, const Projections<float>& p) {
  Saved saved(in);
  {
    py::gil_scoped_release nogil;
    linformer_attention_forward(saved.out.view, saved.lse_span(), in.q.view, in.k.view, in.v.view, p.e(), p.f(),
                                p.options);
  }
  return saved;
}

// (dq, dk, dv, dE, dF), dF None when F is.
py::tuple linformer_gradients(const AttentionInputs& in, const Projections<float>& p, const InputView<float>& dout,
                              ConstTensorView out, std::span<const float> lse) {
  AttentionGradients g(in);
  const ProjectionGrads dp(p);
  {
    py::gil_scoped_release nogil;
    linformer_attention_backward(g.dq.view, g.dk.view, g.dv.view, dp.de, dp.df, dout.view, in.q.view, in.k.view,
                                 in.v.view, p.e(), p.f(), out, lse, p.options);
  }
  return py::make_tuple(g.dq.array, g.dk.array, g.dv.array, dp.e(), dp.f());
}

py::array linformer_forward(const py::object& q, const py::object& k, const py::object& v, const py::object& E,
                            const py::object& F, const py::object& key_lengths, std::optional<float> scale) {
  const AttentionInputs in = attention_inputs("linformer_attention", q, k, v, key_lengths);
  return linformer_run(in, projections<float>(E, F, in.key_lengths, scale)).out.array;
}

// out and lse are recomputed for the C++ backward.
py::tuple linformer_backward(const py::object& q, const py::object& k, const py::object& v, const py::object& E,
                             const py::object& F, const py::object& dout, const py::object& key_lengths,
                             std::optional<float> scale) {
  const AttentionInputs in = attention_inputs("linformer_attention_backward", q, k, v, key_lengths);
  const InputView<float> d = dout_arg(dout);
  const Projections<float> p = projections<float>(E, F, in.key_lengths, scale);
  Saved saved = linformer_run(in, p);
  return linformer_gradients(in, p, d, saved.out.view, saved.lse_span());
}

// linattn.torch's pair: (out, lse) handed over from the forward to the backward.
py::tuple linformer_forward_saving(const py::object& q, const py::object& k, const py::object& v, const py::object& E,
                                   const py::object& F, const py::object& key_lengths, std::optional<float> scale) {
  const AttentionInputs in = attention_inputs("linformer_attention", q, k, v, key_lengths);
  Saved saved = linformer_run(in, projections<float>(E, F, in.key_lengths, scale));
  return py::make_tuple(saved.out.array, saved.lse);
}

py::tuple linformer_backward_saved(const py::object& q, const py::object& k, const py::object& v, const py::object& E,
                                   const py::object& F, const py::object& out, const py::object& lse,
                                   const py::object& dout, const py::object& key_lengths, std::optional<float> scale) {
  const AttentionInputs in = attention_inputs("linformer_attention_backward", q, k, v, key_lengths);
  const SavedInputs saved = saved_inputs(out, lse);
  const InputView<float> d = dout_arg(dout);
  return linformer_gradients(in, projections<float>(E, F, in.key_lengths, scale), d, saved.out.view, saved.lse_span());
}

std::vector<double> to_vector(const py::array_t<double>& x) {
  return std::vector<double>(x.data(), x.data() + x.size());  // empty for an absent F
}

py::array reference_forward(const py::object& q, const py::object& k, const py::object& v, const py::object& E,
                            const py::object& F, const py::object& key_lengths, std::optional<float> scale) {
  const ReferenceInputs in = reference_inputs(q, k, v, key_lengths);
  const Projections<double> p = projections<double>(E, F, in.key_lengths, scale);
  const std::vector<double> e = to_vector(p.E), f = to_vector(p.F);
  reference::Tensor out;
  {
    py::gil_scoped_release nogil;
    out = reference::linformer_attention_forward(in.q, in.k, in.v, e, f, p.options);
  }
  return to_array(out);
}

py::tuple reference_backward(const py::object& q, const py::object& k, const py::object& v, const py::object& E,
                             const py::object& F, const py::object& dout, const py::object& key_lengths,
                             std::optional<float> scale) {
  const ReferenceInputs in = reference_inputs(q, k, v, key_lengths);
  const reference::Tensor d = reference_dout(dout);
  const Projections<double> p = projections<double>(E, F, in.key_lengths, scale);
  const std::vector<double> e = to_vector(p.E), f = to_vector(p.F);
  reference::LinformerGradients g;
  {
    py::gil_scoped_release nogil;
    g = reference::linformer_attention_backward(d, in.q, in.k, in.v, e, f, p.options);
  }
  auto shaped = [](const std::vector<double>& x, const py::array_t<double>& like) {
    py::array_t<double> a(std::vector<py::ssize_t>(like.shape(), like.shape() + like.ndim()));
    std::copy(x.begin(), x.end(), a.mutable_data());
    return a;
  };
  return py::make_tuple(to_array(g.dq), to_array(g.dk), to_array(g.dv), shaped(g.dE, p.E),
                        p.has_F ? py::object(shaped(g.dF, p.F)) : py::object(py::none()));
}

template <class Forward, class Backward>
void def_linformer(py::module_& m, Forward forward, Backward backward) {
  using py::arg;
  m.def("linformer_attention", forward, arg("q"), arg("k"), arg("v"), arg("E"), arg("F") = py::none(), py::kw_only(),
        arg("key_lengths") = py::none(), arg("scale") = py::none(),
        "softmax(q (E k)ᵀ · scale) (F v): E, F [P, N_max] (shared by the heads) or [H, P, N_max]; F None: "
        "values projected by E too. out [B, Nq, H, E].");
  m.def("linformer_attention_backward", backward, arg("q"), arg("k"), arg("v"), arg("E"), arg("F"), arg("dout"),
        py::kw_only(), arg("key_lengths") = py::none(), arg("scale") = py::none(),
        "(dq, dk, dv, dE, dF) of linformer_attention for dout [B, Nq, H, E]; dF is None when F is.");
}

}  // namespace

void bind_linformer(py::module_& m) {
  using py::arg;
  def_linformer(m, &linformer_forward, &linformer_backward);
  m.def("_linformer_attention_saving", &linformer_forward_saving, arg("q"), arg("k"), arg("v"), arg("E"),
        arg("F") = py::none(), py::kw_only(), arg("key_lengths") = py::none(), arg("scale") = py::none(),
        "linformer_attention, returning (out, lse) for _linformer_attention_backward_saved (linattn.torch).");
  m.def("_linformer_attention_backward_saved", &linformer_backward_saved, arg("q"), arg("k"), arg("v"), arg("E"),
        arg("F"), arg("out"), arg("lse"), arg("dout"), py::kw_only(), arg("key_lengths") = py::none(),
        arg("scale") = py::none(), "linformer_attention_backward with the forward's out and lse given.");
  py::module_ ref = m.attr("reference");
  def_linformer(ref, &reference_forward, &reference_backward);
}

}  // namespace linattn::python

#else

namespace linattn::python {
void bind_linformer(py::module_&) {}
}  // namespace linattn::python

#endif
