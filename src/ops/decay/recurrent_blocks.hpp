#pragma once
// The decayed family's token-by-token forward (fused_recurrent_*) over blocks of tokens: each block's
// decays are factored out of its tokens (kernels/decay_scan.hpp), so a token costs two FMAs per state
// element, and the state stays in registers a tile at a time while the block streams past it. A decode
// step (one token a call) keeps the per-token update of decayed_recurrent.cpp.
#include <cstddef>
#include <cstdint>
#include <span>

#include "linattn/decay.hpp"
#include "linattn/view.hpp"
#include "ops/decay/decay_checks.hpp"

namespace linattn::detail {

// The widest span of cumulative log decay inside one scan: its factors stay within e^{±10}. A token whose
// decay alone spans more is a scan by itself, its decay applied to the state as it enters.
inline constexpr float kScanMaxLogSpan = 20.0f;
// The tokens a block reads of each head at a time (each head scans them in one go, or in several where
// its decays span more than kScanMaxLogSpan).
inline constexpr int64_t kScanBlockTokens = 32;
// Calls whose sequences are all shorter run token by token: a block's setup (loading and storing the
// state) costs about as much as a token's arithmetic.
inline constexpr int64_t kScanMinTokens = 4;

// The scratch of a block of heads: floats per head (its state), and floats the block's heads share.
size_t scan_floats_per_head(const DecayProblem& p);
size_t scan_floats_shared(const DecayProblem& p);

// Tokens [s.begin, s.end) of heads [h0, h0 + heads) of sequence s: out's rows, and state ([N, H, K, V])
// from the state before the first token to the state after the last. The heads go through the tokens
// together, a block at a time: a token's rows of the heads lie side by side ([B, T, H, K] storage), and a
// head alone would read 256 bytes of each 4 KiB page in turn (a TLB miss every other token). I: the views'
// element type (float, bf16 or f16: rows widened as they are packed, o rounded to nearest even as stored).
// The heads are value heads: q and k are read at p.qk_head(h) (grouped value heads).
template <class I>
void scan_heads(const DecayProblem& p, const Sequence& s, int64_t h0, int64_t heads, View4<I> out, View4<const I> q,
                View4<const I> k, View4<const I> v, View4<const I> g, std::span<float> state,
                const DecayedAttentionOptions& options, float* scratch);

}  // namespace linattn::detail
