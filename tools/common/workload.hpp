#pragma once
// One attention configuration, ready to run: the operator, its sizes, random inputs, and the
// documented flop count and memory estimate that bench and compare report (docs/cli.md).
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "linattn/feature_map.hpp"
#include "linattn/linear_attention.hpp"
#include "linattn/recurrent_state.hpp"
#include "linattn/view.hpp"

namespace linattn::cli {

enum class Op { softmax, linear, causal, recurrent, performer, linformer };
const char* op_name(Op op);
// Name → op, for CLI11's CheckedTransformer.
const std::map<std::string, Op>& op_names();
// The recurrent step has no backward: it serves generation.
bool has_backward(Op op);
// Causal ops are compared against causal softmax.
bool is_causal(Op op);

struct Problem {
  Op op = Op::softmax;
  int64_t batch = 1, heads = 1, seq = 1, dim = 64, value_dim = 64;
  bool causal = false;    // softmax only: the causal mask (causal and recurrent are causal anyway)
  int64_t features = 0;   // performer: M random features (0: the library's default for D)
  int64_t projected = 0;  // linformer: k, the projected length (0: min(N, 256))
  uint64_t seed = 0;      // inputs and random features
};

// M: the feature dim linear attention works in (D for elu+1).
int64_t feature_dim(const Problem& p);
// Linformer's k after defaults.
int64_t projected_length(const Problem& p);
// Floating-point operations of one forward and one backward, leading terms (docs/cli.md).
double forward_flops(const Problem& p);
double backward_flops(const Problem& p);
// Bytes the configuration needs: inputs, outputs, gradients when `backward`, and the operator's
// saved state and scratch, with a fixed allowance for thread tiles. An estimate that errs high.
double estimated_bytes(const Problem& p, bool backward);

// The recurrent step over a whole sequence: token n of every (batch, head) per step, from state.
void recurrent_forward(TensorView out, ConstTensorView q, ConstTensorView k, ConstTensorView v, RecurrentState& state,
                       const LinearAttentionOptions& options);

// Buffers and the operator call for one Problem; inputs are N(0, 1) from p.seed.
class Workload {
 public:
  explicit Workload(const Problem& p);
  ~Workload();
  Workload(const Workload&) = delete;
  Workload& operator=(const Workload&) = delete;

  void forward();
  // Gradients for dout ~ N(0, 1); allocates them on first use. Runs after forward().
  void backward();
  // [B, N, H, E] contiguous.
  std::span<const float> out() const { return out_; }

 private:
  struct Extra;
  Problem p_;
  FeatureMapPtr map_;
  std::vector<float> q_, k_, v_, out_, lse_, dout_, dq_, dk_, dv_;
  std::unique_ptr<Extra> extra_;  // the recurrent state, Linformer projections
};

}  // namespace linattn::cli
