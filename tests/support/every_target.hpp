#pragma once
// A test body under every Highway target this CPU runs (the rest of the suite runs only the best one).
#include <gtest/gtest.h>

#include "hwy/targets.h"

namespace linattn::testing {

// body() once per compiled target the CPU supports, each traced by its name; then the CPU's own choice again.
template <class Body>
void for_each_simd_target(Body&& body) {
  hwy::SetSupportedTargetsForTest(0);
  for (const auto target : hwy::SupportedAndGeneratedTargets()) {
    SCOPED_TRACE(hwy::TargetName(target));
    hwy::SetSupportedTargetsForTest(target);
    body();
  }
  hwy::SetSupportedTargetsForTest(0);
}

}  // namespace linattn::testing
