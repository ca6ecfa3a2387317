// The delta rule (include/linattn/delta.hpp) on numpy arrays: the chunked forward and backward and
// the token-by-token recurrence on float32, and the fp64 oracle's forward and backward
// (linattn.reference) on float64. linattn.fla wraps them in flash-linear-attention's interface.
#include "linattn/delta.hpp"

#include <pybind11/stl.h>

#include <optional>
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

DeltaGate gate_arg(const std::string& name) {
  for (DeltaGate g : {DeltaGate::none, DeltaGate::token, DeltaGate::key})
    if (delta_name(g) == name) return g;
  throw py::value_error("gate: expected \"delta_rule\", \"gated_delta_rule\" or \"kda\", got \"" + name + "\"");
}

// The options of one call, and the vector its span points into.
struct DeltaArgs {
  DeltaGate gate;
  std::vector<int64_t> cu_seqlens;
  std::optional<float> scale;
  bool qk_l2norm;
  int64_t chunk_size;
  DeltaRuleOptions options() const { return {gate, scale, qk_l2norm, cu_seqlens, chunk_size}; }
};
DeltaArgs delta_args(const std::string& gate, std::optional<float> scale, bool qk_l2norm, const py::object& cu_seqlens,
                     int64_t chunk_size) {
  return {gate_arg(gate), vector_arg<int64_t>(cu_seqlens, "cu_seqlens", "[N + 1]"), scale, qk_l2norm, chunk_size};
}

constexpr const char* kBetaShape = "[B, T, H] or [B, T, H, 1]";
constexpr const char* kGateShape = "[B, T, H] or [B, T, H, 1] (gated_delta_rule), [B, T, H, K] (kda)";

// The float32 tensors of one call: beta and g may come without their unit last axis.
struct Inputs32 {
  InputView<float> q, k, v;
  TrailingView<float> beta, g;
  std::array<int64_t, 4> state_extent(const DeltaArgs& a) const {
    return {state_count(q.view.batch(), a.cu_seqlens), q.view.heads(), q.view.dim(), v.view.dim()};
  }
  std::array<int64_t, 4> out_extent() const {
    return {q.view.extent[0], q.view.extent[1], q.view.extent[2], v.view.extent[3]};
  }
};
Inputs32 inputs32(const py::object& q, const py::object& k, const py::object& v, const py::object& beta,
                  const py::object& g) {
  if (beta.is_none()) throw py::type_error("beta: expected a float32 array [B, T, H], got None");
  return {input_view<float>(q, "q", 4, "[B, T, H, K]"), input_view<float>(k, "k", 4, "[B, T, H, K]"),
          input_view<float>(v, "v", 4, "[B, T, H, V]"), trailing_arg<float>(beta, "beta", kBetaShape),
          trailing_arg<float>(g, "g", kGateShape)};
}

py::tuple forward32(const py::object& q, const py::object& k, const py::object& v, const py::object& beta,
                    const py::object& g, const std::string& gate, std::optional<float> scale,
                    const py::object& initial_state, bool output_final_state, bool use_qk_l2norm,
                    const py::object& cu_seqlens, int64_t chunk_size) {
  const Inputs32 in = inputs32(q, k, v, beta, g);
  const DeltaArgs a = delta_args(gate, scale, use_qk_l2norm, cu_seqlens, chunk_size);
  const auto extent = in.state_extent(a);
  check_chunked_memory(ChunkedFamily::delta, in.q.view, in.v.view, extent, chunk_size, output_final_state, false);
  py::array_t<float> initial, final_state;
  if (!initial_state.is_none()) initial = state_arg<float>(initial_state, "initial_state", extent, false);
  if (output_final_state) final_state = zero_state(extent);
  OutputArray<float> out = output_array<float>(in.out_extent());
  {
    py::gil_scoped_release nogil;
    delta_rule_forward(out.view, in.q.view, in.k.view, in.v.view, in.beta.in.view, in.g.in.view, a.options(),
                       span_of(initial), mutable_span(final_state));
  }
  return py::make_tuple(out.array, output_final_state ? py::object(final_state) : py::none());
}

