#pragma once
// The decay factors of the decayed family's chunks: products with exp of a difference of cumulative
// log decays, formed so that the exponent is the difference itself (never exp of a large number
// divided by exp of another). Single-threaded, SIMD (Highway, dispatched at runtime).
#include <cstdint>

namespace linattn::kernels {

// y: [n] = x · exp(sign · (a − b)), elementwise (b null: 0). y may be x.
void mul_exp_difference(float* y, const float* x, const float* a, const float* b, float sign, int64_t n);

// y: [n] += x · exp(sign · (a − b)), elementwise: the factored intra-chunk gradient added to the
// inter-chunk one. y must not overlap x.
void add_mul_exp_difference(float* y, const float* x, const float* a, const float* b, float sign, int64_t n);

// E = exp(a − b); qh: [n] = q · E, kh: [n] = k / E, elementwise: the two sides of a product split
// around b (one exp per element).
void mul_exp_pair(float* qh, float* kh, const float* q, const float* k, const float* a, const float* b, int64_t n);

}  // namespace linattn::kernels
