#pragma once
// Sequence parallelism for the transformer: every sequence of a batch split into contiguous shards,
// one per rank of a group (linattn_mpi's linattn::distributed::sequence_parallel makes one over an
// MPI communicator; `mpirun -np P linattn train --seq-parallel` trains with it).
//
// Everything in a block except attention works token by token, so a rank runs it on its own shard
// alone. What needs the other shards goes through this interface: causal attention over the whole
// sequence (each rank passing its shard of q, k, v; the semantics of the single-process operators,
// the sequence starting from the zero state on rank 0) and the sums over ranks (the loss and its
// normaliser, the parameter gradients). Every rank makes the same calls in the same order.
#include <cstdint>
#include <span>

#include "linattn/decay.hpp"
#include "linattn/delta.hpp"
#include "linattn/linear_attention.hpp"
#include "linattn/softmax_attention.hpp"
#include "linattn/view.hpp"

namespace linattn::model {

class SequenceParallel {
 public:
  virtual ~SequenceParallel() = default;

  virtual int rank() const = 0;
  virtual int ranks() const = 0;
  // x ← the element-wise sum of every rank's x, added in rank order; every rank receives the same bits
  // (so replicated parameters updated from the sum stay identical).
  virtual void sum(std::span<float> x) const = 0;
  virtual void sum(std::span<double> x) const = 0;

  // Causal attention of this rank's shard against the whole sequence: shapes, options and outputs as
  // softmax_attention_forward/backward, causal_linear_attention_forward/backward (options.causal is
  // implied), decayed_attention_forward/backward and delta_rule_forward/backward without states.
  virtual void softmax_forward(TensorView out, std::span<float> lse, ConstTensorView q, ConstTensorView k,
                               ConstTensorView v, const SoftmaxAttentionOptions& options) const = 0;
  virtual void softmax_backward(TensorView dq, TensorView dk, TensorView dv, ConstTensorView dout, ConstTensorView q,
                                ConstTensorView k, ConstTensorView v, ConstTensorView out, std::span<const float> lse,
                                const SoftmaxAttentionOptions& options) const = 0;
  virtual void linear_forward(TensorView out, ConstTensorView q, ConstTensorView k, ConstTensorView v,
                              const LinearAttentionOptions& options) const = 0;
  virtual void linear_backward(TensorView dq, TensorView dk, TensorView dv, ConstTensorView dout, ConstTensorView q,
                               ConstTensorView k, ConstTensorView v, const LinearAttentionOptions& options) const = 0;
  virtual void decayed_forward(TensorView out, ConstTensorView q, ConstTensorView k, ConstTensorView v,
                               ConstTensorView g, const DecayedAttentionOptions& options) const = 0;
  virtual void decayed_backward(TensorView dq, TensorView dk, TensorView dv, TensorView dg, ConstTensorView dout,
                                ConstTensorView q, ConstTensorView k, ConstTensorView v, ConstTensorView g,
                                const DecayedAttentionOptions& options) const = 0;
  virtual void delta_forward(TensorView out, ConstTensorView q, ConstTensorView k, ConstTensorView v,
                             ConstTensorView beta, ConstTensorView g, const DeltaRuleOptions& options) const = 0;
  virtual void delta_backward(TensorView dq, TensorView dk, TensorView dv, TensorView dbeta, TensorView dg,
                              ConstTensorView dout, ConstTensorView q, ConstTensorView k, ConstTensorView v,
                              ConstTensorView beta, ConstTensorView g, const DeltaRuleOptions& options) const = 0;
};

// One process holding the whole sequence: the single-process operators, sums that change nothing.
const SequenceParallel& single_process();
// Throws linattn::Error unless parallel is single_process(), naming what runs on one process only.
void require_single_process(const SequenceParallel& parallel, const char* what);

// The positions [begin, begin + length) of a sequence of N tokens that rank holds of ranks: the
// first N mod ranks shards one token longer than the rest.
struct ShardRange {
  int64_t begin = 0, length = 0;
};
ShardRange shard_range(int64_t N, int rank, int ranks);

}  // namespace linattn::model
