#pragma once
// The operator table's rows of two model families over the recurrence layer's operators:
//
// "mamba2" (mamba2_row.cpp): Mamba-2's state-space duality (SSD) with mamba_ssm's arguments, run by the
// decayed family's chunked operator (decay.hpp, Decay::token) as python/linattn/mamba.py maps it:
//   dt_t = softplus(g_t + dt_bias_h)          (mamba_ssm's dt_softplus=True; the default dt_limit)
//   h_t  = exp(dt_t·A_h)·h_{t−1} + dt_t·B_t x_tᵀ,   y_t = C_tᵀ h_t + D_h·x_t
// with the table's operands q = C and k = B (the G groups in the first G heads of q and k, [B, N, G, D]
// inside [B, N, H, D]; head h reads group h / (H/G); the other heads are not read and get zero gradients),
// v = x (value_dim = P), g = dt before softplus ([B, N, H, 1]); dim is the state size N. A, D and dt_bias
// [H] are the configuration's (Options), drawn as Mamba-2 initialises them; the backward writes dA, dD
// and ddt_bias there. Each group runs as one decayed call whose C and B are views with head stride 0 (no
// copy); the time step, dt·x, dt·A and D·x are elementwise work around the calls.
//
// "rwkv7" (rwkv7_row.cpp): RWKV-7's generalized delta rule (dplr.hpp), token by token (forward and
// backward), with chunk_rwkv7's scale 1: q = r, g = w (the log decay, [B, N, H, D]); a = −κ̂ and b = κ̂·σ(·)
// (κ̂ a unit vector per token and head, as RWKV-7 forms them) are the configuration's, drawn in Options,
// where the backward writes da and db.
#include <vector>

#include "operator_table.hpp"

namespace linattn::table::detail {

// A recurrence row (the decayed family's, the delta rule's, mamba2, rwkv7): causal, with a backward, without
// lse, projections, a stepped state or features. Its gate, calls and oracle, and its models:
struct RecurrenceCalls {
  int64_t (*gate_dim)(const Sizes&);
  Options (*options)(const Sizes&);
  void (*forward)(const Operands&, const Options&);
  void (*backward)(const Operands&, const Options&);
  OracleForward (*oracle_forward)(const OracleInputs&, const Options&);
  OracleBackward (*oracle_backward)(const OracleInputs&, const Options&);
};
struct RecurrenceModels {
  double (*forward_flops)(const Sizes&);
  double (*backward_flops)(const Sizes&);
  double (*forward_bytes)(const Sizes&);
  double (*backward_bytes)(const Sizes&);
  double (*working_floats)(const Sizes&, bool backward);
};
Operator recurrence_row(const char* name, const char* summary, const RecurrenceCalls& calls,
                        const RecurrenceModels& models, std::vector<TestCase> (*test_cases)(),
                        std::vector<TestCase> (*gradient_cases)(), double bound);

// The decayed rows' models (operator_table.cpp), which the mamba2 row's calls run under.
double decayed_forward_count(const Sizes& s);
double decayed_backward_count(const Sizes& s);
double decayed_working_floats(const Sizes& s, bool backward);

// G after its default (0: one group per head); throws naming groups when it does not divide heads.
int64_t mamba2_groups(const Sizes& s);

Operator mamba2_row(std::vector<TestCase> (*test_cases)(), std::vector<TestCase> (*gradient_cases)(), double bound);
Operator rwkv7_row(std::vector<TestCase> (*test_cases)(), std::vector<TestCase> (*gradient_cases)(), double bound);

// The fp64 oracle's gradients of mamba2's per-head parameters, for the tests that check the fast
// backward's dA, dD and ddt_bias (Options): each [H].
struct Mamba2ParameterGradients {
  std::vector<double> dA, dD, ddt_bias;
};
Mamba2ParameterGradients mamba2_oracle_parameter_gradients(const OracleInputs& in, const Options& o);

}  // namespace linattn::table::detail
