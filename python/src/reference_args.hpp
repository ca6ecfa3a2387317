#pragma once
// float64 arguments of the fp64 oracle's bindings (linattn.reference): copies into oracle tensors,
// which the oracle's entry points check themselves (the one boundary check, src/core/validate.hpp).
#include <pybind11/pybind11.h>

#include <vector>

#include "linattn/reference.hpp"

namespace linattn::python {

namespace py = pybind11;

// q, k, v as oracle tensors, and key_lengths.
struct ReferenceInputs {
  reference::Tensor q, k, v;
  std::vector<int64_t> key_lengths;
};
ReferenceInputs reference_inputs(const py::object& q, const py::object& k, const py::object& v,
                                 const py::object& key_lengths);
// dout: [B, Nq, H, E].
reference::Tensor reference_dout(const py::object& dout);
// A [B, N, H, D] float64 array of the tensor.
py::array to_array(const reference::Tensor& t);

}  // namespace linattn::python
