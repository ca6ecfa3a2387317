// The delta rule (include/linattn/delta.hpp) on numpy arrays: the chunked forward and backward, the
// token-by-token recurrence and the decode step on float32 and on bf16/f16 bits (_linattn.half), and the
// fp64 oracle's forward and backward (linattn.reference) on float64. linattn.fla wraps them in
// flash-linear-attention's interface.
#include "linattn/delta.hpp"

#include <pybind11/stl.h>

#include <optional>
#include <string>
#include <vector>

#include "bindings.hpp"
#include "family_args.hpp"
#include "linattn/half_attention.hpp"
#include "recurrence_bindings.hpp"

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

constexpr const char* kGateShape = "[B, T, H] or [B, T, H, 1] (gated_delta_rule), [B, T, H, K] (kda)";

// delta_rule's tensors and calls, for the shared binding (recurrence_bindings.hpp): beta and g may come
// without their unit last axis.
struct DeltaBinding {
  static constexpr std::array<TensorSpec, 5> tensors{
      {kQuery,
       kKey,
       kValue,
       {"beta", "[B, T, H] or [B, T, H, 1]", "[B, H] or [B, H, 1]", TensorKind::required},
       {"g", kGateShape, "[B, H] or [B, H, 1] (gated_delta_rule), [B, H, K] (kda)", TensorKind::optional}}};
  static constexpr bool chunked = true;
  static constexpr ChunkedFamily memory = ChunkedFamily::delta;
  using Args = DeltaArgs;

  // E: float, or bf16 / f16 (the half-precision overloads, include/linattn/half_attention.hpp).
  template <class E>
  static void forward(View4<E> out, const Inputs<E, 5>& in, const Args& a, std::span<const float> initial,
                      std::span<float> final_state) {
    delta_rule_forward(out, in.view(0), in.view(1), in.view(2), in.view(3), in.gate(4), a.options(), initial,
                       final_state);
  }
  template <class E>
  static void backward(const GradViews<E, 5>& d, std::span<float> dinitial, View4<const E> dout,
                       std::span<const float> dfinal, const Inputs<E, 5>& in, const Args& a,
                       std::span<const float> initial) {
    delta_rule_backward(d[0], d[1], d[2], d[3], d.gate(4), dinitial, dout, dfinal, in.view(0), in.view(1), in.view(2),
                        in.view(3), in.gate(4), a.options(), initial);
  }
  template <class E>
  static void recurrent(View4<E> out, const Inputs<E, 5>& in, std::span<float> state, const Args& a) {
    delta_rule_recurrent_forward(out, in.view(0), in.view(1), in.view(2), in.view(3), in.view(4), state, a.options());
  }
  static void recurrent_from(TensorView out, const Inputs<float, 5>& in, std::span<const float> initial,
                             std::span<float> final_state, const Args& a) {
    delta_rule_recurrent_forward(out, in.view(0), in.view(1), in.view(2), in.view(3), in.view(4), initial, final_state,
                                 a.options());
  }
  static reference::DecayedOutput forward64(const Inputs<double, 5>& in, const Args& a,
                                            const std::vector<double>* initial) {
    return reference::delta_rule_forward(in.fp64[0], in.fp64[1], in.fp64[2], in.fp64[3], in.ptr(4), a.options(),
                                         initial);
  }
  static Gradients64<5> backward64(const reference::Tensor& dout, const std::vector<double>* dfinal,
                                   const Inputs<double, 5>& in, const Args& a, const std::vector<double>* initial) {
    reference::DeltaGradients r = reference::delta_rule_backward(dout, dfinal, in.fp64[0], in.fp64[1], in.fp64[2],
                                                                 in.fp64[3], in.ptr(4), a.options(), initial);
    return {{std::move(r.dq), std::move(r.dk), std::move(r.dv), std::move(r.dbeta), std::move(r.dg)},
            std::move(r.dinitial_state)};
  }
};

// delta_rule_recurrent and delta_rule_step on P = float arrays or half bits.
template <class P>
void def_delta_tokens(py::module_& m, const char* dtype_text) {
  using py::arg;
  m.def(
      "delta_rule_recurrent",
      [](const py::object& q, const py::object& k, const py::object& v, const py::object& beta, const py::object& g,
         const py::object& state, const std::string& gate, const std::string& dtype, std::optional<float> scale,
         bool use_qk_l2norm, const py::object& cu_seqlens) {
        return by_element<P>(dtype, [&]<class E>() {
          return recurrence_tokens<DeltaBinding, E>({q, k, v, beta, g}, state,
                                                    delta_args(gate, scale, use_qk_l2norm, cu_seqlens, 64), false);
        });
      },
      arg("q"), arg("k"), arg("v"), arg("beta"), arg("g"), arg("state"), py::kw_only(), arg("gate"), dtype_arg<P>(),
      arg("scale") = py::none(), arg("use_qk_l2norm") = false, arg("cu_seqlens") = py::none(),
      with_dtype("o [B, T, H, V] of delta_rule token by token; state: a C-contiguous float32 [N, H, K, V] array "
                 "holding the initial state, overwritten with the final state",
                 dtype_text)
          .c_str());
  // One token on the caller's state, advanced in place (as decayed_step).
  m.def(
      "delta_rule_step",
      [](const py::object& q, const py::object& k, const py::object& v, const py::object& beta, const py::object& g,
         const py::object& state, const std::string& gate, const std::string& dtype, std::optional<float> scale,
         bool use_qk_l2norm) {
        return by_element<P>(dtype, [&]<class E>() {
          return recurrence_tokens<DeltaBinding, E>({q, k, v, beta, g}, state,
                                                    delta_args(gate, scale, use_qk_l2norm, py::none(), 64), true);
        });
      },
      arg("q"), arg("k"), arg("v"), arg("beta"), arg("g"), arg("state"), py::kw_only(), arg("gate"), dtype_arg<P>(),
      arg("scale") = py::none(), arg("use_qk_l2norm") = false,
      with_dtype("o [B, H, V] of one decoding token (delta_rule_step): q, k [B, H, K], v [B, H, V], beta [B, H] or "
                 "[B, H, 1], g [B, H] or [B, H, 1] (gated_delta_rule), [B, H, K] (kda), None for delta_rule; state: "
                 "a C-contiguous float32 [B, H, K, V] array, advanced in place",
                 dtype_text)
          .c_str());
}

