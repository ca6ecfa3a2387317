// The DPLR delta rule (include/linattn/dplr.hpp, RWKV-7) on numpy arrays: the token-by-token forward and
// backward on float32, and the fp64 oracle's (linattn.reference) on float64, under the same Python names.
// linattn._dplr wraps them in flash-linear-attention's interface.
#include "linattn/dplr.hpp"

#include <pybind11/stl.h>

#include <optional>
#include <string>
#include <vector>

#include "bindings.hpp"
#include "family_args.hpp"
#include "recurrence_bindings.hpp"

namespace linattn::python {
namespace {

constexpr const char* kKeyShape = "[B, T, H, K]";

// The options of one call, and the vector its span points into.
struct DplrArgs {
  std::vector<int64_t> cu_seqlens;
  std::optional<float> scale;
  DplrOptions options() const { return {scale, cu_seqlens}; }
};
DplrArgs dplr_args(std::optional<float> scale, const py::object& cu_seqlens) {
  return {vector_arg<int64_t>(cu_seqlens, "cu_seqlens", "[N + 1]"), scale};
}

// dplr_delta_rule's tensors (q, k, v, a, b, gk; all but v [B, T, H, K]) and calls, for the shared binding
// (recurrence_bindings.hpp). It has no chunked form: its forward is the recurrence.
struct DplrBinding {
  static constexpr std::array<TensorSpec, 6> tensors{{kQuery,
                                                      kKey,
                                                      kValue,
                                                      {"a", kKeyShape, "[B, H, K]", TensorKind::plain},
                                                      {"b", kKeyShape, "[B, H, K]", TensorKind::plain},
                                                      {"gk", kKeyShape, "[B, H, K]", TensorKind::plain}}};
  static constexpr bool chunked = false;
  using Args = DplrArgs;

  static void recurrent(TensorView out, const Inputs<float, 6>& in, std::span<float> state, const Args& args) {
    dplr_delta_rule_recurrent_forward(out, in.view(0), in.view(1), in.view(2), in.view(3), in.view(4), in.view(5),
                                      state, args.options());
  }
  static void backward(const GradViews<float, 6>& d, std::span<float> dinitial, ConstTensorView dout,
                       std::span<const float> dfinal, const Inputs<float, 6>& in, const Args& args,
                       std::span<const float> initial) {
    dplr_delta_rule_recurrent_backward(d[0], d[1], d[2], d[3], d[4], d[5], dinitial, dout, dfinal, in.view(0),
                                       in.view(1), in.view(2), in.view(3), in.view(4), in.view(5), args.options(),
                                       initial);
  }
  static reference::DecayedOutput forward64(const Inputs<double, 6>& in, const Args& args,
                                            const std::vector<double>* initial) {
    const auto& t = in.fp64;
    return reference::dplr_delta_rule_forward(t[0], t[1], t[2], t[3], t[4], t[5], args.options(), initial);
  }
  static Gradients64<6> backward64(const reference::Tensor& dout, const std::vector<double>* dfinal,
                                   const Inputs<double, 6>& in, const Args& args, const std::vector<double>* initial) {
    const auto& t = in.fp64;
    reference::DplrGradients r =
        reference::dplr_delta_rule_backward(dout, dfinal, t[0], t[1], t[2], t[3], t[4], t[5], args.options(), initial);
    return {{std::move(r.dq), std::move(r.dk), std::move(r.dv), std::move(r.da), std::move(r.db), std::move(r.dgk)},
            std::move(r.dinitial_state)};
  }
};

// dplr_delta_rule and its backward, on T = float arrays or the oracle's T = double.
template <class T>
void def_dplr(py::module_& m, const char* dtype) {
  using py::arg;
  m.def(
      "dplr_delta_rule",
      [](const py::object& q, const py::object& k, const py::object& v, const py::object& a, const py::object& b,
         const py::object& gk, std::optional<float> scale, const py::object& initial_state, bool output_final_state,
         const py::object& cu_seqlens) {
        return recurrence_forward<DplrBinding, T>({q, k, v, a, b, gk}, dplr_args(scale, cu_seqlens), initial_state,
                                                  output_final_state);
      },
      arg("q"), arg("k"), arg("v"), arg("a"), arg("b"), arg("gk"), py::kw_only(), arg("scale") = py::none(),
      arg("initial_state") = py::none(), arg("output_final_state") = false, arg("cu_seqlens") = py::none(),
      with_dtype(
          "(o [B, T, H, V], final_state [N, H, K, V] or None) of s_t = S_{t-1}ᵀ a_t, "
          "S_t = diag(exp(gk_t)) S_{t-1} + b_t s_tᵀ + k_t v_tᵀ, o_t = scale · S_tᵀ q_t, token by token; q, k, a, b, "
          "gk [B, T, H, K], scale default K^-1/2",
          dtype)
          .c_str());
  m.def(
      "dplr_delta_rule_backward",
      [](const py::object& q, const py::object& k, const py::object& v, const py::object& a, const py::object& b,
         const py::object& gk, const py::object& dout, const py::object& dfinal_state, std::optional<float> scale,
         const py::object& initial_state, const py::object& cu_seqlens) {
        return recurrence_backward<DplrBinding, T>({q, k, v, a, b, gk}, dout, dfinal_state,
                                                   dplr_args(scale, cu_seqlens), initial_state);
      },
      arg("q"), arg("k"), arg("v"), arg("a"), arg("b"), arg("gk"), arg("dout"), arg("dfinal_state") = py::none(),
      py::kw_only(), arg("scale") = py::none(), arg("initial_state") = py::none(), arg("cu_seqlens") = py::none(),
      with_dtype("(dq, dk, dv, da, db, dgk, dinitial_state or None) of dplr_delta_rule for dout [B, T, H, V] and "
                 "dfinal_state [N, H, K, V] (None: zero); dinitial_state is returned when initial_state is given",
                 dtype)
          .c_str());
}

}  // namespace

void bind_dplr(py::module_& m) {
  def_float32_and_oracle(m, []<class T>(py::module_& module, const char* dtype) { def_dplr<T>(module, dtype); });
  m.def(
      "dplr_delta_rule_recurrent",
      [](const py::object& q, const py::object& k, const py::object& v, const py::object& a, const py::object& b,
         const py::object& gk, const py::object& state, std::optional<float> scale, const py::object& cu_seqlens) {
        return recurrence_tokens<DplrBinding>({q, k, v, a, b, gk}, state, dplr_args(scale, cu_seqlens), false);
      },
      py::arg("q"), py::arg("k"), py::arg("v"), py::arg("a"), py::arg("b"), py::arg("gk"), py::arg("state"),
      py::kw_only(), py::arg("scale") = py::none(), py::arg("cu_seqlens") = py::none(),
      "o [B, T, H, V] of dplr_delta_rule token by token; state: a C-contiguous float32 [N, H, K, V] array "
      "holding the initial state, overwritten with the final state.");
}

}  // namespace linattn::python
