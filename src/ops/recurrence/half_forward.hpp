#pragma once
// The aliasing check of a chunked forward that reads and writes bf16/f16 rows in place (the decayed
// family's, the delta rule's): every half tensor and fp32 state of the call registered by name, no output
// sharing an element with another argument. The shapes are the family's own check, on shape views.
#include <initializer_list>
#include <span>
#include <utility>

#include "kernels/half_views.hpp"

namespace linattn::detail {

template <HalfType H>
void check_half_forward_regions(const char* op, View4<H> out, View4<const H> q, View4<const H> k, View4<const H> v,
                                std::initializer_list<std::pair<const char*, View4<const H>>> more,
                                std::span<const float> initial_state, std::span<float> final_state) {
  kernels::HalfCall<H> c(op);
  c.in_place("q", q), c.in_place("k", k), c.in_place("v", v), c.out_in_place("out", out);
  for (const auto& [name, x] : more)
    if (x.data) c.in_place(name, x);
  c.in_region(boundary::region("initial_state", initial_state));
  c.out_region(boundary::region("final_state", final_state));
  c.check();
}

}  // namespace linattn::detail
