// The transformer's SequenceParallel over an MPI communicator (linattn/distributed/sequence_parallel.hpp).
#include "linattn/distributed/sequence_parallel.hpp"

#include <algorithm>
#include <vector>

#include "distributed/mpi_calls.hpp"
#include "distributed/scan_ops.hpp"
#include "linattn/distributed/ring.hpp"
#include "linattn/distributed/scan.hpp"

namespace linattn::distributed {
namespace {

RingAttentionOptions ring_options(const SoftmaxAttentionOptions& options) {
  RingAttentionOptions ring;
  ring.scale = options.scale;
  ring.causal = options.causal;  // self-attention: bottom-right and top-left alignment agree
  ring.key_lengths = options.key_lengths;
  return ring;
}

LinearAttentionOptions causal(LinearAttentionOptions options) {
  options.causal = true;
  return options;
}

class MpiSequenceParallel final : public model::SequenceParallel {
 public:
  explicit MpiSequenceParallel(MPI_Comm comm) : comm_(comm) {}

  int rank() const override { return detail::comm_rank(comm_); }
  int ranks() const override { return detail::comm_size(comm_); }

  // In rank order to rank 0 (a non-commutative MPI_Op), then rank 0's bits to everyone.
  void sum(std::span<float> x) const override {
    const detail::ErrorsReturn errors(comm_);
    const int count = detail::mpi_count(int64_t(x.size()), "the sum's floats");
    std::vector<float> total(rank() == 0 ? x.size() : 0);
    detail::reduce(x.data(), total.data(), count, MPI_FLOAT, detail::add_op(), 0, comm_);
    if (rank() == 0) std::copy(total.begin(), total.end(), x.begin());
    detail::bcast(x.data(), count, MPI_FLOAT, 0, comm_);
  }
  // Few values (losses, counts): every rank gathers all and adds them in rank order itself.
  void sum(std::span<double> x) const override {
    const detail::ErrorsReturn errors(comm_);
    const int count = detail::mpi_count(int64_t(x.size()), "the sum's doubles");
    std::vector<double> all(x.size() * size_t(ranks()));
    detail::allgather(x.data(), all.data(), count, MPI_DOUBLE, comm_);
    for (size_t i = 0; i < x.size(); ++i) {
      double total = 0;
      for (int r = 0; r < ranks(); ++r) total += all[size_t(r) * x.size() + i];
      x[i] = total;
    }
  }

  void softmax_forward(TensorView out, std::span<float> lse, ConstTensorView q, ConstTensorView k, ConstTensorView v,
                       const SoftmaxAttentionOptions& options) const override {
    ring_attention_forward(comm_, out, lse, q, k, v, ring_options(options));
  }
  void softmax_backward(TensorView dq, TensorView dk, TensorView dv, ConstTensorView dout, ConstTensorView q,
                        ConstTensorView k, ConstTensorView v, ConstTensorView out, std::span<const float> lse,
                        const SoftmaxAttentionOptions& options) const override {
    ring_attention_backward(comm_, dq, dk, dv, dout, q, k, v, out, lse, ring_options(options));
  }
  void linear_forward(TensorView out, ConstTensorView q, ConstTensorView k, ConstTensorView v,
                      const LinearAttentionOptions& options) const override {
    linear_attention_forward(comm_, out, q, k, v, causal(options));
  }
  void linear_backward(TensorView dq, TensorView dk, TensorView dv, ConstTensorView dout, ConstTensorView q,
                       ConstTensorView k, ConstTensorView v, const LinearAttentionOptions& options) const override {
    linear_attention_backward(comm_, dq, dk, dv, dout, q, k, v, causal(options));
  }
  void decayed_forward(TensorView out, ConstTensorView q, ConstTensorView k, ConstTensorView v, ConstTensorView g,
                       const DecayedAttentionOptions& options) const override {
    decayed_attention_forward(comm_, out, q, k, v, g, options);
  }
  void decayed_backward(TensorView dq, TensorView dk, TensorView dv, TensorView dg, ConstTensorView dout,
                        ConstTensorView q, ConstTensorView k, ConstTensorView v, ConstTensorView g,
                        const DecayedAttentionOptions& options) const override {
    decayed_attention_backward(comm_, dq, dk, dv, dg, dout, q, k, v, g, options);
  }
  void delta_forward(TensorView out, ConstTensorView q, ConstTensorView k, ConstTensorView v, ConstTensorView beta,
                     ConstTensorView g, const DeltaRuleOptions& options) const override {
    delta_rule_forward(comm_, out, q, k, v, beta, g, options);
  }
  void delta_backward(TensorView dq, TensorView dk, TensorView dv, TensorView dbeta, TensorView dg,
                      ConstTensorView dout, ConstTensorView q, ConstTensorView k, ConstTensorView v,
                      ConstTensorView beta, ConstTensorView g, const DeltaRuleOptions& options) const override {
    delta_rule_backward(comm_, dq, dk, dv, dbeta, dg, dout, q, k, v, beta, g, options);
  }

 private:
  MPI_Comm comm_;
};

}  // namespace

std::shared_ptr<const model::SequenceParallel> sequence_parallel(MPI_Comm comm) {
  return std::make_shared<const MpiSequenceParallel>(comm);
}

}  // namespace linattn::distributed
