#pragma once
// One binding for every recurrence family (decay.cpp, delta.cpp, dplr.cpp). A family describes its
// tensors and its calls in a descriptor; these templates do the rest, the same way for each: view and
// check the numpy arguments (naming each), size the outputs and the [N, H, K, V] states, check the
// memory a chunked call will take, release the GIL, call, and hand the gradients back in the shapes
// their tensors came in. T = float runs the library; T = bf16 or f16 its half-precision operators on
// uint16 arrays holding the bits (_linattn.half: states stay float32); T = double the fp64 oracle
// (linattn.reference).
//
// A descriptor F holds:
//   tensors            std::array<TensorSpec, N>: q, k, v first, then the family's own
//   chunked            true: forward/backward are the chunked calls (memory: their ChunkedFamily);
//                      false: the forward is the recurrence run on a copy of initial_state
//   Args               the keyword options of one call, with cu_seqlens (and chunk_size when chunked)
//   forward, backward, recurrent (Inputs<float, N>; templates on the element type where the family's
//   half-precision operators are bound too) and forward64, backward64 (Inputs<double, N>);
//   recurrent_from (the recurrence from a read-only initial state into a fresh final one) where the
//   family has it
#include <pybind11/pybind11.h>

#include <algorithm>
#include <array>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "arrays.hpp"
#include "elements.hpp"
#include "family_args.hpp"
#include "linattn/half_attention.hpp"
#include "linattn/reference.hpp"
#include "memory_estimates.hpp"
#include "reference_args.hpp"