py::tuple backward32(const py::object& q, const py::object& k, const py::object& v, const py::object& beta,
                     const py::object& g, const py::object& dout, const py::object& dfinal_state,
                     const std::string& gate, std::optional<float> scale, const py::object& initial_state,
                     bool use_qk_l2norm, const py::object& cu_seqlens, int64_t chunk_size) {
  const Inputs32 in = inputs32(q, k, v, beta, g);
  const InputView<float> d = input_view<float>(dout, "dout", 4, "[B, T, H, V]");
  const DeltaArgs a = delta_args(gate, scale, use_qk_l2norm, cu_seqlens, chunk_size);
  const auto extent = in.state_extent(a);
  check_chunked_memory(ChunkedFamily::delta, in.q.view, in.v.view, extent, chunk_size, !initial_state.is_none(), true);
  py::array_t<float> initial, dfinal, dinitial;
  if (!initial_state.is_none()) {
    initial = state_arg<float>(initial_state, "initial_state", extent, false);
    dinitial = zero_state(extent);
  }
  if (!dfinal_state.is_none()) dfinal = state_arg<float>(dfinal_state, "dfinal_state", extent, false);
  OutputArray<float> dq = output_array<float>(in.q.view.extent), dk = output_array<float>(in.k.view.extent),
                     dv = output_array<float>(in.v.view.extent), dbeta = output_array<float>(in.beta.in.view.extent),
                     dg;
  if (in.g.given) dg = output_array<float>(in.g.in.view.extent);
  {
    py::gil_scoped_release nogil;
    delta_rule_backward(dq.view, dk.view, dv.view, dbeta.view, dg.view, mutable_span(dinitial), d.view, span_of(dfinal),
                        in.q.view, in.k.view, in.v.view, in.beta.in.view, in.g.in.view, a.options(), span_of(initial));
  }
  return py::make_tuple(dq.array, dk.array, dv.array, trailing_result(dbeta.array, in.beta),
                        trailing_result(dg.array, in.g),
                        initial_state.is_none() ? py::object(py::none()) : py::object(dinitial));
}

py::array recurrent32(const py::object& q, const py::object& k, const py::object& v, const py::object& beta,
                      const py::object& g, const py::object& state, const std::string& gate, std::optional<float> scale,
                      bool use_qk_l2norm, const py::object& cu_seqlens) {
  const Inputs32 in = inputs32(q, k, v, beta, g);
  const DeltaArgs a = delta_args(gate, scale, use_qk_l2norm, cu_seqlens, 64);
  py::array_t<float> S = state_arg<float>(state, "state", in.state_extent(a), true);
  OutputArray<float> out = output_array<float>(in.out_extent());
  {
    py::gil_scoped_release nogil;
    delta_rule_recurrent_forward(out.view, in.q.view, in.k.view, in.v.view, in.beta.in.view, in.g.in.view,
                                 mutable_span(S), a.options());
  }
  return out.array;
}

// delta_rule_step's recurrence for one token: q, k [B, H, K], v [B, H, V], beta [B, H] or [B, H, 1], g [B, H]
// or [B, H, 1] (gated_delta_rule), [B, H, K] (kda), on the caller's state [B, H, K, V], advanced in place
// (the token-by-token driver on the array itself, as linattn.decayed_step).
py::array step32(const py::object& q, const py::object& k, const py::object& v, const py::object& beta,
                 const py::object& g, const py::object& state, const std::string& gate, std::optional<float> scale,
                 bool use_qk_l2norm) {
  if (beta.is_none()) throw py::type_error("beta: expected a float32 array [B, H], got None");
  const InputView<float> Q = input_view<float>(q, "q", 3, "[B, H, K]"), K = input_view<float>(k, "k", 3, "[B, H, K]"),
                         V = input_view<float>(v, "v", 3, "[B, H, V]"),
                         Beta = token_arg<float>(beta, "beta", "[B, H] or [B, H, 1]"),
                         G = token_arg<float>(g, "g", "[B, H] or [B, H, 1] (gated_delta_rule), [B, H, K] (kda)");
  const DeltaArgs a = delta_args(gate, scale, use_qk_l2norm, py::none(), 64);
  const std::array<int64_t, 4> extent{Q.view.batch(), Q.view.heads(), Q.view.dim(), V.view.dim()};
  py::array_t<float> S = state_arg<float>(state, "state", extent, true);
  OutputArray<float> out = output_array<float>({Q.view.batch(), 1, Q.view.heads(), V.view.dim()}, false);
  {
    py::gil_scoped_release nogil;
    delta_rule_recurrent_forward(out.view, Q.view, K.view, V.view, Beta.view, G.view, mutable_span(S), a.options());
  }
  return out.array;
}

