#include "ops/linformer/linformer_checks.hpp"

#include <sstream>
#include <string>

#include "core/validate.hpp"

namespace linattn::detail {

LinformerSizes check_linformer_arguments(const char* op, ConstTensorView q, ConstTensorView k, ConstTensorView v,
                                         size_t E_size, size_t F_size, const LinformerOptions& o) {
  if (o.causal) {
    fail(op,
         "causal is true, expected false: Linformer projects keys and values along the whole sequence, so every "
         "projected position mixes in future tokens and no causal mask can exclude them");
  }
  check_attention_inputs(op, q, k, v);
  const LinformerSizes s{q.extent[0], q.extent[1], k.extent[1],        q.extent[2],
                         q.extent[3], v.extent[3], o.projected_length, o.max_length};
  if (s.P < 1) fail(op, "options.projected_length is " + std::to_string(s.P) + ", expected ≥ 1");
  if (s.N_max < 1) fail(op, "options.max_length is " + std::to_string(s.N_max) + ", expected ≥ 1");
  if (s.Nk > s.N_max)
    fail_with(op, "k.extent[1] (sequence) is ", s.Nk, ", expected ≤ ", s.N_max,
              " (options.max_length): E and F have one column per position and none for positions past it");
  const int64_t heads = o.share_heads ? 1 : s.H;
  const char* shape =
      o.share_heads ? "[1, projected_length, max_length] with share_heads" : "[heads, projected_length, max_length]";
  const int64_t expected = checked_mul(op, "E's size", heads, checked_mul(op, "E's size", s.P, s.N_max));
  check_size(op, "E", int64_t(E_size), expected, shape);
  if (o.share_key_value) {
    check_size(op, "F", int64_t(F_size), 0, "empty: share_key_value projects values with E");
  } else {
    check_size(op, "F", int64_t(F_size), expected, shape);
  }
  check_key_lengths(op, o.key_lengths, s.B, s.Nk);
  check_scale(op, o.scale);
  return s;
}

}  // namespace linattn::detail
