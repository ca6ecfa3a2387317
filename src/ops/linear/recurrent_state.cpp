#include "linattn/recurrent_state.hpp"

#include <algorithm>

#include "core/validate.hpp"

namespace linattn {

RecurrentState::RecurrentState(int64_t batch, int64_t heads, int64_t feature_dim, int64_t value_dim,
                               std::string feature_map)
    : batch_(batch),
      heads_(heads),
      feature_dim_(feature_dim),
      value_dim_(value_dim),
      feature_map_(std::move(feature_map)) {
  const char* op = "RecurrentState";
  const int64_t extents[] = {batch, heads, feature_dim, value_dim};
  const char* names[] = {"batch", "heads", "feature_dim", "value_dim"};
  for (int i = 0; i < 4; ++i)
    if (extents[i] <= 0)
      detail::fail(op, std::string(names[i]) + " is " + std::to_string(extents[i]) + ", expected ≥ 1");
  const int64_t bh = detail::checked_mul(op, "batch × heads", batch, heads);
  const int64_t bhm = detail::checked_mul(op, "batch × heads × feature_dim", bh, feature_dim);
  const int64_t bhme = detail::checked_mul(op, "batch × heads × feature_dim × value_dim", bhm, value_dim);
  S_.assign(size_t(bhme), 0.0f);
  z_.assign(size_t(bhm), 0.0f);
}

void RecurrentState::reset() {
  std::fill(S_.begin(), S_.end(), 0.0f);
  std::fill(z_.begin(), z_.end(), 0.0f);
  position_ = 0;
}

}  // namespace linattn
