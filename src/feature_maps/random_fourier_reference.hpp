#pragma once
// The fp64 oracle of random Fourier features (include/linattn/favor.hpp), written from the formula
// alone: it shares no code with the fp32 path in random_fourier.cpp (nor random_projection.hpp's
// products), so that a test comparing the two compares two independent derivations.
#include <cstdint>
#include <span>

namespace linattn::detail {

// phi: [rows, m] = random Fourier features of x: [rows, D] under omega: [m/2, D] (unscaled ω, row-major).
void random_fourier_forward_reference(double* phi, const double* x, int64_t rows, int64_t dim,
                                      std::span<const double> omega);
// dx: [rows, D] = (∂φ/∂x)ᵀ dphi (overwritten); dphi: [rows, m].
void random_fourier_backward_reference(double* dx, const double* dphi, const double* x, int64_t rows, int64_t dim,
                                       std::span<const double> omega);

}  // namespace linattn::detail
