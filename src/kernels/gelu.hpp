#pragma once
// fp32 GELU over n contiguous values with a vector tanh (kernels/gelu.cpp, runtime dispatch), used by
// the model's MLP; the double path of gelu_forward / gelu_backward in model/layers.cpp is their spec.
#include <cstdint>

namespace linattn::model::simd {

// out[i] = ½ x[i] (1 + tanh(√(2/π)(x[i] + 0.044715 x[i]³))).
void gelu_forward(float* out, const float* x, int64_t n);
// dinp[i] = dout[i] · gelu'(x[i]) (overwritten).
void gelu_backward(float* dinp, const float* dout, const float* x, int64_t n);

}  // namespace linattn::model::simd
