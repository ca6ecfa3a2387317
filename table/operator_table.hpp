#pragma once
// The operator table (after ggml's test-backend-ops): each operator is declared once, here, with its
// name, its fast forward and backward, its fp64 oracle, its flop and byte models and its test cases.
// The oracle sweep and the finite-difference checks (tests/), the benchmarks (bench/) and the
// command's bench and compare (tools/) all read it, so a new operator is one new row. It uses only
// the public headers (include/linattn).
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "linattn/decay.hpp"
#include "linattn/delta.hpp"
#include "linattn/dplr.hpp"
#include "linattn/linear_attention.hpp"
#include "linattn/linformer.hpp"
#include "linattn/recurrent_state.hpp"
#include "linattn/reference.hpp"
#include "linattn/softmax_attention.hpp"
#include "linattn/view.hpp"

namespace linattn::table {

// One configuration of an operator. What an operator does not use is ignored.
struct Sizes {
  int64_t batch = 1, heads = 1, seq_q = 1, seq_k = 1, dim = 64, value_dim = 64;
  // The mask where the operator offers one (Operator::causality == optional); fixed otherwise.
  bool causal = false;
  // linear, causal, recurrent: the feature map ("elu", "relu", "identity", "favor").
  std::string_view map = "elu";
  bool normalize = true;                 // linear family: the normaliser (random_fourier: always false)
  int64_t features = 0;                  // favor, random_fourier: m random features (0: the operator's default)
  uint64_t seed = 0;                     // favor, random_fourier: the draw
  int64_t chunk = 32;                    // causal linear: tokens per chunk (LinearAttentionOptions::chunk_size)
  int64_t projected = 0;                 // linformer: P (0: min(Nk, 256))
  int64_t max_length = 0;                // linformer: N_max, the projections' columns (0: Nk)
  bool share_heads = false;              // linformer: one projection pair for all heads
  std::span<const int64_t> key_lengths;  // per batch; empty: every key (not for recurrent)
  // decayed rows: packed sequences along the time axis of batch row 0 (DecayedAttentionOptions::cu_seqlens)
  std::span<const int64_t> cu_seqlens;
  // mamba2: G, the groups of B and C (0: one per head); it divides heads (recurrence_rows.hpp).
  int64_t groups = 0;
};

enum class Causality { never, always, optional };

// The library options of one configuration, built once (a FAVOR+ draw is not free) and passed to
// every call.
struct Options {
  SoftmaxAttentionOptions softmax;
  LinearAttentionOptions linear;
  LinformerOptions linformer;
  DecayedAttentionOptions decayed;  // its g_gamma points into g_gamma, shared by every copy
  std::shared_ptr<const std::vector<float>> g_gamma;
  // The delta rows (delta_rows.hpp): their options, β [B, N, H, 1] drawn for the configuration, and
  // where their backward writes dβ (shared by every copy).
  DeltaRuleOptions delta;
  std::shared_ptr<const std::vector<float>> beta;
  std::shared_ptr<std::vector<float>> dbeta;
  // The mamba2 row (recurrence_rows.hpp): A, D and dt_bias [H] drawn as Mamba-2 initialises them, where
  // its backward writes dA, dD and ddt_bias, its scratch (dt·x and dt·A, [B, N, H, P + 1]) and G.
  int64_t groups = 0;
  std::shared_ptr<const std::vector<float>> A, D, dt_bias;
  std::shared_ptr<std::vector<float>> dA, dD, ddt_bias, scratch;
  // The rwkv7 row: a = −κ̂ and b = κ̂·σ(·) [B, N, H, D] drawn as RWKV-7 forms them, where its backward
  // writes da and db, and the DPLR options.
  DplrOptions dplr;
  std::shared_ptr<const std::vector<float>> a, b;
  std::shared_ptr<std::vector<float>> da, db;
};

// The fp32 operands of one call, caller-owned; what an operator does not use stays empty.
struct Operands {
  ConstTensorView q, k, v, dout;  // [B, Nq|Nk, H, D|E]
  TensorView out, dq, dk, dv;
  std::span<float> lse;         // softmax, linformer: [B, H, Nq]
  std::span<const float> E, F;  // linformer: [P_heads, P, N_max]
  std::span<float> dE, dF;
  ConstTensorView g;  // decayed rows with a gate tensor: [B, N, H, gate_dim] log decays
  TensorView dg;
  RecurrentState* state = nullptr;  // recurrent: stepped through every token (the caller resets it)
};

// The oracle's fp64 inputs and results.
struct OracleInputs {
  reference::Tensor q, k, v, dout;
  std::vector<double> E, F;  // linformer
  reference::Tensor g;       // decayed rows with a gate tensor (empty otherwise)
};
struct OracleForward {
  reference::Tensor out;
  std::vector<double> lse;  // softmax, linformer
};
struct OracleBackward {
  reference::Tensor dq, dk, dv;
  std::vector<double> dE, dF;  // linformer
  reference::Tensor dg;        // decayed rows with a gate tensor
};

// How a test case stores its tensors: strides are the test's to vary, not the operator's.
enum class Storage {
  bnhd,    // [B, N, H, D] contiguous
  bhnd,    // [B, H, N, D] contiguous
  padded,  // gaps after each row, head and token: strides that differ from extents
};
struct TestCase {
  Sizes sizes;
  Storage storage = Storage::bnhd;
  bool ragged = false;  // per-batch key lengths shorter than Nk (the test supplies them)
  bool packed = false;  // decayed rows, B = 1: several sequences packed along N (packed_boundaries)
};

struct Operator {
  const char* name;  // the table's name: "softmax", "linear", "causal", "recurrent", "favor", ...
  const char* summary;
  Causality causality;
  bool has_backward;
  bool has_lse;          // writes lse (and its backward reads out and lse)
  bool has_projections;  // takes E, F (and writes dE, dF)
  bool carries_state;    // steps Operands::state
  // M, the features the linear family sums over (0 for the others).
  int64_t (*feature_dim)(const Sizes&);
  // Columns of the gate tensor g (Operands::g, [B, N, H, ·]): 1 for simple_gla, D for gla, 0 for the
  // operators without one. Tests and benchmarks draw it with log_decay_of_normal.
  int64_t (*gate_dim)(const Sizes&);
  Options (*options)(const Sizes&);
  void (*forward)(const Operands&, const Options&);
  void (*backward)(const Operands&, const Options&);  // null without a backward
  OracleForward (*oracle_forward)(const OracleInputs&, const Options&);
  OracleBackward (*oracle_backward)(const OracleInputs&, const Options&);  // null without a backward
  // Flops of one call (a flop is one fp32 add or multiply; exp and divide count 1): what the
  // algorithm performs, leading and lower-order terms, elementwise feature maps not counted.
  double (*forward_flops)(const Sizes&);
  double (*backward_flops)(const Sizes&);  // 0 without a backward
  // Compulsory bytes: each input read once and each output written once, in fp32.
  double (*forward_bytes)(const Sizes&);
  double (*backward_bytes)(const Sizes&);
  // Floats the operator holds beyond its operands (saved state, features, scratch) in a forward
  // (and, with `backward`, forward and backward): the memory estimate errs high.
  double (*working_floats)(const Sizes&, bool backward);
  // Awkward shapes: 1, 63, 65, 97 around the tiles and chunks, odd head dims, E ≠ D, Nq ≠ Nk.
  std::vector<TestCase> (*test_cases)();
  // Small shapes for the finite-difference checks of the oracle (every element is perturbed).
  std::vector<TestCase> (*gradient_cases)();
  // The bound on max|fp32 − fp64| / max|fp64| against the oracle.
  double bound;
};

// Every operator, in a fixed order.
std::span<const Operator> operators();
// By table name; throws linattn::Error naming the choices when there is none.
const Operator& find(std::string_view name);

// Linformer's P after its default, and the floats of E (or F): P_heads · P · N_max.
int64_t projected_length(const Sizes& s);
int64_t projection_floats(const Sizes& s);

// The key lengths of a ragged test case: Nk − 1 − 7b for batch b, at least 2 keys where there are 2
// (with one visible key the normalised output is v_0 whatever q and k are, so dq and dk are pure
// cancellation and a relative error means nothing).
std::vector<int64_t> ragged_key_lengths(const Sizes& s);

// The sequence boundaries of a packed test case of N tokens (B = 1): 0, 1, N/3, N (ascending, no repeats).
std::vector<int64_t> packed_boundaries(const Sizes& s);

// A log decay drawn as flash-linear-attention's tests draw theirs: logsigmoid(x) / 16 for a standard
// normal x, so that exp(g) lies in about [0.5, 1) (g in about [−0.7, 0)).
float log_decay_of_normal(double x);

// Runs the recurrent step over a whole sequence: token n of every (batch, head) per step.
void step_through(TensorView out, ConstTensorView q, ConstTensorView k, ConstTensorView v, RecurrentState& state,
                  const LinearAttentionOptions& options);

// What the causal forward's strips actually multiply (fewer than forward_flops counts): the
// benchmarks report it beside the algorithm's count (FLOPS_executed).
double causal_forward_flops_executed(const Sizes& s);

}  // namespace linattn::table
