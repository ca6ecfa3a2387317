// The single-process SequenceParallel (the operators as they are) and the shard split.
#include "linattn/model/sequence_parallel.hpp"

#include <algorithm>
#include <string>

#include "linattn/error.hpp"

namespace linattn::model {
namespace {

class SingleProcess final : public SequenceParallel {
 public:
  int rank() const override { return 0; }
  int ranks() const override { return 1; }
  void sum(std::span<float>) const override {}
  void sum(std::span<double>) const override {}

  void softmax_forward(TensorView out, std::span<float> lse, ConstTensorView q, ConstTensorView k, ConstTensorView v,
                       const SoftmaxAttentionOptions& options) const override {
    softmax_attention_forward(out, lse, q, k, v, options);
  }
  void softmax_backward(TensorView dq, TensorView dk, TensorView dv, ConstTensorView dout, ConstTensorView q,
                        ConstTensorView k, ConstTensorView v, ConstTensorView out, std::span<const float> lse,
                        const SoftmaxAttentionOptions& options) const override {
    softmax_attention_backward(dq, dk, dv, dout, q, k, v, out, lse, options);
  }
  void linear_forward(TensorView out, ConstTensorView q, ConstTensorView k, ConstTensorView v,
                      const LinearAttentionOptions& options) const override {
    causal_linear_attention_forward(out, q, k, v, options);
  }
  void linear_backward(TensorView dq, TensorView dk, TensorView dv, ConstTensorView dout, ConstTensorView q,
                       ConstTensorView k, ConstTensorView v, const LinearAttentionOptions& options) const override {
    causal_linear_attention_backward(dq, dk, dv, dout, q, k, v, options);
  }
  void decayed_forward(TensorView out, ConstTensorView q, ConstTensorView k, ConstTensorView v, ConstTensorView g,
                       const DecayedAttentionOptions& options) const override {
    decayed_attention_forward(out, q, k, v, g, options);
  }
  void decayed_backward(TensorView dq, TensorView dk, TensorView dv, TensorView dg, ConstTensorView dout,
                        ConstTensorView q, ConstTensorView k, ConstTensorView v, ConstTensorView g,
                        const DecayedAttentionOptions& options) const override {
    decayed_attention_backward(dq, dk, dv, dg, {}, dout, {}, q, k, v, g, options);
  }
  void delta_forward(TensorView out, ConstTensorView q, ConstTensorView k, ConstTensorView v, ConstTensorView beta,
                     ConstTensorView g, const DeltaRuleOptions& options) const override {
    delta_rule_forward(out, q, k, v, beta, g, options);
  }
  void delta_backward(TensorView dq, TensorView dk, TensorView dv, TensorView dbeta, TensorView dg,
                      ConstTensorView dout, ConstTensorView q, ConstTensorView k, ConstTensorView v,
                      ConstTensorView beta, ConstTensorView g, const DeltaRuleOptions& options) const override {
    delta_rule_backward(dq, dk, dv, dbeta, dg, {}, dout, {}, q, k, v, beta, g, options);
  }
};

}  // namespace

const SequenceParallel& single_process() {
  static const SingleProcess instance;
  return instance;
}

void require_single_process(const SequenceParallel& parallel, const char* what) {
  if (&parallel != &single_process())
    throw Error(std::string("linattn::model: ") + what + " runs on one process, got a sequence split over " +
                std::to_string(parallel.ranks()) + " ranks (sequence parallelism runs the float model)");
}

ShardRange shard_range(int64_t N, int rank, int ranks) {
  if (N < 0 || ranks < 1 || rank < 0 || rank >= ranks)
    throw Error("linattn::model::shard_range: N " + std::to_string(N) + ", rank " + std::to_string(rank) + " of " +
                std::to_string(ranks) + ", expected N ≥ 0 and 0 ≤ rank < ranks");
  const int64_t base = N / ranks, extra = N % ranks;
  return {rank * base + std::min<int64_t>(rank, extra), base + (rank < extra ? 1 : 0)};
}

}  // namespace linattn::model
