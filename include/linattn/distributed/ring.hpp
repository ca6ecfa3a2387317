#pragma once
// Ring attention: exact softmax attention (softmax_attention.hpp) over a sequence sharded across the
// ranks of an MPI communicator, forward and backward (docs/distributed.md).
//
// Each rank holds a shard [B, n_r, H, D] of q and k and [B, n_r, H, E] of v (self-attention: q, k and
// v of a rank cover the same positions; n_r may differ between ranks and may be 0). The forward
// passes the k/v shards once around the ring (rank r sends to r + 1 and receives from r − 1, P − 1
// steps); each rank attends its queries to each k/v shard in turn and merges the partial results
// with the online softmax (softmax_attention_merge). The backward passes the k/v shards around again
// together with their dk/dv accumulators, which arrive back at their owner after P steps.
//
// Deterministic: every sum runs in an order fixed by ring position (rank r merges the shards of
// r, r − 1, …, r − P + 1 in that order; shard o's dk/dv are summed over ranks o, o + 1, … in that
// order), never by arrival time, so a result is bitwise the same on every run for a given P and
// layout. Against the single-process operator it agrees within fp32 rounding (the sums' order differs).
//
// Traffic per rank and call: the forward sends P − 1 k/v shards, the backward P − 1 k/v shards and P
// dk/dv shards: 4·B·H·(D + E)·n bytes per shard of n, so, unlike linear attention's states, it grows
// with N (N/P per shard). Errors and counters: comm.hpp (shapes agreed before any arithmetic, MPI
// failures as MpiError, CommStats).
#include <mpi.h>

#include <cstdint>
#include <optional>
#include <span>

#include "linattn/view.hpp"

namespace linattn::distributed {

// Which global positions each rank's shard holds.
enum class RingLayout {
  // Rank r holds the r-th contiguous block: positions [n_0 + … + n_{r−1}, n_0 + … + n_r).
  contiguous,
  // Load-balanced for causal attention. The sequence is cut into 2P blocks c_0, c_1, …, c_{2P−1}, in
  // sequence order; rank r holds c_r and c_{2P−1−r}, its shard being c_r's rows followed by
  // c_{2P−1−r}'s: [early; late]. The early block's length is RingAttentionOptions::early_length, the
  // late block's the rest of the shard. Under the causal mask each rank then has the same work at
  // every ring step (two full blocks; at step 0 its two diagonal blocks and one full), where the
  // contiguous layout leaves rank 0 idle while rank P − 1 attends to everything. balanced_range gives
  // the standard cut (block i has ⌊N/2P⌋ + (i < N mod 2P) rows); balanced_shard copies it out.
  balanced,
};

struct RingAttentionOptions {
  // Multiplies q·k; default 1/√D.
  std::optional<float> scale;
  // The causal mask over global positions: the query at position i sees the keys at positions j ≤ i.
  bool causal = false;
  RingLayout layout = RingLayout::contiguous;
  // balanced only: the rows of this rank's shard that form its early block, in [0, n_r]; −1 takes
  // ⌈n_r / 2⌉, which is balanced_range's cut.
  int64_t early_length = -1;
  // Per-batch key lengths [B] over global positions, the same on every rank: batch b sees the keys at
  // positions j < key_lengths[b] (padding at the end of the sequence). Empty: every key.
  std::span<const int64_t> key_lengths;
};

// out: [B, n_r, H, E]; lse: [B, H, n_r] contiguous, the log-sum-exp of each row's scaled scores over
// the whole sequence (−∞ for a row that sees no key; its output row is 0), as the backward wants it.
// q, k: [B, n_r, H, D]; v: [B, n_r, H, E]. With n_r = 0 the views' data may be null.
void ring_attention_forward(MPI_Comm comm, TensorView out, std::span<float> lse, ConstTensorView q, ConstTensorView k,
                            ConstTensorView v, const RingAttentionOptions& options = {});

// dq, dk, dv: this rank's gradients, shaped like q, k, v (overwritten). dout: [B, n_r, H, E]; out and
// lse as the forward returned them.
void ring_attention_backward(MPI_Comm comm, TensorView dq, TensorView dk, TensorView dv, ConstTensorView dout,
                             ConstTensorView q, ConstTensorView k, ConstTensorView v, ConstTensorView out,
                             std::span<const float> lse, const RingAttentionOptions& options = {});

// One rank's blocks under the balanced layout's standard cut of N positions over `ranks` ranks.
struct BalancedRange {
  int64_t early_begin = 0, early_length = 0;  // block c_rank
  int64_t late_begin = 0, late_length = 0;    // block c_{2P−1−rank}
  int64_t length() const { return early_length + late_length; }
};
BalancedRange balanced_range(int64_t N, int rank, int ranks);

// shard [B, n_r, H, D] = the rows of full [B, N, H, D] that rank holds under balanced_range.
void balanced_shard(TensorView shard, ConstTensorView full, int rank, int ranks);
// The inverse: writes rank's rows of full from shard.
void balanced_unshard(TensorView full, ConstTensorView shard, int rank, int ranks);

}  // namespace linattn::distributed
