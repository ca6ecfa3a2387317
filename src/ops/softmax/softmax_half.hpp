#pragma once
// The softmax decode step reading a bf16/f16 KV cache in place (softmax_decode_forward.cpp), for the
// half-precision forward (softmax_half.cpp).
#include <array>
#include <cstdint>
#include <span>

#include "linattn/half.hpp"
#include "linattn/softmax_attention.hpp"

namespace linattn::detail {

// Whether the forward of query_rows queries against a k of these strides decodes natively.
bool softmax_half_decodes(int64_t query_rows, const std::array<int64_t, 4>& k_stride);
// The decode forward (flash-decoding) with q and out in fp32 and k, v read where they lie as H.
template <HalfType H>
void softmax_decode_half(TensorView out, std::span<float> lse, ConstTensorView q, View4<const H> k, View4<const H> v,
                         const SoftmaxAttentionOptions& options);

}  // namespace linattn::detail
