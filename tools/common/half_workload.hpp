#pragma once
// The command's `--dtype bf16|f16`: a Workload's operands rounded to half precision, and each op's
// forward and backward through the half-precision API (linattn/half_attention.hpp).
#include <memory>
#include <span>

#include "linattn/half.hpp"
#include "operator_table.hpp"

namespace linattn::cli {

enum class Op;

// The fp32 operands (a Workload's) and what the half calls need beyond them.
class HalfOperands {
 public:
  // Rounds q, k, v, g (and dout, when the operands have one) to dtype; allocates the half outputs.
  HalfOperands(DType dtype, const table::Operands& fp32, const table::Options& options);
  ~HalfOperands();
  HalfOperands(const HalfOperands&) = delete;
  HalfOperands& operator=(const HalfOperands&) = delete;

  void forward(Op op, const table::Options& options);
  void backward(Op op, const table::Options& options);
  bool has_dout() const;
  // out, widened to fp32 ([B, N, H, E] contiguous).
  void out_to(std::span<float> out) const;

 private:
  struct Buffers;
  std::unique_ptr<Buffers> b_;
};

}  // namespace linattn::cli
