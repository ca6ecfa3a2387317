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
#include "reference_args.hpp"

namespace linattn::python {
namespace {

// E or F: [P, N_max] (one projection for all heads) or [H, P, N_max] (one per head), as a C-order
// array of T: strided ones are copied (they are small), other dtypes refused.
template <class T>
py::array_t<T> projection_arg(const py::object& x, const char* name) {
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
Projections<T> projections(const py::object& E, const py::object& F, std::span<const int64_t> key_lengths,
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
  auto like = [](const py::array_t<float>& x) {
    return py::array_t<float>(std::vector<py::ssize_t>(x.shape(), x.shape() + x.ndim()));
  };
  py::array_t<float> dE = like(p.E), dF = p.has_F ? like(p.F) : py::array_t<float>();
  const std::span<float> de(dE.mutable_data(), size_t(dE.size()));
  const std::span<float> df = p.has_F ? std::span<float>(dF.mutable_data(), size_t(dF.size())) : std::span<float>();
  {
    py::gil_scoped_release nogil;
    linformer_attention_backward(g.dq.view, g.dk.view, g.dv.view, de, df, dout.view, in.q.view, in.k.view, in.v.view,
                                 p.e(), p.f(), out, lse, p.options);
  }
  return py::make_tuple(g.dq.array, g.dk.array, g.dv.array, dE, p.has_F ? py::object(dF) : py::object(py::none()));
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
