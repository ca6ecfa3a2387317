#pragma once
// One attention configuration, ready to run: the operator, its sizes, random inputs, and the flop
// count and memory estimate that bench and compare report. The operators, their calls and their
// models are the operator table's (table/operator_table.hpp); this file maps the command's
// flags onto it (docs/cli.md).
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "linattn/feature_map.hpp"
#include "linattn/half.hpp"
#include "linattn/linear_attention.hpp"
#include "linattn/recurrent_state.hpp"
#include "linattn/view.hpp"
#include "operator_table.hpp"

namespace linattn::cli {

// favor is FAVOR+ (the table's "favor"); the command names it "performer" in its output, as it
// always has, and takes both "favor" and "performer" as --op / --methods values. The decayed family
// (retention, lightning, simple_gla, gla: the chunked decayed_attention_*) and the delta rule
// (delta_rule, gated_delta_rule, kda: the chunked delta_rule_*) are bench's and compare's, not run's;
// so are Mamba-2's SSD (mamba2) and RWKV-7 (rwkv7), the table's rows over those families (f32 only).
enum class Op {
  softmax,
  linear,
  causal,
  recurrent,
  favor,
  linformer,
  retention,
  lightning,
  simple_gla,
  gla,
  delta_rule,
  gated_delta_rule,
  kda,
  mamba2,
  rwkv7
};
const char* op_name(Op op);
// Name → op, for CLI11's CheckedTransformer (the printed names, and the alias "favor").
const std::map<std::string, Op>& op_names();
// The table's row for the op.
const table::Operator& table_operator(Op op);
// The recurrent step has no backward: it serves generation.
bool has_backward(Op op);
// Causal ops are compared against causal softmax.
bool is_causal(Op op);
// The decayed family (decay.hpp).
bool is_decayed(Op op);
// The delta rule (delta.hpp).
bool is_delta(Op op);
// The recurrences (the decayed family, the delta rule, mamba2, rwkv7): bench's and compare's, not run's.
bool is_recurrence(Op op);
// bf16 and f16 storage (--dtype): every op but mamba2 and rwkv7, whose rows run in f32.
bool has_half(Op op);

// --dtype's names: "f32", "bf16", "f16".
inline const std::map<std::string, DType>& dtype_names() {
  static const std::map<std::string, DType> names{{"f32", DType::f32}, {"bf16", DType::bf16}, {"f16", DType::f16}};
  return names;
}

struct Problem;
// Refuses --dtype bf16|f16 for an op without half storage (UsageError naming both).
void check_dtype(const Problem& p);

struct Problem {
  Op op = Op::softmax;
  int64_t batch = 1, heads = 1, seq = 1, dim = 64, value_dim = 64;
  bool causal = false;    // softmax only: the causal mask (causal and recurrent are causal anyway)
  int64_t features = 0;   // favor: M random features (0: the library's default for D)
  int64_t projected = 0;  // linformer: k, the projected length (0: min(N, 256))
  uint64_t seed = 0;      // inputs and random features
  int64_t groups = 0;     // mamba2: G, the groups of B and C (0: one per head)
  // --dtype: the storage type of q, k, v, out, dout and the gradients (inputs drawn in fp32, rounded).
  DType dtype = DType::f32;
};

// The table's sizes of the problem: N queries and N keys, the library's default chunk (the decayed
// family's for its ops).
table::Sizes sizes(const Problem& p);
// M: the feature dim linear attention works in (D for elu+1, and for the operators without features).
int64_t feature_dim(const Problem& p);
// Linformer's k after defaults.
int64_t projected_length(const Problem& p);
// Floating-point operations of one forward and one backward: the table's flop models (docs/cli.md).
double forward_flops(const Problem& p);
double backward_flops(const Problem& p);
// Bytes the configuration needs: inputs, outputs, gradients when `backward`, and the operator's
// saved state and scratch, with a fixed allowance for thread tiles. An estimate that errs high.
double estimated_bytes(const Problem& p, bool backward);

// Buffers and the operator call for one Problem; inputs are N(0, 1) from p.seed, the decayed ops'
// gate logsigmoid(N(0, 1)) / 16 (table::log_decay_of_normal).
class Workload {
 public:
  explicit Workload(const Problem& p);
  ~Workload();
  Workload(const Workload&) = delete;
  Workload& operator=(const Workload&) = delete;

  void forward();
  // Gradients for dout ~ N(0, 1); allocates them on first use. Runs after forward().
  void backward();
  // [B, N, H, E] contiguous (a half run's out widened to fp32).
  std::span<const float> out() const;

 private:
  struct Extra;
  table::Operands operands();

  Problem p_;
  const table::Operator& op_;
  table::Options options_;  // built once: a FAVOR+ draw is not free
  std::vector<float> q_, k_, v_, out_, lse_, dout_, dq_, dk_, dv_;
  std::vector<float> g_, dg_;                 // the decayed ops' gate, [B, N, H, gate_dim], and its gradient
  std::unique_ptr<Extra> extra_;              // the recurrent state, Linformer projections
  std::unique_ptr<class HalfOperands> half_;  // --dtype bf16|f16: the half copies and calls
  mutable std::vector<float> half_out_;       // their out, widened
};

}  // namespace linattn::cli
