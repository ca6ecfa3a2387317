#pragma once
// The one conversion layer between half-precision views and the fp32 operators: a strided bf16/f16
// [B, N, H, D] view is widened into a contiguous fp32 copy (bnhd), the fp32 operator runs on the
// copies, and each fp32 output is rounded back (nearest even) into its half view. HalfCall runs the
// boundary checks on the half views themselves first (valid views, no output sharing an element with
// another output or an input), since the fp32 operator only ever sees the private copies.
#include <cstdint>
#include <span>
#include <vector>

#include "core/validate.hpp"
#include "linattn/half.hpp"
#include "linattn/recurrent_state.hpp"

namespace linattn::kernels {

// The same extents and strides as a float view, for the shape checks only (never dereferenced).
template <class H>
ConstTensorView shape_view(View4<H> x) {
  return {reinterpret_cast<const float*>(x.data), x.extent, x.stride};
}

// dst: contiguous [B, N, H, D] fp32 = x widened; src row by row (rows of stride-1 head dims in one call).
template <HalfType H>
void widen_view(float* dst, View4<const H> x);
// y (strided half) = src: contiguous [B, N, H, D] fp32, rounded to nearest even.
template <HalfType H>
void narrow_view(View4<H> y, const float* src);
// Rounds a contiguous fp32 span into a half span of the same length.
template <HalfType H>
void narrow_span(std::span<H> y, std::span<const float> src);

// The checks and copies of one half-precision call. in() and out() give the fp32 views the fp32
// operator takes (an empty half view, data null, gives an empty fp32 view: an absent gate tensor);
// check() runs the aliasing rule over every half argument registered; store() rounds every output.
// The fp32 copies live in buffers kept per calling thread between calls (copy_buffer below).
template <HalfType H>
class HalfCall {
 public:
  explicit HalfCall(const char* op) : op_(op) {}
  ~HalfCall();
  HalfCall(const HalfCall&) = delete;
  HalfCall& operator=(const HalfCall&) = delete;
  ConstTensorView in(const char* name, View4<const H> x);
  TensorView out(const char* name, View4<H> y);
  // An input the operator reads in place as H: checked and registered, not copied (returns {}).
  ConstTensorView in_place(const char* name, View4<const H> x);
  // An output the operator writes in place as H: checked and registered, no copy, nothing to store.
  void out_in_place(const char* name, View4<H> y);
  // Registers fp32 outputs and inputs (lse, states) that the fp32 operator writes or reads in place.
  void out_region(boundary::Region r) { outputs_.push_back(r); }
  void in_region(boundary::Region r) { inputs_.push_back(r); }
  // A recurrent state the fp32 operator updates in place: its S, of either storage (f32 or bf16).
  void out_state(const RecurrentState& state) {
    out_region(state.dtype() == DType::bf16 ? boundary::region("state.S_bf16()", state.S_bf16())
                                            : boundary::region("state.S()", state.S()));
  }
  void check() const { detail::check_outputs(op_, outputs_, inputs_); }
  void store();

 private:
  struct Output {
    View4<H> half;
    size_t copy;
  };
  float* copy(size_t n);
  const char* op_;
  std::vector<float*> copies_;
  std::vector<Output> outs_;
  std::vector<boundary::Region> outputs_, inputs_;
};

}  // namespace linattn::kernels
