#include "linattn/recurrent_state.hpp"

#include <algorithm>

#include "core/validate.hpp"

namespace linattn {

RecurrentState::RecurrentState(int64_t batch, int64_t heads, int64_t feature_dim, int64_t value_dim,
                               std::string feature_map, DType dtype)
    : batch_(batch),
      heads_(heads),
      feature_dim_(feature_dim),
      value_dim_(value_dim),
      feature_map_(std::move(feature_map)),
      dtype_(dtype) {
  const char* op = "RecurrentState";
  const int64_t extents[] = {batch, heads, feature_dim, value_dim};
  const char* names[] = {"batch", "heads", "feature_dim", "value_dim"};
  for (int i = 0; i < 4; ++i)
    if (extents[i] <= 0)
      detail::fail(op, std::string(names[i]) + " is " + std::to_string(extents[i]) + ", expected ≥ 1");
  const int64_t bh = detail::checked_mul(op, "batch × heads", batch, heads);
  const int64_t bhm = detail::checked_mul(op, "batch × heads × feature_dim", bh, feature_dim);
  const int64_t bhme = detail::checked_mul(op, "batch × heads × feature_dim × value_dim", bhm, value_dim);
  if (dtype == DType::f16) detail::fail(op, "dtype is f16, expected f32 or bf16 (a state keeps fp32's exponent range)");
  if (dtype == DType::bf16)
    S16_.assign(size_t(bhme), bf16{});
  else
    S_.assign(size_t(bhme), 0.0f);
  z_.assign(size_t(bhm), 0.0f);
}

void RecurrentState::reset() {
  std::fill(S_.begin(), S_.end(), 0.0f);
  std::fill(S16_.begin(), S16_.end(), bf16{});
  std::fill(z_.begin(), z_.end(), 0.0f);
  position_ = 0;
}

}  // namespace linattn