namespace linattn::python {

// How one tensor argument may come.
enum class TensorKind {
  plain,     // always [B, T, H, X] ([B, H, X] for a decode step)
  required,  // [B, T, H, C], or [B, T, H] for C = 1 (beta)
  optional,  // as `required`, or None (a gate that some modes go without)
};
struct TensorSpec {
  const char* name;
  const char* shape;        // quoted in messages: what a whole-sequence call accepts
  const char* token_shape;  // what a decode step accepts
  TensorKind kind;
};

// q, k [B, T, H, K] and v [B, T, H, V]: the first three tensors of every family.
inline constexpr TensorSpec kQuery{"q", "[B, T, H, K]", "[B, H, K]", TensorKind::plain};
inline constexpr TensorSpec kKey{"k", "[B, T, H, K]", "[B, H, K]", TensorKind::plain};
inline constexpr TensorSpec kValue{"v", "[B, T, H, V]", "[B, H, V]", TensorKind::plain};

// The first form a shape text lists ("[B, T, H] or [B, T, H, 1]" gives "[B, T, H]").
inline std::string first_form(const char* shape) {
  const std::string s(shape);
  return s.substr(0, s.find(" or "));
}

// A docstring ending in the arrays' dtype: " (float32 arrays)".
inline std::string with_dtype(const char* text, const char* dtype) {
  return std::string(text) + " (" + dtype + " arrays)";
}

// Calls def<T>(module, dtype) for the fp32 module (T = float) and the fp64 oracle, m.reference (T = double):
// a family's forward and backward under the same Python signatures.
template <class Def>
void def_float32_and_oracle(py::module_& m, Def def) {
  def.template operator()<float>(m, "float32");
  auto reference = py::reinterpret_borrow<py::module_>(m.attr("reference"));
  def.template operator()<double>(reference, "float64, the fp64 oracle, token by token");
}

// def_float32_and_oracle, and def<HalfBits>(m.half, ...): the family's half-precision operators under the
// same signatures (bind_half has made m.half).
template <class Def>
void def_every_precision(py::module_& m, Def def) {
  def_float32_and_oracle(m, def);
  auto half = py::reinterpret_borrow<py::module_>(m.attr("half"));
  def.template operator()<HalfBits>(half,
                                    "bf16 or f16 bits held as uint16, dtype naming which; states float32; the chunked "
                                    "calls' g may be float32 (dg then float32 too)");
}

// The tensors of one call: how each came (its view, 3 or 4 dims, or None), and for the oracle
// (T = double) fp64 copies of the given ones. A half call's gate may come as float32 beside the half bits (as
// flash-linear-attention's bf16 models keep g): then `wide` holds it and given[wide_gate] only its shape.
template <class T, size_t N>
struct Inputs {
  std::array<TrailingView<stored_t<T>>, N> given;
  std::array<reference::Tensor, N> fp64;
  TrailingView<float> wide;
  size_t wide_gate = N;
  View4<const T> view(size_t i) const { return as_elements<const T>(given[i].in.view); }
  // Tensor i as the operators take a gate: its view, or in a half call either type (HalfOrFloat).
  auto gate(size_t i) const {
    if constexpr (HalfType<T>)
      return i == wide_gate ? HalfOrFloat<T>(wide.in.view) : HalfOrFloat<T>(view(i));
    else
      return view(i);
  }
  const reference::Tensor* ptr(size_t i) const { return given[i].given ? &fp64[i] : nullptr; }
  // The states have v's heads (grouped value heads: a multiple of q's; query groups: k's, q's a multiple of
  // them), and out the more of q's and v's.
  std::array<int64_t, 4> state_extent(const std::vector<int64_t>& cu_seqlens) const {
    const auto& q = view(0).extent;
    return {state_count(q[0], cu_seqlens), view(2).extent[2], q[3], view(2).extent[3]};
  }
  std::array<int64_t, 4> out_extent() const {
    const auto& q = view(0).extent;
    return {q[0], q[1], std::max(q[2], view(2).extent[2]), view(2).extent[3]};
  }
};

// The gradients a backward writes: one view per tensor, and a float32 gate's gradient in `wide`.
template <class T, size_t N>
struct GradViews {
  std::array<View4<T>, N> d;
  TensorView wide;
  size_t wide_gate = N;
  View4<T> operator[](size_t i) const { return d[i]; }
  auto gate(size_t i) const {
    if constexpr (HalfType<T>)
      return i == wide_gate ? HalfOrFloatOut<T>(wide) : HalfOrFloatOut<T>(d[i]);
    else
      return d[i];
  }
};

template <size_t N>
using Tensors = std::array<py::object, N>;

// A float32 numpy array given for the gate of a half-precision chunked call.
template <class T>
bool wide_gate_arg(const TensorSpec& s, const py::object& x) {
  if constexpr (HalfType<T>)
    return s.kind == TensorKind::optional && py::isinstance<py::array>(x) &&
           py::reinterpret_borrow<py::array>(x).dtype().is(py::dtype::of<float>());
  else
    return false;
}

// Views of the tensors, `step`: one token each ([B, H, X] and [B, H] or [B, H, C]). `wide_gate`: a half
// chunked call, whose gate may come as float32.
template <class T, size_t N>
Inputs<T, N> recurrence_inputs(const std::array<TensorSpec, N>& specs, const Tensors<N>& tensors, bool step = false,
                               bool wide_gate = false) {
  Inputs<T, N> in;
  for (size_t i = 0; i < N; ++i) {
    using S = stored_t<T>;
    const TensorSpec& s = specs[i];
    const char* shape = step ? s.token_shape : s.shape;
    TrailingView<S>& g = in.given[i];
    if (s.kind == TensorKind::required && tensors[i].is_none())
      throw py::type_error(std::string(s.name) + ": expected a " + dtype_name<T>() + " array " + first_form(shape) +
                           ", got None");
    if (wide_gate && wide_gate_arg<T>(s, tensors[i])) {
      in.wide = trailing_arg<float>(tensors[i], s.name, shape), in.wide_gate = i;
      g.given = true, g.three_dims = in.wide.three_dims;
      g.in.view = {nullptr, in.wide.in.view.extent, in.wide.in.view.stride};  // its shape only
      continue;
    }
    if (s.kind == TensorKind::plain)
      g = {input_view<S>(tensors[i], s.name, step ? 3 : 4, shape), true, false};
    else if (step)
      g = {token_arg<S>(tensors[i], s.name, shape), !tensors[i].is_none(), false};
    else
      g = trailing_arg<S>(tensors[i], s.name, shape);
    if constexpr (std::is_same_v<T, double>)
      if (g.given) in.fp64[i] = tensor64(g.in.keep, s.name, shape);
  }
  return in;
}

// (o [B, T, H, V], final_state [N, H, K, V] or None).
template <class F, class T, size_t N = F::tensors.size()>
py::tuple recurrence_forward(const Tensors<N>& tensors, const typename F::Args& a, const py::object& initial_state,
                             bool output_final_state) {
  const Inputs<T, N> in = recurrence_inputs<T>(F::tensors, tensors, false, F::chunked);
  const auto extent = in.state_extent(a.cu_seqlens);
  if constexpr (std::is_same_v<T, double>) {
    std::optional<std::vector<double>> initial;
    if (!initial_state.is_none()) initial = state64(initial_state, "initial_state", extent);
    reference::DecayedOutput r;
    {
      py::gil_scoped_release nogil;
      r = F::forward64(in, a, initial ? &*initial : nullptr);
    }
    return py::make_tuple(to_array(r.out),
                          output_final_state ? py::object(array64(r.final_state, extent)) : py::none());
  } else {
    if constexpr (F::chunked)
      check_chunked_memory(F::memory, shape_of(in.view(0)), shape_of(in.view(2)), extent, a.chunk_size,
                           output_final_state, false);
    py::array_t<float> initial, final_state;
    if (!initial_state.is_none()) initial = state_arg<float>(initial_state, "initial_state", extent, false);
    // Without a chunked forward the recurrence advances a copy of initial_state (the caller's stays as it was).
    if (output_final_state || !F::chunked) final_state = zero_state(extent);
    OutputArray<stored_t<T>> out = output_array<stored_t<T>>(in.out_extent());
    {
      py::gil_scoped_release nogil;
      if constexpr (F::chunked) {
        F::forward(as_elements<T>(out.view), in, a, span_of(initial), mutable_span(final_state));
      } else {
        std::copy(initial.data(), initial.data() + initial.size(), final_state.mutable_data());
        F::recurrent(as_elements<T>(out.view), in, mutable_span(final_state), a);
      }
    }
    return py::make_tuple(out.array, output_final_state ? py::object(final_state) : py::none());
  }
}

// What an oracle's backward returns, in the order of the descriptor's tensors.
template <size_t N>
struct Gradients64 {
  std::array<reference::Tensor, N> d;
  std::vector<double> dinitial_state;
};

// (d of each tensor, None for one not given, in its own shape; dinitial_state or None).
template <class F, class T, size_t N = F::tensors.size()>
py::tuple recurrence_backward(const Tensors<N>& tensors, const py::object& dout, const py::object& dfinal_state,
                              const typename F::Args& a, const py::object& initial_state) {
  const Inputs<T, N> in = recurrence_inputs<T>(F::tensors, tensors, false, F::chunked);
  std::array<py::object, N + 1> result;
  if constexpr (std::is_same_v<T, double>) {
    const reference::Tensor d = tensor64(dout, "dout", "[B, T, H, V]");
    const auto extent = in.state_extent(a.cu_seqlens);
    std::optional<std::vector<double>> initial, dfinal;
    if (!initial_state.is_none()) initial = state64(initial_state, "initial_state", extent);
    if (!dfinal_state.is_none()) dfinal = state64(dfinal_state, "dfinal_state", extent);
    Gradients64<N> r;
    {
      py::gil_scoped_release nogil;
      r = F::backward64(d, dfinal ? &*dfinal : nullptr, in, a, initial ? &*initial : nullptr);
    }
    for (size_t i = 0; i < N; ++i)
      result[i] = in.given[i].given ? trailing_result(to_array(r.d[i]), in.given[i]) : py::none();
    result[N] = initial ? py::object(array64(r.dinitial_state, extent)) : py::none();
  } else {
    const InputView<stored_t<T>> d = input_view<stored_t<T>>(dout, "dout", 4, "[B, T, H, V]");
    const auto extent = in.state_extent(a.cu_seqlens);
    if constexpr (F::chunked)
      check_chunked_memory(F::memory, shape_of(in.view(0)), shape_of(in.view(2)), extent, a.chunk_size,
                           !initial_state.is_none(), true, HalfType<T>);
    py::array_t<float> initial, dfinal, dinitial;
    if (!initial_state.is_none()) {
      initial = state_arg<float>(initial_state, "initial_state", extent, false);
      dinitial = zero_state(extent);
    }
    if (!dfinal_state.is_none()) dfinal = state_arg<float>(dfinal_state, "dfinal_state", extent, false);
    std::array<OutputArray<stored_t<T>>, N> grads;
    OutputArray<float> wide;  // a float32 gate's gradient, float32 too
    GradViews<T, N> views;
    for (size_t i = 0; i < N; ++i) {
      if (i == in.wide_gate)
        wide = output_array<float>(in.view(i).extent), views.wide = wide.view, views.wide_gate = i;
      else if (in.given[i].given)
        grads[i] = output_array<stored_t<T>>(in.view(i).extent);
      views.d[i] = as_elements<T>(grads[i].view);
    }
    {
      py::gil_scoped_release nogil;
      F::backward(views, mutable_span(dinitial), as_elements<const T>(d.view), span_of(dfinal), in, a,
                  span_of(initial));
    }
    for (size_t i = 0; i < N; ++i)
      result[i] = trailing_result(i == in.wide_gate ? py::array(wide.array) : py::array(grads[i].array), in.given[i]);
    result[N] = initial_state.is_none() ? py::object(py::none()) : py::object(dinitial);
  }
  return std::apply([](auto&... r) { return py::make_tuple(r...); }, result);
}

// o [B, T, H, V] token by token (T = float, or a half type's bits), on `state` [N, H, K, V], the caller's
// float32 array advanced in place. `step`: one decoding token, q, k [B, H, K] and o [B, H, V], against a
// [B, H, K, V] state.
template <class F, class T = float, size_t N = F::tensors.size()>
py::array recurrence_tokens(const Tensors<N>& tensors, const py::object& state, const typename F::Args& a, bool step) {
  const Inputs<T, N> in = recurrence_inputs<T>(F::tensors, tensors, step);
  py::array_t<float> S = state_arg<float>(state, "state", in.state_extent(a.cu_seqlens), true);
  OutputArray<stored_t<T>> out = output_array<stored_t<T>>(in.out_extent(), !step);
  {
    py::gil_scoped_release nogil;
    F::recurrent(as_elements<T>(out.view), in, mutable_span(S), a);
  }
  return out.array;
}

// (o [B, T, H, V], final_state [N, H, K, V] or None) token by token (float32) from initial_state (None: zeros),
// which stays as it was: the final state is a fresh array that each sequence's first token writes in the sweep
// that reads the initial state (F::recurrent_from), with no copy of it first, and only then handed back.
template <class F, size_t N = F::tensors.size()>
py::tuple recurrence_tokens_from(const Tensors<N>& tensors, const py::object& initial_state, const typename F::Args& a,
                                 bool output_final_state) {
  const Inputs<float, N> in = recurrence_inputs<float>(F::tensors, tensors);
  const auto extent = in.state_extent(a.cu_seqlens);
  py::array_t<float> initial;
  if (!initial_state.is_none()) initial = state_arg<float>(initial_state, "initial_state", extent, false);
  py::array_t<float> final_state(std::vector<py::ssize_t>(extent.begin(), extent.end()));  // the call writes it all
  OutputArray<float> out = output_array<float>(in.out_extent());
  {
    py::gil_scoped_release nogil;
    F::recurrent_from(out.view, in, span_of(initial), mutable_span(final_state), a);
  }
  return py::make_tuple(out.array, output_final_state ? py::object(final_state) : py::none());
}

}  // namespace linattn::python
