// Decayed linear attention (include/linattn/decay.hpp) on numpy arrays: the chunked forward and
// backward, the token-by-token recurrence and the decode step on float32 and on bf16/f16 bits
// (_linattn.half), and the fp64 oracle's forward and backward (linattn.reference) on float64.
// linattn.fla wraps them in flash-linear-attention's interface.
#include "linattn/decay.hpp"

#include <pybind11/stl.h>

#include <algorithm>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "bindings.hpp"
#include "family_args.hpp"
#include "linattn/half_attention.hpp"
#include "recurrence_bindings.hpp"

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
  return {decay_arg(decay), vector_arg<float>(g_gamma, "g_gamma", "[HV]"),
          vector_arg<int64_t>(cu_seqlens, "cu_seqlens", "[N + 1]"), scale, chunk_size};
}

constexpr const char* kGateShape = "[B, T, H] or [B, T, H, 1] (simple_gla), [B, T, H, K] (gla)";

// decayed_attention's tensors and calls, for the shared binding (recurrence_bindings.hpp).
struct DecayBinding {
  static constexpr std::array<TensorSpec, 4> tensors{
      {kQuery,
       kKey,
       kValue,
       {"g", kGateShape, "[B, H] or [B, H, 1] (simple_gla), [B, H, K] (gla)", TensorKind::optional}}};
  static constexpr bool chunked = true;
  static constexpr ChunkedFamily memory = ChunkedFamily::decayed;
  using Args = DecayArgs;

  // E: float, or bf16 / f16 (the half-precision overloads, include/linattn/half_attention.hpp).
  template <class E>
  static void forward(View4<E> out, const Inputs<E, 4>& in, const Args& a, std::span<const float> initial,
                      std::span<float> final_state) {
    decayed_attention_forward(out, in.view(0), in.view(1), in.view(2), in.gate(3), a.options(), initial, final_state);
  }
  template <class E>
  static void backward(const GradViews<E, 4>& d, std::span<float> dinitial, View4<const E> dout,
                       std::span<const float> dfinal, const Inputs<E, 4>& in, const Args& a,
                       std::span<const float> initial) {
    decayed_attention_backward(d[0], d[1], d[2], d.gate(3), dinitial, dout, dfinal, in.view(0), in.view(1), in.view(2),
                               in.gate(3), a.options(), initial);
  }
  template <class E>
  static void recurrent(View4<E> out, const Inputs<E, 4>& in, std::span<float> state, const Args& a) {
    decayed_recurrent_forward(out, in.view(0), in.view(1), in.view(2), in.view(3), state, a.options());
  }
  static void recurrent_from(TensorView out, const Inputs<float, 4>& in, std::span<const float> initial,
                             std::span<float> final_state, const Args& a) {
    decayed_recurrent_forward(out, in.view(0), in.view(1), in.view(2), in.view(3), initial, final_state, a.options());
  }
  static reference::DecayedOutput forward64(const Inputs<double, 4>& in, const Args& a,
                                            const std::vector<double>* initial) {
    return reference::decayed_attention_forward(in.fp64[0], in.fp64[1], in.fp64[2], in.ptr(3), a.options(), initial);
  }
  static Gradients64<4> backward64(const reference::Tensor& dout, const std::vector<double>* dfinal,
                                   const Inputs<double, 4>& in, const Args& a, const std::vector<double>* initial) {
    reference::DecayedGradients r = reference::decayed_attention_backward(dout, dfinal, in.fp64[0], in.fp64[1],
                                                                          in.fp64[2], in.ptr(3), a.options(), initial);
    return {{std::move(r.dq), std::move(r.dk), std::move(r.dv), std::move(r.dg)}, std::move(r.dinitial_state)};
  }
};

// decayed_recurrent and decayed_step on P = float arrays or half bits.
template <class P>
void def_decayed_tokens(py::module_& m, const char* dtype_text) {
  using py::arg;
  m.def(
      "decayed_recurrent",
      [](const py::object& q, const py::object& k, const py::object& v, const py::object& g, const py::object& state,
         const std::string& decay, const std::string& dtype, const py::object& g_gamma, std::optional<float> scale,
         const py::object& cu_seqlens) {
        return by_element<P>(dtype, [&]<class E>() {
          return recurrence_tokens<DecayBinding, E>({q, k, v, g}, state,
                                                    decay_args(decay, g_gamma, scale, cu_seqlens, 64), false);
        });
      },
      arg("q"), arg("k"), arg("v"), arg("g"), arg("state"), py::kw_only(), arg("decay"), dtype_arg<P>(),
      arg("g_gamma") = py::none(), arg("scale") = py::none(), arg("cu_seqlens") = py::none(),
      with_dtype("o [B, T, H, V] of decayed_attention token by token; state: a C-contiguous float32 [N, H, K, V] "
                 "array holding the initial state, overwritten with the final state",
                 dtype_text)
          .c_str());
  // One token on the caller's state, advanced in place (the token-by-token driver on the array itself:
  // a RecurrentState would cost a copy of the state in and out of every step).
  m.def(
      "decayed_step",
      [](const py::object& q, const py::object& k, const py::object& v, const py::object& g, const py::object& state,
         const std::string& decay, const std::string& dtype, const py::object& g_gamma, std::optional<float> scale) {
        return by_element<P>(dtype, [&]<class E>() {
          return recurrence_tokens<DecayBinding, E>({q, k, v, g}, state,
                                                    decay_args(decay, g_gamma, scale, py::none(), 64), true);
        });
      },
      arg("q"), arg("k"), arg("v"), arg("g"), arg("state"), py::kw_only(), arg("decay"), dtype_arg<P>(),
      arg("g_gamma") = py::none(), arg("scale") = py::none(),
      with_dtype("o [B, H, V] of one decoding token (decayed_step): q, k [B, H, K], v [B, H, V], g [B, H] or "
                 "[B, H, 1] (simple_gla), [B, H, K] (gla), None otherwise; state: a C-contiguous float32 "
                 "[B, H, K, V] array, advanced in place",
                 dtype_text)
          .c_str());
}