// The oracle's tensors: fp64 copies (beta and g with their unit axis where they came without it).
struct Inputs64 {
  reference::Tensor q, k, v, beta, g;
  TrailingView<double> beta_in, g_in;  // how beta and g were given
  const reference::Tensor* g_ptr() const { return g_in.given ? &g : nullptr; }
  std::array<int64_t, 4> state_extent(const DeltaArgs& a) const {
    return {state_count(q.extent[0], a.cu_seqlens), q.extent[2], q.extent[3], v.extent[3]};
  }
};
Inputs64 inputs64(const py::object& q, const py::object& k, const py::object& v, const py::object& beta,
                  const py::object& g) {
  if (beta.is_none()) throw py::type_error("beta: expected a float64 array [B, T, H], got None");
  Inputs64 in{tensor64(q, "q", "[B, T, H, K]"),
              tensor64(k, "k", "[B, T, H, K]"),
              tensor64(v, "v", "[B, T, H, V]"),
              {},
              {},
              trailing_arg<double>(beta, "beta", kBetaShape),
              trailing_arg<double>(g, "g", kGateShape)};
  in.beta = tensor64(in.beta_in.in.keep, "beta", kBetaShape);
  if (in.g_in.given) in.g = tensor64(in.g_in.in.keep, "g", kGateShape);
  return in;
}

py::tuple forward64(const py::object& q, const py::object& k, const py::object& v, const py::object& beta,
                    const py::object& g, const std::string& gate, std::optional<float> scale,
                    const py::object& initial_state, bool output_final_state, bool use_qk_l2norm,
                    const py::object& cu_seqlens, int64_t chunk_size) {
  const Inputs64 in = inputs64(q, k, v, beta, g);
  const DeltaArgs a = delta_args(gate, scale, use_qk_l2norm, cu_seqlens, chunk_size);
  const auto extent = in.state_extent(a);
  std::optional<std::vector<double>> initial;
  if (!initial_state.is_none()) initial = state64(initial_state, "initial_state", extent);
  reference::DecayedOutput r;
  {
    py::gil_scoped_release nogil;
    r = reference::delta_rule_forward(in.q, in.k, in.v, in.beta, in.g_ptr(), a.options(),
                                      initial ? &*initial : nullptr);
  }
  return py::make_tuple(to_array(r.out), output_final_state ? py::object(array64(r.final_state, extent)) : py::none());
}

py::tuple backward64(const py::object& q, const py::object& k, const py::object& v, const py::object& beta,
                     const py::object& g, const py::object& dout, const py::object& dfinal_state,
                     const std::string& gate, std::optional<float> scale, const py::object& initial_state,
                     bool use_qk_l2norm, const py::object& cu_seqlens, int64_t chunk_size) {
  const Inputs64 in = inputs64(q, k, v, beta, g);
  const reference::Tensor d = tensor64(dout, "dout", "[B, T, H, V]");
  const DeltaArgs a = delta_args(gate, scale, use_qk_l2norm, cu_seqlens, chunk_size);
  const auto extent = in.state_extent(a);
  std::optional<std::vector<double>> initial, dfinal;
  if (!initial_state.is_none()) initial = state64(initial_state, "initial_state", extent);
  if (!dfinal_state.is_none()) dfinal = state64(dfinal_state, "dfinal_state", extent);
  reference::DeltaGradients r;
  {
    py::gil_scoped_release nogil;
    r = reference::delta_rule_backward(d, dfinal ? &*dfinal : nullptr, in.q, in.k, in.v, in.beta, in.g_ptr(),
                                       a.options(), initial ? &*initial : nullptr);
  }
  return py::make_tuple(to_array(r.dq), to_array(r.dk), to_array(r.dv), trailing_result(to_array(r.dbeta), in.beta_in),
                        in.g_in.given ? trailing_result(to_array(r.dg), in.g_in) : py::object(py::none()),
                        initial ? py::object(array64(r.dinitial_state, extent)) : py::none());
}

