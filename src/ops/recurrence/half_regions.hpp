#pragma once
// The aliasing check of a chunked recurrence that reads and writes bf16/f16 rows in place (the decayed
// family's and the delta rule's forwards and backwards): every half tensor and fp32 state of the call
// registered by name with its own element size, no output sharing an element with another argument. The
// shapes are the family's own checks, on shape views (kernels::shape_view).
#include <initializer_list>
#include <string>
#include <utility>

#include "kernels/half_views.hpp"
#include "linattn/error.hpp"
#include "linattn/half_attention.hpp"

namespace linattn::detail {

// Absent (null) tensors are left out.
template <HalfType H>
void check_half_regions(const char* op, std::initializer_list<std::pair<const char*, View4<H>>> outputs,
                        std::initializer_list<std::pair<const char*, View4<const H>>> inputs,
                        std::initializer_list<boundary::Region> fp32_outputs,
                        std::initializer_list<boundary::Region> fp32_inputs) {
  kernels::HalfCall<H> c(op);
  for (const auto& [name, x] : inputs)
    if (x.data) c.in_place(name, x);
  for (const auto& [name, y] : outputs)
    if (y.data) c.out_in_place(name, y);
  for (const boundary::Region& r : fp32_inputs) c.in_region(r);
  for (const boundary::Region& r : fp32_outputs) c.out_region(r);
  c.check();
}

// x's extents and strides as a writable float view, for the shape checks of a gradient (never dereferenced).
template <HalfType H>
TensorView output_shape_view(View4<H> x) {
  return {reinterpret_cast<float*>(x.data), x.extent, x.stride};
}

// A gate of either type (linattn/half_attention.hpp: HalfOrFloat) and its gradient, for the shape checks.
template <HalfType H>
ConstTensorView gate_shape_view(const HalfOrFloat<H>& g) {
  return g.wide.data ? g.wide : kernels::shape_view(g.half);
}
template <HalfType H>
TensorView gate_shape_view(const HalfOrFloatOut<H>& dg) {
  return dg.wide.data ? dg.wide : output_shape_view(dg.half);
}
// dg in g's type: an fp32 gate's gradient is fp32, a half gate's half.
template <HalfType H>
void check_gate_grad_type(const char* op, const HalfOrFloat<H>& g, const HalfOrFloatOut<H>& dg) {
  if ((g.wide.data && dg.half.data) || (g.half.data && dg.wide.data))
    throw Error(std::string(op) + ": dg is " + (dg.wide.data ? "float32" : "half precision") + " while g is " +
                (g.wide.data ? "float32" : "half precision") + "; give dg in g's type");
}

}  // namespace linattn::detail
