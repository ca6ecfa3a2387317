// Decayed linear attention (include/linattn/decay.hpp) on numpy arrays: the chunked forward and
// backward and the token-by-token recurrence on float32, and the fp64 oracle's forward and backward
// (linattn.reference) on float64. linattn.fla wraps them in flash-linear-attention's interface.
#include "linattn/decay.hpp"

#include <pybind11/stl.h>

#include <algorithm>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "arrays.hpp"
#include "bindings.hpp"
#include "family_args.hpp"
#include "linattn/reference.hpp"
#include "memory_estimates.hpp"
#include "reference_args.hpp"

namespace linattn::python {
namespace {

Decay decay_arg(const std::string& name) {
  for (Decay d : {Decay::none, Decay::retention, Decay::head, Decay::token, Decay::key})
    if (decay_name(d) == name) return d;
  throw py::value_error("decay: expected \"linear\", \"retention\", \"lightning\", \"simple_gla\" or \"gla\", got \"" +
                        name + "\"");
}

// The options of one call, and the vectors their spans point into.
struct DecayArgs {
  Decay decay;
  std::vector<float> g_gamma;
  std::vector<int64_t> cu_seqlens;
  std::optional<float> scale;
  int64_t chunk_size;
  DecayedAttentionOptions options() const { return {decay, scale, g_gamma, cu_seqlens, chunk_size}; }
};
DecayArgs decay_args(const std::string& decay, const py::object& g_gamma, std::optional<float> scale,
                     const py::object& cu_seqlens, int64_t chunk_size) {
  return {decay_arg(decay), vector_arg<float>(g_gamma, "g_gamma", "[H]"),
          vector_arg<int64_t>(cu_seqlens, "cu_seqlens", "[N + 1]"), scale, chunk_size};
}

// The [N, H, K, V] extent of the states.
std::array<int64_t, 4> state_extent(const DecayArgs& a, ConstTensorView q, ConstTensorView v) {
  return {state_count(q.batch(), a.cu_seqlens), q.heads(), q.dim(), v.dim()};
}

// g as a [B, T, H, C] view: 4 dims as given, or [B, T, H] (simple GLA's layout) as [B, T, H, 1].
template <class T>
using GateView = TrailingView<T>;
template <class T>
GateView<T> gate_arg(const py::object& g) {
  return trailing_arg<T>(g, "g", "[B, T, H] or [B, T, H, 1] (simple_gla), [B, T, H, K] (gla)");
}
template <class T>
py::object gate_result(py::array a, const GateView<T>& gate) {
  return trailing_result(a, gate);
}

struct Inputs32 {
  InputView<float> q, k, v;
  GateView<float> g;
};
Inputs32 inputs32(const py::object& q, const py::object& k, const py::object& v, const py::object& g) {
  return {input_view<float>(q, "q", 4, "[B, T, H, K]"), input_view<float>(k, "k", 4, "[B, T, H, K]"),
          input_view<float>(v, "v", 4, "[B, T, H, V]"), gate_arg<float>(g)};
}
std::array<int64_t, 4> out_extent(const InputView<float>& q, const InputView<float>& v) {
  return {q.view.extent[0], q.view.extent[1], q.view.extent[2], v.view.extent[3]};
}

py::tuple forward32(const py::object& q, const py::object& k, const py::object& v, const py::object& g,
                    const std::string& decay, const py::object& g_gamma, std::optional<float> scale,
                    const py::object& initial_state, bool output_final_state, const py::object& cu_seqlens,
                    int64_t chunk_size) {
  const Inputs32 in = inputs32(q, k, v, g);
  const DecayArgs a = decay_args(decay, g_gamma, scale, cu_seqlens, chunk_size);
  const auto extent = state_extent(a, in.q.view, in.v.view);
  check_chunked_memory(ChunkedFamily::decayed, in.q.view, in.v.view, extent, chunk_size, output_final_state, false);
  py::array_t<float> initial, final_state;
  if (!initial_state.is_none()) initial = state_arg<float>(initial_state, "initial_state", extent, false);
  if (output_final_state) final_state = zero_state(extent);
  OutputArray<float> out = output_array<float>(out_extent(in.q, in.v));
  {
    py::gil_scoped_release nogil;
    decayed_attention_forward(out.view, in.q.view, in.k.view, in.v.view, in.g.in.view, a.options(), span_of(initial),
                              mutable_span(final_state));
  }
  return py::make_tuple(out.array, output_final_state ? py::object(final_state) : py::none());
}

py::tuple backward32(const py::object& q, const py::object& k, const py::object& v, const py::object& g,
                     const py::object& dout, const py::object& dfinal_state, const std::string& decay,
                     const py::object& g_gamma, std::optional<float> scale, const py::object& initial_state,
                     const py::object& cu_seqlens, int64_t chunk_size) {
  const Inputs32 in = inputs32(q, k, v, g);
  const InputView<float> d = input_view<float>(dout, "dout", 4, "[B, T, H, V]");
  const DecayArgs a = decay_args(decay, g_gamma, scale, cu_seqlens, chunk_size);
  const auto extent = state_extent(a, in.q.view, in.v.view);
  check_chunked_memory(ChunkedFamily::decayed, in.q.view, in.v.view, extent, chunk_size, !initial_state.is_none(),
                       true);
  py::array_t<float> initial, dfinal, dinitial;
  if (!initial_state.is_none()) {
    initial = state_arg<float>(initial_state, "initial_state", extent, false);
    dinitial = zero_state(extent);
  }
  if (!dfinal_state.is_none()) dfinal = state_arg<float>(dfinal_state, "dfinal_state", extent, false);
  OutputArray<float> dq = output_array<float>(in.q.view.extent), dk = output_array<float>(in.k.view.extent),
                     dv = output_array<float>(in.v.view.extent), dg;
  if (in.g.given) dg = output_array<float>(in.g.in.view.extent);
  {
    py::gil_scoped_release nogil;
    decayed_attention_backward(dq.view, dk.view, dv.view, dg.view, mutable_span(dinitial), d.view, span_of(dfinal),
                               in.q.view, in.k.view, in.v.view, in.g.in.view, a.options(), span_of(initial));
  }
  return py::make_tuple(dq.array, dk.array, dv.array, gate_result(dg.array, in.g),
                        initial_state.is_none() ? py::object(py::none()) : py::object(dinitial));
}

py::array recurrent32(const py::object& q, const py::object& k, const py::object& v, const py::object& g,
                      const py::object& state, const std::string& decay, const py::object& g_gamma,
                      std::optional<float> scale, const py::object& cu_seqlens) {
  const Inputs32 in = inputs32(q, k, v, g);
  const DecayArgs a = decay_args(decay, g_gamma, scale, cu_seqlens, 64);
  py::array_t<float> S = state_arg<float>(state, "state", state_extent(a, in.q.view, in.v.view), true);
  OutputArray<float> out = output_array<float>(out_extent(in.q, in.v));
  {
    py::gil_scoped_release nogil;
    decayed_recurrent_forward(out.view, in.q.view, in.k.view, in.v.view, in.g.in.view,
                              std::span<float>(S.mutable_data(), size_t(S.size())), a.options());
  }
  return out.array;
}

// decayed_step's recurrence for one token: q, k [B, H, K], v [B, H, V], g [B, H] / [B, H, 1] (simple_gla)
// or [B, H, K] (gla), on the caller's state [B, H, K, V], advanced in place (the token-by-token driver
// on the array itself: a RecurrentState would cost a copy of the state in and out of every step).
py::array step32(const py::object& q, const py::object& k, const py::object& v, const py::object& g,
                 const py::object& state, const std::string& decay, const py::object& g_gamma,
                 std::optional<float> scale) {
  const InputView<float> Q = input_view<float>(q, "q", 3, "[B, H, K]"), K = input_view<float>(k, "k", 3, "[B, H, K]"),
                         V = input_view<float>(v, "v", 3, "[B, H, V]"),
                         G = token_arg<float>(g, "g", "[B, H] or [B, H, 1] (simple_gla), [B, H, K] (gla)");
  const DecayArgs a = decay_args(decay, g_gamma, scale, py::none(), 64);
  py::array_t<float> S = state_arg<float>(state, "state", state_extent(a, Q.view, V.view), true);
  OutputArray<float> out = output_array<float>(out_extent(Q, V), false);
  {
    py::gil_scoped_release nogil;
    decayed_recurrent_forward(out.view, Q.view, K.view, V.view, G.view, mutable_span(S), a.options());
  }
  return out.array;
}

struct Inputs64 {
  reference::Tensor q, k, v, g;
  GateView<double> gate;  // how g was given (its data is copied into g)
  const reference::Tensor* g_ptr() const { return gate.given ? &g : nullptr; }
  std::array<int64_t, 4> state_extent(const DecayArgs& a) const {
    return {state_count(q.extent[0], a.cu_seqlens), q.extent[2], q.extent[3], v.extent[3]};
  }
};
Inputs64 inputs64(const py::object& q, const py::object& k, const py::object& v, const py::object& g) {
  Inputs64 in{tensor64(q, "q", "[B, T, H, K]"),
              tensor64(k, "k", "[B, T, H, K]"),
              tensor64(v, "v", "[B, T, H, V]"),
              {},
              gate_arg<double>(g)};
  if (in.gate.given) in.g = tensor64(in.gate.in.keep, "g", "[B, T, H, 1] or [B, T, H, K]");
  return in;
}

py::tuple forward64(const py::object& q, const py::object& k, const py::object& v, const py::object& g,
                    const std::string& decay, const py::object& g_gamma, std::optional<float> scale,
                    const py::object& initial_state, bool output_final_state, const py::object& cu_seqlens,
                    int64_t chunk_size) {
  const Inputs64 in = inputs64(q, k, v, g);
  const DecayArgs a = decay_args(decay, g_gamma, scale, cu_seqlens, chunk_size);
  const auto extent = in.state_extent(a);
  std::optional<std::vector<double>> initial;
  if (!initial_state.is_none()) initial = state64(initial_state, "initial_state", extent);
  reference::DecayedOutput r;
  {
    py::gil_scoped_release nogil;
    r = reference::decayed_attention_forward(in.q, in.k, in.v, in.g_ptr(), a.options(), initial ? &*initial : nullptr);
  }
  return py::make_tuple(to_array(r.out), output_final_state ? py::object(array64(r.final_state, extent)) : py::none());
}

py::tuple backward64(const py::object& q, const py::object& k, const py::object& v, const py::object& g,
                     const py::object& dout, const py::object& dfinal_state, const std::string& decay,
                     const py::object& g_gamma, std::optional<float> scale, const py::object& initial_state,
                     const py::object& cu_seqlens, int64_t chunk_size) {
  const Inputs64 in = inputs64(q, k, v, g);
  const reference::Tensor d = tensor64(dout, "dout", "[B, T, H, V]");
  const DecayArgs a = decay_args(decay, g_gamma, scale, cu_seqlens, chunk_size);
  const auto extent = in.state_extent(a);
  std::optional<std::vector<double>> initial, dfinal;
  if (!initial_state.is_none()) initial = state64(initial_state, "initial_state", extent);
  if (!dfinal_state.is_none()) dfinal = state64(dfinal_state, "dfinal_state", extent);
  reference::DecayedGradients r;
  {
    py::gil_scoped_release nogil;
    r = reference::decayed_attention_backward(d, dfinal ? &*dfinal : nullptr, in.q, in.k, in.v, in.g_ptr(), a.options(),
                                              initial ? &*initial : nullptr);
  }
  return py::make_tuple(to_array(r.dq), to_array(r.dk), to_array(r.dv),
                        in.gate.given ? gate_result(to_array(r.dg), in.gate) : py::object(py::none()),
                        initial ? py::object(array64(r.dinitial_state, extent)) : py::none());
}

// The forward and backward with the Python signatures shared by the fp32 module and the oracle.
template <class Forward, class Backward>
void def_decayed(py::module_& m, Forward forward, Backward backward, const char* dtype) {
  using py::arg;
  const std::string on = std::string(" (") + dtype + " arrays)";
  m.def("decayed_attention", forward, arg("q"), arg("k"), arg("v"), arg("g") = py::none(), py::kw_only(), arg("decay"),
        arg("g_gamma") = py::none(), arg("scale") = py::none(), arg("initial_state") = py::none(),
        arg("output_final_state") = false, arg("cu_seqlens") = py::none(), arg("chunk_size") = 64,
        ("(o [B, T, H, V], final_state [N, H, K, V] or None) of S_t = diag(exp g_t) S_{t-1} + k_t v_tᵀ, "
         "o_t = scale · S_tᵀ q_t; decay: \"linear\", \"retention\", \"lightning\" (g_gamma [H]), \"simple_gla\" "
         "(g [B, T, H] or [B, T, H, 1]), \"gla\" (g [B, T, H, K])" +
         on)
            .c_str());
  m.def("decayed_attention_backward", backward, arg("q"), arg("k"), arg("v"), arg("g"), arg("dout"),
        arg("dfinal_state") = py::none(), py::kw_only(), arg("decay"), arg("g_gamma") = py::none(),
        arg("scale") = py::none(), arg("initial_state") = py::none(), arg("cu_seqlens") = py::none(),
        arg("chunk_size") = 64,
        ("(dq, dk, dv, dg or None, dinitial_state or None) of decayed_attention for dout [B, T, H, V] and "
         "dfinal_state [N, H, K, V] (None: zero); dinitial_state is returned when initial_state is given" +
         on)
            .c_str());
}

}  // namespace

void bind_decay(py::module_& m) {
  def_decayed(m, &forward32, &backward32, "float32");
  m.def("decayed_recurrent", &recurrent32, py::arg("q"), py::arg("k"), py::arg("v"), py::arg("g"), py::arg("state"),
        py::kw_only(), py::arg("decay"), py::arg("g_gamma") = py::none(), py::arg("scale") = py::none(),
        py::arg("cu_seqlens") = py::none(),
        "o [B, T, H, V] of decayed_attention token by token; state: a C-contiguous float32 [N, H, K, V] array "
        "holding the initial state, overwritten with the final state.");
  m.def("decayed_step", &step32, py::arg("q"), py::arg("k"), py::arg("v"), py::arg("g"), py::arg("state"),
        py::kw_only(), py::arg("decay"), py::arg("g_gamma") = py::none(), py::arg("scale") = py::none(),
        "o [B, H, V] of one decoding token (decayed_step): q, k [B, H, K], v [B, H, V], g [B, H] or [B, H, 1] "
        "(simple_gla), [B, H, K] (gla), None otherwise; state: a C-contiguous float32 [B, H, K, V] array, "
        "advanced in place.");
  auto reference = py::reinterpret_borrow<py::module_>(m.attr("reference"));
  def_decayed(reference, &forward64, &backward64, "float64, the fp64 oracle, token by token");
}

}  // namespace linattn::python
