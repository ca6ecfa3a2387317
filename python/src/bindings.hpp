#pragma once
// The pieces of the _linattn module, one file each, and the option parsing they share.
#include <pybind11/pybind11.h>

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "linattn/feature_map.hpp"
#include "linattn/linear_attention.hpp"
#include "linattn/softmax_attention.hpp"

namespace linattn::python {

namespace py = pybind11;

void bind_attention(py::module_& m);  // softmax and linear attention, forward and backward (fp32)
void bind_reference(py::module_& m);  // the fp64 oracle, for torch's float64 path and gradcheck
void bind_state(py::module_& m);      // RecurrentState
void bind_linformer(py::module_& m);  // Linformer, when include/linattn/linformer.hpp exists
void bind_decay(py::module_& m);      // decayed linear attention (fp32, and the oracle in m.reference)
void bind_delta(py::module_& m);      // the delta rule (fp32, and the oracle in m.reference)
void bind_dplr(py::module_& m);       // the DPLR delta rule, RWKV-7 (fp32, and the oracle in m.reference)
void bind_info(py::module_& m);       // info(): CPU features and SIMD dispatch
void bind_half(py::module_& m);       // softmax and linear attention on bf16/f16 (m.half)

// The map named `name` for head dim `dim`. n_features and seed only mean something for "favor";
// n_features given for another map is a ValueError, seed is ignored by the deterministic maps.
FeatureMapPtr feature_map_arg(const std::string& name, int64_t dim, std::optional<int64_t> n_features, uint64_t seed);
// Whether "favor" is built in (include/linattn/performer.hpp was there at build time).
bool has_favor();
// cu_seqlens: None (empty) or a 1-d array of integers [N + 1].
std::vector<int64_t> cu_seqlens_arg(const py::object& cu_seqlens);

// The keyword arguments as operator options; key_lengths and cu_seqlens must outlive the options.
SoftmaxAttentionOptions softmax_options(std::span<const int64_t> key_lengths, bool causal, std::optional<float> scale,
                                        std::span<const int64_t> cu_seqlens = {});
LinearAttentionOptions linear_options(std::span<const int64_t> key_lengths, int64_t dim, const std::string& feature_map,
                                      bool causal, float eps, std::optional<int64_t> n_features, uint64_t seed,
                                      std::span<const int64_t> cu_seqlens = {});

// Defines name and name_backward with the Python signatures of the contract, for the fp32 module
// and the fp64 oracle alike: forward(q, k, v, *, options) and backward(q, k, v, dout, *, options), options
// ending in cu_seqlens (a py::object: None or [N + 1] integers, cu_seqlens_arg).
template <class Forward, class Backward>
void def_softmax(py::module_& m, Forward forward, Backward backward) {
  using py::arg;
  m.def("softmax_attention", forward, arg("q"), arg("k"), arg("v"), py::kw_only(), arg("causal") = false,
        arg("key_lengths") = py::none(), arg("scale") = py::none(), arg("cu_seqlens") = py::none(),
        "out [B, Nq, H, E] = softmax(q kᵀ · scale) v, scale defaulting to 1/√D; cu_seqlens [N + 1]: sequences "
        "packed along T of batch row 0, each attending to itself only.");
  m.def("softmax_attention_backward", backward, arg("q"), arg("k"), arg("v"), arg("dout"), py::kw_only(),
        arg("causal") = false, arg("key_lengths") = py::none(), arg("scale") = py::none(),
        arg("cu_seqlens") = py::none(),
        "(dq, dk, dv) of softmax_attention for the output gradient dout [B, Nq, H, E].");
}
template <class Forward, class Backward>
void def_linear(py::module_& m, Forward forward, Backward backward) {
  using py::arg;
  m.def("linear_attention", forward, arg("q"), arg("k"), arg("v"), py::kw_only(), arg("feature_map") = "elu",
        arg("causal") = false, arg("key_lengths") = py::none(), arg("eps") = 1e-6f, arg("n_features") = py::none(),
        arg("seed") = 0, arg("cu_seqlens") = py::none(),
        "out_i = φ(q_i)ᵀ Σ_j φ(k_j) v_jᵀ / (φ(q_i)ᵀ Σ_j φ(k_j) + eps), out [B, Nq, H, E]; cu_seqlens [N + 1]: "
        "sequences packed along T of batch row 0, each summing its own keys only.");
  m.def("linear_attention_backward", backward, arg("q"), arg("k"), arg("v"), arg("dout"), py::kw_only(),
        arg("feature_map") = "elu", arg("causal") = false, arg("key_lengths") = py::none(), arg("eps") = 1e-6f,
        arg("n_features") = py::none(), arg("seed") = 0, arg("cu_seqlens") = py::none(),
        "(dq, dk, dv) of linear_attention for the output gradient dout [B, Nq, H, E].");
}

}  // namespace linattn::python
