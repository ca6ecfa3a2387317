// The DPLR delta rule (include/linattn/dplr.hpp, RWKV-7) on numpy arrays: the token-by-token forward and
// backward on float32, and the fp64 oracle's (linattn.reference) on float64, under the same Python names.
// linattn._dplr wraps them in flash-linear-attention's interface.
#include "linattn/dplr.hpp"

#include <pybind11/stl.h>

#include <optional>
#include <string>
#include <vector>

#include "arrays.hpp"
#include "bindings.hpp"
#include "family_args.hpp"
#include "linattn/reference.hpp"
#include "reference_args.hpp"

namespace linattn::python {
namespace {

constexpr const char* kKeyShape = "[B, T, H, K]";
constexpr const char* kValueShape = "[B, T, H, V]";

// The options of one call, and the vector its span points into.
struct DplrArgs {
  std::vector<int64_t> cu_seqlens;
  std::optional<float> scale;
  DplrOptions options() const { return {scale, cu_seqlens}; }
};
DplrArgs dplr_args(std::optional<float> scale, const py::object& cu_seqlens) {
  return {vector_arg<int64_t>(cu_seqlens, "cu_seqlens", "[N + 1]"), scale};
}

// The float32 inputs of one call: q, k, a, b, gk [B, T, H, K] and v [B, T, H, V].
struct Inputs32 {
  InputView<float> q, k, v, a, b, gk;
  std::array<int64_t, 4> state_extent(const DplrArgs& args) const {
    return {state_count(q.view.batch(), args.cu_seqlens), q.view.heads(), q.view.dim(), v.view.dim()};
  }
  std::array<int64_t, 4> out_extent() const {
    return {q.view.extent[0], q.view.extent[1], q.view.extent[2], v.view.extent[3]};
  }
};
Inputs32 inputs32(const py::object& q, const py::object& k, const py::object& v, const py::object& a,
                  const py::object& b, const py::object& gk) {
  return {input_view<float>(q, "q", 4, kKeyShape),   input_view<float>(k, "k", 4, kKeyShape),
          input_view<float>(v, "v", 4, kValueShape), input_view<float>(a, "a", 4, kKeyShape),
          input_view<float>(b, "b", 4, kKeyShape),   input_view<float>(gk, "gk", 4, kKeyShape)};
}

// The token-by-token forward; state: a C-order float32 [N, H, K, V] array updated in place.
py::array recurrent32(const py::object& q, const py::object& k, const py::object& v, const py::object& a,
                      const py::object& b, const py::object& gk, const py::object& state, std::optional<float> scale,
                      const py::object& cu_seqlens) {
  const Inputs32 in = inputs32(q, k, v, a, b, gk);
  const DplrArgs args = dplr_args(scale, cu_seqlens);
  py::array_t<float> S = state_arg<float>(state, "state", in.state_extent(args), true);
  OutputArray<float> out = output_array<float>(in.out_extent());
  {
    py::gil_scoped_release nogil;
    dplr_delta_rule_recurrent_forward(out.view, in.q.view, in.k.view, in.v.view, in.a.view, in.b.view, in.gk.view,
                                      mutable_span(S), args.options());
  }
  return out.array;
}

py::tuple forward32(const py::object& q, const py::object& k, const py::object& v, const py::object& a,
                    const py::object& b, const py::object& gk, std::optional<float> scale,
                    const py::object& initial_state, bool output_final_state, const py::object& cu_seqlens) {
  const Inputs32 in = inputs32(q, k, v, a, b, gk);
  const DplrArgs args = dplr_args(scale, cu_seqlens);
  const auto extent = in.state_extent(args);
  // The state the recurrence advances: a copy of initial_state (the caller's stays as it was), or zeros.
  py::array_t<float> state = zero_state(extent);
  if (!initial_state.is_none()) {
    const py::array_t<float> initial = state_arg<float>(initial_state, "initial_state", extent, false);
    std::copy_n(initial.data(), initial.size(), state.mutable_data());
  }
  OutputArray<float> out = output_array<float>(in.out_extent());
  {
    py::gil_scoped_release nogil;
    dplr_delta_rule_recurrent_forward(out.view, in.q.view, in.k.view, in.v.view, in.a.view, in.b.view, in.gk.view,
                                      mutable_span(state), args.options());
  }
  return py::make_tuple(out.array, output_final_state ? py::object(state) : py::none());
}

py::tuple backward32(const py::object& q, const py::object& k, const py::object& v, const py::object& a,
                     const py::object& b, const py::object& gk, const py::object& dout, const py::object& dfinal_state,
                     std::optional<float> scale, const py::object& initial_state, const py::object& cu_seqlens) {
  const Inputs32 in = inputs32(q, k, v, a, b, gk);
  const InputView<float> d = input_view<float>(dout, "dout", 4, kValueShape);
  const DplrArgs args = dplr_args(scale, cu_seqlens);
  const auto extent = in.state_extent(args);
  py::array_t<float> initial, dfinal, dinitial;
  if (!initial_state.is_none()) {
    initial = state_arg<float>(initial_state, "initial_state", extent, false);
    dinitial = zero_state(extent);
  }
  if (!dfinal_state.is_none()) dfinal = state_arg<float>(dfinal_state, "dfinal_state", extent, false);
  OutputArray<float> dq = output_array<float>(in.q.view.extent), dk = output_array<float>(in.k.view.extent),
                     dv = output_array<float>(in.v.view.extent), da = output_array<float>(in.a.view.extent),
                     db = output_array<float>(in.b.view.extent), dgk = output_array<float>(in.gk.view.extent);
  {
    py::gil_scoped_release nogil;
    dplr_delta_rule_recurrent_backward(dq.view, dk.view, dv.view, da.view, db.view, dgk.view, mutable_span(dinitial),
                                       d.view, span_of(dfinal), in.q.view, in.k.view, in.v.view, in.a.view, in.b.view,
                                       in.gk.view, args.options(), span_of(initial));
  }
  return py::make_tuple(dq.array, dk.array, dv.array, da.array, db.array, dgk.array,
                        initial_state.is_none() ? py::object(py::none()) : py::object(dinitial));
}

// The oracle's tensors: fp64 copies.
struct Inputs64 {
  reference::Tensor q, k, v, a, b, gk;
  std::array<int64_t, 4> state_extent(const DplrArgs& args) const {
    return {state_count(q.extent[0], args.cu_seqlens), q.extent[2], q.extent[3], v.extent[3]};
  }
};
Inputs64 inputs64(const py::object& q, const py::object& k, const py::object& v, const py::object& a,
                  const py::object& b, const py::object& gk) {
  return {tensor64(q, "q", kKeyShape), tensor64(k, "k", kKeyShape), tensor64(v, "v", kValueShape),
          tensor64(a, "a", kKeyShape), tensor64(b, "b", kKeyShape), tensor64(gk, "gk", kKeyShape)};
}

py::tuple forward64(const py::object& q, const py::object& k, const py::object& v, const py::object& a,
                    const py::object& b, const py::object& gk, std::optional<float> scale,
                    const py::object& initial_state, bool output_final_state, const py::object& cu_seqlens) {
  const Inputs64 in = inputs64(q, k, v, a, b, gk);
  const DplrArgs args = dplr_args(scale, cu_seqlens);
  const auto extent = in.state_extent(args);
  std::optional<std::vector<double>> initial;
  if (!initial_state.is_none()) initial = state64(initial_state, "initial_state", extent);
  reference::DecayedOutput r;
  {
    py::gil_scoped_release nogil;
    r = reference::dplr_delta_rule_forward(in.q, in.k, in.v, in.a, in.b, in.gk, args.options(),
                                           initial ? &*initial : nullptr);
  }
  return py::make_tuple(to_array(r.out), output_final_state ? py::object(array64(r.final_state, extent)) : py::none());
}

py::tuple backward64(const py::object& q, const py::object& k, const py::object& v, const py::object& a,
                     const py::object& b, const py::object& gk, const py::object& dout, const py::object& dfinal_state,
                     std::optional<float> scale, const py::object& initial_state, const py::object& cu_seqlens) {
  const Inputs64 in = inputs64(q, k, v, a, b, gk);
  const reference::Tensor d = tensor64(dout, "dout", kValueShape);
  const DplrArgs args = dplr_args(scale, cu_seqlens);
  const auto extent = in.state_extent(args);
  std::optional<std::vector<double>> initial, dfinal;
  if (!initial_state.is_none()) initial = state64(initial_state, "initial_state", extent);
  if (!dfinal_state.is_none()) dfinal = state64(dfinal_state, "dfinal_state", extent);
  reference::DplrGradients r;
  {
    py::gil_scoped_release nogil;
    r = reference::dplr_delta_rule_backward(d, dfinal ? &*dfinal : nullptr, in.q, in.k, in.v, in.a, in.b, in.gk,
                                            args.options(), initial ? &*initial : nullptr);
  }
  return py::make_tuple(to_array(r.dq), to_array(r.dk), to_array(r.dv), to_array(r.da), to_array(r.db), to_array(r.dgk),
                        initial ? py::object(array64(r.dinitial_state, extent)) : py::none());
}

// The forward and backward with the Python signatures shared by the fp32 module and the oracle.
template <class Forward, class Backward>
void def_dplr(py::module_& m, Forward forward, Backward backward, const char* dtype) {
  using py::arg;
  const std::string on = std::string(" (") + dtype + " arrays)";
  m.def("dplr_delta_rule", forward, arg("q"), arg("k"), arg("v"), arg("a"), arg("b"), arg("gk"), py::kw_only(),
        arg("scale") = py::none(), arg("initial_state") = py::none(), arg("output_final_state") = false,
        arg("cu_seqlens") = py::none(),
        ("(o [B, T, H, V], final_state [N, H, K, V] or None) of s_t = S_{t-1}ᵀ a_t, "
         "S_t = diag(exp(gk_t)) S_{t-1} + b_t s_tᵀ + k_t v_tᵀ, o_t = scale · S_tᵀ q_t, token by token; q, k, a, b, "
         "gk [B, T, H, K], scale default K^-1/2" +
         on)
            .c_str());
  m.def("dplr_delta_rule_backward", backward, arg("q"), arg("k"), arg("v"), arg("a"), arg("b"), arg("gk"), arg("dout"),
        arg("dfinal_state") = py::none(), py::kw_only(), arg("scale") = py::none(), arg("initial_state") = py::none(),
        arg("cu_seqlens") = py::none(),
        ("(dq, dk, dv, da, db, dgk, dinitial_state or None) of dplr_delta_rule for dout [B, T, H, V] and "
         "dfinal_state [N, H, K, V] (None: zero); dinitial_state is returned when initial_state is given" +
         on)
            .c_str());
}

}  // namespace

void bind_dplr(py::module_& m) {
  def_dplr(m, &forward32, &backward32, "float32");
  m.def("dplr_delta_rule_recurrent", &recurrent32, py::arg("q"), py::arg("k"), py::arg("v"), py::arg("a"), py::arg("b"),
        py::arg("gk"), py::arg("state"), py::kw_only(), py::arg("scale") = py::none(),
        py::arg("cu_seqlens") = py::none(),
        "o [B, T, H, V] of dplr_delta_rule token by token; state: a C-contiguous float32 [N, H, K, V] array "
        "holding the initial state, overwritten with the final state.");
  auto reference = py::reinterpret_borrow<py::module_>(m.attr("reference"));
  def_dplr(reference, &forward64, &backward64, "float64, the fp64 oracle, token by token");
}

}  // namespace linattn::python
