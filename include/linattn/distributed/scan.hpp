#pragma once
// Sequence-parallel linear attention over MPI: each rank of comm holds a contiguous shard of the
// sequence (rank order = sequence order; shards may differ in length, and may be empty), and the
// ranks exchange only K×V states, never tokens, so the bytes sent do not depend on N.
//
// The causal families all follow one plan (docs/distributed.md):
//   1. agreement: one MPI_Allgather of every rank's shape signature and local checks (comm.hpp);
//   2. the shard's state transform T_r from its own tokens, entering state zero:
//        plain        (S, z) ↦ (S + S_r, z + z_r)             an addition
//        decayed      S ↦ diag(a_r) S + S_r                    an affine map (a_r: the shard's decay)
//        delta rule   S ↦ A_r S + B_r                          an affine map with a K×K matrix
//   3. one exclusive scan with a user-defined associative, non-commutative MPI_Op (composition of the
//      transforms, in rank order) gives rank r the state entering its shard, T_{r−1}∘…∘T_0(0), in
//      ⌈log₂ P⌉ rounds: recursive doubling over MPI_Sendrecv with MPI_Reduce_local, because Debian's
//      OpenMPI 4.1 runs MPI_Exscan as a chain of P − 1 steps (LINATTN_MPI_SCAN=exscan selects
//      MPI_Exscan itself);
//   4. the rank finishes its outputs with the single-process operator from that state.
// The backward is the reverse scan of the state gradients (the transposed maps, in reverse rank
// order, over a communicator of the same ranks reversed; cached on comm as an attribute).
// Non-causal linear attention sums (S, z) over all ranks: one MPI_Allreduce, in rank order.
//
// Cost: the single-process operators are reused as they are, so a shard's transform is computed
// before its local pass (plain and decayed: one extra product of n·K·V over the shard; delta rule:
// the local pass itself on K + V value columns, then a product of n·K·V), and with even shards the
// overhead against one process is about t_transform / t_pass: for plain causal attention (D = E = 64,
// chunk 32) the shard sums took 0.11–0.15 s of CPU against 0.23–0.33 s for the forward (n = 512K).
// The plain causal forward's last rank, which nobody waits for, skips its sums and runs its first
// tokens from the zero state meanwhile, correcting them when the entering state arrives; shards from
// causal_shard_lengths give it the extra tokens that even out the ranks' time. Non-causal attention
// has no such cost (its sums are the operator's own).
//
// Results are the same bitwise from run to run for a given P and shard split (the scan's order of
// combination is fixed by P, the operators keep rank order, and the local passes are deterministic),
// and equal to the single-process operator's within fp32 rounding. Not supported here: key_lengths
// and cu_seqlens (a shard is one contiguous piece of each batch row's sequence).
#include <cstdint>
#include <vector>

#include "linattn/decay.hpp"
#include "linattn/delta.hpp"
#include "linattn/distributed/comm.hpp"
#include "linattn/linear_attention.hpp"
#include "linattn/view.hpp"

namespace linattn::distributed {

// The plain causal forward's schedule (docs/distributed.md): ranks 0 … P − 2 form their shard's sums
// (S, z) before their pass, as the scan needs them; the last rank, whose sums nobody reads, runs its
// first kCausalSumsPerPass·n tokens from the zero state meanwhile (n: the longest earlier shard), then
// takes the entering state, goes on from it, and finishes those first tokens with it. Both constants
// are times against a causal chunked pass over as many tokens, measured on one core at D = E = 64,
// chunk 32 (the sums' flop ratio is 1/3): the shard sums 0.33–0.40, the finishing 0.52–0.65. The
// first is taken on the low side: a last rank that reaches the scan early idles, one that reaches it
// late holds up rank 0, whose pass is the longest.
inline constexpr double kCausalSumsPerPass = 0.35;
inline constexpr double kCausalFinishPerPass = 0.55;

// Shard lengths [ranks] adding up to N that even out the ranks' time in the causal forward: ranks
// 0 … P − 2 take (1 + s)·n0 in passes of a token, the last rank n_last + c·s·n0, so the others get
// n0 = ⌊N / (P + s − c·s)⌋ (s = sums_per_pass, c = finish_per_pass) and the last shard the rest,
// about n0·(1 + s − c·s). Throws linattn::Error unless N ≥ 0, ranks ≥ 1 and s, c are in [0, 1].
std::vector<int64_t> causal_shard_lengths(int64_t N, int ranks, double sums_per_pass = kCausalSumsPerPass,
                                          double finish_per_pass = kCausalFinishPerPass);

// Linear attention (linear_attention.hpp) over the shards of comm. This rank's shard: q, k
// [B, n_r, H, D], v and out [B, n_r, H, E]. options.causal chooses causal (the Exscan) or non-causal
// (every query sees every rank's keys: the Allreduce); options.key_lengths must be empty.
void linear_attention_forward(MPI_Comm comm, TensorView out, ConstTensorView q, ConstTensorView k, ConstTensorView v,
                              const LinearAttentionOptions& options = {});
// dq, dk, dv shaped like this rank's q, k, v (overwritten); dout like out.
void linear_attention_backward(MPI_Comm comm, TensorView dq, TensorView dk, TensorView dv, ConstTensorView dout,
                               ConstTensorView q, ConstTensorView k, ConstTensorView v,
                               const LinearAttentionOptions& options = {});

// The decayed family (decay.hpp) over the shards of comm: this rank's q, k [B, n_r, H, K], v and out
// [B, n_r, H, V], g [B, n_r, H, 1] (token) or [B, n_r, H, K] (key) or empty; options.cu_seqlens
// must be empty. The sequence starts from the zero state on rank 0.
void decayed_attention_forward(MPI_Comm comm, TensorView out, ConstTensorView q, ConstTensorView k, ConstTensorView v,
                               ConstTensorView g, const DecayedAttentionOptions& options = {});
// dq, dk, dv, dg shaped like q, k, v, g (dg empty when g is).
void decayed_attention_backward(MPI_Comm comm, TensorView dq, TensorView dk, TensorView dv, TensorView dg,
                                ConstTensorView dout, ConstTensorView q, ConstTensorView k, ConstTensorView v,
                                ConstTensorView g, const DecayedAttentionOptions& options = {});

// The delta rule (delta.hpp) over the shards of comm: this rank's q, k [B, n_r, H, K], v and out
// [B, n_r, H, V], beta [B, n_r, H, 1], g [B, n_r, H, 1], [B, n_r, H, K] or empty; options.cu_seqlens
// must be empty. The sequence starts from the zero state on rank 0.
void delta_rule_forward(MPI_Comm comm, TensorView out, ConstTensorView q, ConstTensorView k, ConstTensorView v,
                        ConstTensorView beta, ConstTensorView g, const DeltaRuleOptions& options = {});
// dq, dk, dv, dbeta, dg shaped like q, k, v, beta, g (dg empty when g is).
void delta_rule_backward(MPI_Comm comm, TensorView dq, TensorView dk, TensorView dv, TensorView dbeta, TensorView dg,
                         ConstTensorView dout, ConstTensorView q, ConstTensorView k, ConstTensorView v,
                         ConstTensorView beta, ConstTensorView g, const DeltaRuleOptions& options = {});

}  // namespace linattn::distributed