// The forward and backward with the Python signatures shared by the fp32 module and the oracle.
template <class Forward, class Backward>
void def_delta(py::module_& m, Forward forward, Backward backward, const char* dtype) {
  using py::arg;
  const std::string on = std::string(" (") + dtype + " arrays)";
  m.def("delta_rule", forward, arg("q"), arg("k"), arg("v"), arg("beta"), arg("g") = py::none(), py::kw_only(),
        arg("gate"), arg("scale") = py::none(), arg("initial_state") = py::none(), arg("output_final_state") = false,
        arg("use_qk_l2norm") = false, arg("cu_seqlens") = py::none(), arg("chunk_size") = 64,
        ("(o [B, T, H, V], final_state [N, H, K, V] or None) of P_t = D_t S_{t-1}, "
         "S_t = P_t + beta_t k_t (v_t - P_tᵀ k_t)ᵀ, o_t = scale · S_tᵀ q_t; gate: \"delta_rule\" (D_t = I, g None), "
         "\"gated_delta_rule\" (exp(g_t) I, g [B, T, H]), \"kda\" (diag(exp g_t), g [B, T, H, K]); beta [B, T, H]" +
         on)
            .c_str());
  m.def("delta_rule_backward", backward, arg("q"), arg("k"), arg("v"), arg("beta"), arg("g"), arg("dout"),
        arg("dfinal_state") = py::none(), py::kw_only(), arg("gate"), arg("scale") = py::none(),
        arg("initial_state") = py::none(), arg("use_qk_l2norm") = false, arg("cu_seqlens") = py::none(),
        arg("chunk_size") = 64,
        ("(dq, dk, dv, dbeta, dg or None, dinitial_state or None) of delta_rule for dout [B, T, H, V] and "
         "dfinal_state [N, H, K, V] (None: zero); dinitial_state is returned when initial_state is given" +
         on)
            .c_str());
}

}  // namespace

void bind_delta(py::module_& m) {
  def_delta(m, &forward32, &backward32, "float32");
  m.def("delta_rule_recurrent", &recurrent32, py::arg("q"), py::arg("k"), py::arg("v"), py::arg("beta"), py::arg("g"),
        py::arg("state"), py::kw_only(), py::arg("gate"), py::arg("scale") = py::none(),
        py::arg("use_qk_l2norm") = false, py::arg("cu_seqlens") = py::none(),
        "o [B, T, H, V] of delta_rule token by token; state: a C-contiguous float32 [N, H, K, V] array holding "
        "the initial state, overwritten with the final state.");
  m.def("delta_rule_step", &step32, py::arg("q"), py::arg("k"), py::arg("v"), py::arg("beta"), py::arg("g"),
        py::arg("state"), py::kw_only(), py::arg("gate"), py::arg("scale") = py::none(),
        py::arg("use_qk_l2norm") = false,
        "o [B, H, V] of one decoding token (delta_rule_step): q, k [B, H, K], v [B, H, V], beta [B, H] or "
        "[B, H, 1], g [B, H] or [B, H, 1] (gated_delta_rule), [B, H, K] (kda), None for delta_rule; state: a "
        "C-contiguous float32 [B, H, K, V] array, advanced in place.");
  auto reference = py::reinterpret_borrow<py::module_>(m.attr("reference"));
  def_delta(reference, &forward64, &backward64, "float64, the fp64 oracle, token by token");
}

}  // namespace linattn::python