// decayed_attention and its backward on P = float arrays, half bits (P = HalfBits) or the oracle's P = double;
// the token-by-token recurrence and the decode step on float and half.
template <class P>
void def_decayed(py::module_& m, const char* dtype_text) {
  using py::arg;
  m.def(
      "decayed_attention",
      [](const py::object& q, const py::object& k, const py::object& v, const py::object& g, const std::string& decay,
         const std::string& dtype, const py::object& g_gamma, std::optional<float> scale,
         const py::object& initial_state, bool output_final_state, const py::object& cu_seqlens, int64_t chunk_size) {
        return by_element<P>(dtype, [&]<class E>() {
          return recurrence_forward<DecayBinding, E>({q, k, v, g},
                                                     decay_args(decay, g_gamma, scale, cu_seqlens, chunk_size),
                                                     initial_state, output_final_state);
        });
      },
      arg("q"), arg("k"), arg("v"), arg("g") = py::none(), py::kw_only(), arg("decay"), dtype_arg<P>(),
      arg("g_gamma") = py::none(), arg("scale") = py::none(), arg("initial_state") = py::none(),
      arg("output_final_state") = false, arg("cu_seqlens") = py::none(), arg("chunk_size") = 64,
      with_dtype(
          "(o [B, T, HV, V], final_state [N, HV, K, V] or None) of S_t = diag(exp g_t) S_{t-1} + k_t v_tᵀ, "
          "o_t = scale · S_tᵀ q_t (q, k [B, T, H, K], v [B, T, HV, V], HV a multiple of H: value head j reads "
          "q/k head j / (HV / H); or q [B, T, R·H, K] over k, v, g, g_gamma and the states of H heads, query head i "
          "reading head i / R's state, o [B, T, R·H, V]); decay: \"linear\", \"retention\", \"lightning\" (g_gamma "
          "[HV]), \"simple_gla\" "
          "(g [B, T, HV] or [B, T, HV, 1]), \"gla\" (g [B, T, HV, K])",
          dtype_text)
          .c_str());
  m.def(
      "decayed_attention_backward",
      [](const py::object& q, const py::object& k, const py::object& v, const py::object& g, const py::object& dout,
         const py::object& dfinal_state, const std::string& decay, const std::string& dtype, const py::object& g_gamma,
         std::optional<float> scale, const py::object& initial_state, const py::object& cu_seqlens,
         int64_t chunk_size) {
        return by_element<P>(dtype, [&]<class E>() {
          return recurrence_backward<DecayBinding, E>({q, k, v, g}, dout, dfinal_state,
                                                      decay_args(decay, g_gamma, scale, cu_seqlens, chunk_size),
                                                      initial_state);
        });
      },
      arg("q"), arg("k"), arg("v"), arg("g"), arg("dout"), arg("dfinal_state") = py::none(), py::kw_only(),
      arg("decay"), dtype_arg<P>(), arg("g_gamma") = py::none(), arg("scale") = py::none(),
      arg("initial_state") = py::none(), arg("cu_seqlens") = py::none(), arg("chunk_size") = 64,
      with_dtype("(dq, dk, dv, dg or None, dinitial_state or None) of decayed_attention for dout [B, T, H, V] and "
                 "dfinal_state [N, H, K, V] (None: zero); dinitial_state is returned when initial_state is given",
                 dtype_text)
          .c_str());
  if constexpr (!std::is_same_v<P, double>) def_decayed_tokens<P>(m, dtype_text);  // the oracle has none
}

}  // namespace

void bind_decay(py::module_& m) {
  def_every_precision(m, []<class P>(py::module_& module, const char* dtype) { def_decayed<P>(module, dtype); });
  m.def(
      "decayed_recurrent_forward",
      [](const py::object& q, const py::object& k, const py::object& v, const py::object& g, const std::string& decay,
         const py::object& g_gamma, std::optional<float> scale, const py::object& initial_state,
         bool output_final_state, const py::object& cu_seqlens) {
        return recurrence_tokens_from<DecayBinding>(
            {q, k, v, g}, initial_state, decay_args(decay, g_gamma, scale, cu_seqlens, 64), output_final_state);
      },
      py::arg("q"), py::arg("k"), py::arg("v"), py::arg("g") = py::none(), py::kw_only(), py::arg("decay"),
      py::arg("g_gamma") = py::none(), py::arg("scale") = py::none(), py::arg("initial_state") = py::none(),
      py::arg("output_final_state") = false, py::arg("cu_seqlens") = py::none(),
      "(o [B, T, H, V], final_state [N, H, K, V] or None) of decayed_attention token by token; initial_state "
      "(None: zeros) is left unchanged: the final state is a new array, written as the initial one is read.");
}

}  // namespace linattn::python
