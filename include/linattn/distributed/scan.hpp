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
// Results are the same bitwise from run to run for a given P and shard split (the scan's order of
// combination is fixed by P, the operators keep rank order, and the local passes are deterministic),
// and equal to the single-process operator's within fp32 rounding. Not supported here: key_lengths
// and cu_seqlens (a shard is one contiguous piece of each batch row's sequence).
#include "linattn/decay.hpp"
#include "linattn/delta.hpp"
#include "linattn/distributed/comm.hpp"
#include "linattn/linear_attention.hpp"
#include "linattn/view.hpp"

namespace linattn::distributed {

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
