#pragma once
// The decay factors of the decayed family's chunks: products with exp of a difference of cumulative
// log decays, formed so that the exponent is the difference itself (never exp of a large number
// divided by exp of another). Single-threaded, SIMD (Highway, dispatched at runtime).
#include <cstdint>

namespace linattn::kernels {

// y: [n] = x · exp(sign · (a − b)), elementwise (b null: 0). y may be x.
void mul_exp_difference(float* y, const float* x, const float* a, const float* b, float sign, int64_t n);

// e: [n] = exp(a − b), inv_e = 1 / e, qh = q · e, kh = k / e, elementwise: the two sides of a product
// split around b (one exp per element), and the factors that the backward applies again.
void mul_exp_pair(float* qh, float* kh, float* e, float* inv_e, const float* q, const float* k, const float* a,
                  const float* b, int64_t n);

}  // namespace linattn::kernels