// delta_rule and its backward on P = float arrays, half bits (P = HalfBits) or the oracle's P = double; the
// token-by-token recurrence and the decode step on float and half.
template <class P>
void def_delta(py::module_& m, const char* dtype_text) {
  using py::arg;
  m.def(
      "delta_rule",
      [](const py::object& q, const py::object& k, const py::object& v, const py::object& beta, const py::object& g,
         const std::string& gate, const std::string& dtype, std::optional<float> scale, const py::object& initial_state,
         bool output_final_state, bool use_qk_l2norm, const py::object& cu_seqlens, int64_t chunk_size) {
        return by_element<P>(dtype, [&]<class E>() {
          return recurrence_forward<DeltaBinding, E>({q, k, v, beta, g},
                                                     delta_args(gate, scale, use_qk_l2norm, cu_seqlens, chunk_size),
                                                     initial_state, output_final_state);
        });
      },
      arg("q"), arg("k"), arg("v"), arg("beta"), arg("g") = py::none(), py::kw_only(), arg("gate"), dtype_arg<P>(),
      arg("scale") = py::none(), arg("initial_state") = py::none(), arg("output_final_state") = false,
      arg("use_qk_l2norm") = false, arg("cu_seqlens") = py::none(), arg("chunk_size") = 64,
      with_dtype(
          "(o [B, T, H, V], final_state [N, H, K, V] or None) of P_t = D_t S_{t-1}, "
          "S_t = P_t + beta_t k_t (v_t - P_tᵀ k_t)ᵀ, o_t = scale · S_tᵀ q_t; gate: \"delta_rule\" (D_t = I, g None), "
          "\"gated_delta_rule\" (exp(g_t) I, g [B, T, H]), \"kda\" (diag(exp g_t), g [B, T, H, K]); beta [B, T, H]",
          dtype_text)
          .c_str());
  m.def(
      "delta_rule_backward",
      [](const py::object& q, const py::object& k, const py::object& v, const py::object& beta, const py::object& g,
         const py::object& dout, const py::object& dfinal_state, const std::string& gate, const std::string& dtype,
         std::optional<float> scale, const py::object& initial_state, bool use_qk_l2norm, const py::object& cu_seqlens,
         int64_t chunk_size) {
        return by_element<P>(dtype, [&]<class E>() {
          return recurrence_backward<DeltaBinding, E>({q, k, v, beta, g}, dout, dfinal_state,
                                                      delta_args(gate, scale, use_qk_l2norm, cu_seqlens, chunk_size),
                                                      initial_state);
        });
      },
      arg("q"), arg("k"), arg("v"), arg("beta"), arg("g"), arg("dout"), arg("dfinal_state") = py::none(), py::kw_only(),
      arg("gate"), dtype_arg<P>(), arg("scale") = py::none(), arg("initial_state") = py::none(),
      arg("use_qk_l2norm") = false, arg("cu_seqlens") = py::none(), arg("chunk_size") = 64,
      with_dtype("(dq, dk, dv, dbeta, dg or None, dinitial_state or None) of delta_rule for dout [B, T, H, V] and "
                 "dfinal_state [N, H, K, V] (None: zero); dinitial_state is returned when initial_state is given",
                 dtype_text)
          .c_str());
  if constexpr (!std::is_same_v<P, double>) def_delta_tokens<P>(m, dtype_text);  // the oracle has none
}

}  // namespace

void bind_delta(py::module_& m) {
  def_every_precision(m, []<class P>(py::module_& module, const char* dtype) { def_delta<P>(module, dtype); });
  m.def(
      "delta_rule_recurrent_forward",
      [](const py::object& q, const py::object& k, const py::object& v, const py::object& beta, const py::object& g,
         const std::string& gate, std::optional<float> scale, const py::object& initial_state, bool output_final_state,
         bool use_qk_l2norm, const py::object& cu_seqlens) {
        return recurrence_tokens_from<DeltaBinding>({q, k, v, beta, g}, initial_state,
                                                    delta_args(gate, scale, use_qk_l2norm, cu_seqlens, 64),
                                                    output_final_state);
      },
      py::arg("q"), py::arg("k"), py::arg("v"), py::arg("beta"), py::arg("g") = py::none(), py::kw_only(),
      py::arg("gate"), py::arg("scale") = py::none(), py::arg("initial_state") = py::none(),
      py::arg("output_final_state") = false, py::arg("use_qk_l2norm") = false, py::arg("cu_seqlens") = py::none(),
      "(o [B, T, H, V], final_state [N, H, K, V] or None) of delta_rule token by token; initial_state (None: "
      "zeros) is left unchanged: the final state is a new array, written as the initial one is read (no copy).");
}

}  // namespace linattn::python
