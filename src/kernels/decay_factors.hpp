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

// The delta rule's factored sides of one chunk row (n elements; see ops/delta/delta_chunk.hpp), from
// one exp and one division per element: e = exp(b − m), then
//   Ql = q e, Kl = k e, Kr = k / e, Qe = Ql em, Kt = Kl em, Kd = Kr enm   (em = e^{m}, enm = e^{b_n − m}),
// and the factors El = e, Er = 1/e, Eb = e em (= e^{b}), Ed = Er enm (= e^{b_n − b}) for the backward.
struct DeltaFactorRow {
  float *El, *Er, *Eb, *Ed, *Ql, *Kl, *Kr, *Qe, *Kt, *Kd;
};
void delta_factor_row(const DeltaFactorRow& out, const float* q, const float* k, const float* b, const float* m,
                      const float* em, const float* enm, int64_t n);

}  // namespace linattn::kernels
