#include "ops/linear/linear_checks.hpp"

#include <cmath>
#include <sstream>
#include <string>

#include "core/sequences.hpp"
#include "core/validate.hpp"

namespace linattn::detail {

int64_t check_linear_arguments(const char* op, ConstTensorView q, ConstTensorView k, ConstTensorView v,
                               const LinearAttentionOptions& o) {
  check_attention_inputs(op, q, k, v);
  if (!o.feature_map) fail(op, "options.feature_map is null, expected a feature map (e.g. elu_feature_map())");
  if (!std::isfinite(o.eps) || o.eps < 0) fail_with(op, "options.eps is ", o.eps, ", expected a finite value ≥ 0");
  check_key_lengths(op, o.key_lengths, q.batch(), k.seq());
  if (!o.cu_seqlens.empty()) check_cu_seqlens(op, o.cu_seqlens, o.key_lengths, q.batch(), q.seq(), k.seq());
  const int64_t M = o.feature_map->feature_dim(q.dim());
  if (M < 1) fail_with(op, "options.feature_map->feature_dim(", q.dim(), ") is ", M, ", expected ≥ 1");
  checked_mul(op, "B × H × M × E", checked_mul(op, "B × H", q.batch(), q.heads()),
              checked_mul(op, "M × E", M, v.dim()));
  return M;
}

void check_state_extents(const char* op, const char* name, const std::array<int64_t, 4>& seen,
                         const std::array<int64_t, 4>& want) {
  const char* what[] = {"batch()", "heads()", "feature_dim()", "value_dim()"};
  const char* because[] = {"q's batch", "q's heads", "the feature map's feature_dim(D)", "v's value dim"};
  for (int i = 0; i < 4; ++i)
    if (seen[i] != want[i])
      fail_with(op, name, ".", what[i], " is ", seen[i], ", expected ", want[i], " (", because[i], ")");
}

}  // namespace linattn::detail
