#pragma once
// The fp64 oracle of FAVOR+ (include/linattn/favor.hpp), written from the formula alone: it shares
// no code with the fp32 path in favor.cpp (nor random_projection.hpp's products), so that a test
// comparing the two compares two independent derivations.
#include <cstdint>
#include <span>

#include "linattn/feature_map.hpp"

namespace linattn::detail {

// phi: [rows, m] = FAVOR+ features of x: [rows, D] under omega: [m, D] (unscaled ω, row-major).
void favor_forward_reference(double* phi, const double* x, int64_t rows, int64_t dim, std::span<const double> omega,
                             FeatureRole role);
// dx: [rows, D] = (∂φ/∂x)ᵀ dphi (overwritten); dphi: [rows, m].
void favor_backward_reference(double* dx, const double* dphi, const double* x, int64_t rows, int64_t dim,
                              std::span<const double> omega, FeatureRole role);

}  // namespace linattn::detail
