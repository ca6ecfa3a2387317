#pragma once
// float64 arguments of the fp64 oracle's bindings (linattn.reference): copies into oracle tensors, and
// the boundary checks the oracle itself leaves to its callers.
#include <pybind11/pybind11.h>

#include <vector>

#include "linattn/reference.hpp"

namespace linattn::python {

namespace py = pybind11;

// q, k, v as oracle tensors, checked against each other, and key_lengths checked against them.
struct ReferenceInputs {
  reference::Tensor q, k, v;
  std::vector<int64_t> key_lengths;
};
ReferenceInputs reference_inputs(const char* op, const py::object& q, const py::object& k, const py::object& v,
                                 const py::object& key_lengths);
// dout: [B, Nq, H, E] with E from v.
reference::Tensor reference_dout(const char* op, const py::object& dout, const ReferenceInputs& in);
// A [B, N, H, D] float64 array of the tensor.
py::array to_array(const reference::Tensor& t);

}  // namespace linattn::python
