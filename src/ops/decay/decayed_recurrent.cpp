// The decayed family token by token: per sequence, head and token, S = diag(a) S + k vᵀ and
// o = (scale · q)ᵀ S. A decode step (and a call of sequences shorter than kScanMinTokens) sweeps S once a
// token (kernels::rank1_update_readout); the forward over longer sequences (flash-linear-attention's
// fused_recurrent_*) goes over blocks of tokens with their decays factored out (recurrent_blocks.hpp).
// Heads are value heads; with grouped ones, q and k are read at head h / group (RecurrenceProblem).
// With query groups (q and out with R·H heads) a head is a k/v head: its state advances once a token, and
// each of its R query heads reads it out (the first in the update's sweep, the others after it; over blocks
// of tokens, each token's read-outs in turn from the registers the update leaves).
// Constant memory per token either way.
#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "core/validate.hpp"
#include "kernels/decay_factors.hpp"
#include "kernels/half_views.hpp"
#include "kernels/pack.hpp"
#include "kernels/rows.hpp"
#include "linattn/half_attention.hpp"
#include "ops/decay/decay_checks.hpp"
#include "ops/decay/recurrent_blocks.hpp"
#include "ops/recurrence/recurrent_tasks.hpp"

namespace linattn {
namespace {

// The tokens of every sequence of p. I: the element type of the views (float, bf16 or f16: half rows are
// widened as a token is packed and o rounded as it is stored, the same bits as the fp32 operator on the
// widened values); T: the states' (float, or bf16 for a decoding state kept in half the bytes).
template <class I, class T>
void recurrent(const detail::DecayProblem& p, View4<I> out, View4<const I> q, View4<const I> k, View4<const I> v,
               View4<const I> g, const detail::TokenStates<T>& states, const DecayedAttentionOptions& options) {
  const int64_t K = p.K, V = p.V;
  const bool decays = p.decay != Decay::none;
  detail::token_sweep(
      p, out, q, k, v, g, states, p.scale,
      [&](detail::TokenRows& rows, int64_t h0, int64_t heads) {  // one fixed decay per head, no gate tensor
        if (p.gate_cols() == 0)
          for (int64_t r = 0; r < heads; ++r)
            std::fill_n(rows.a + r * K, K, float(std::exp(detail::constant_log_decay(options, h0 + r))));
      },
      [](detail::TokenRows&) {},
      [&](detail::TokenRows& rows, int64_t r, auto* S, const auto* before, int64_t, int64_t) {
        kernels::rank1_update_readout(rows.o + r * V, S, rows.k_row(r), rows.v + r * V, rows.q_row(r), K, V,
                                      decays ? rows.a + r * K : nullptr, before);
      },
      [](detail::TokenRows&, float*) {});
}

// The forward of every sequence of p from states.from (or in place) into states.to (fp32, [N, H, K, V]): over
// blocks of tokens, the heads of a block of heads together (recurrent_blocks.hpp), unless every sequence is too
// short for a block to pay. The blocks run in place: out of place they start from a copy, which a call of that
// many tokens amortises.
template <class I>
void recurrent_forward(const detail::DecayProblem& p, View4<I> out, View4<const I> q, View4<const I> k,
                       View4<const I> v, View4<const I> g, const detail::TokenStates<float>& states,
                       const DecayedAttentionOptions& options) {
  if (detail::longest(p.sequences) < detail::kScanMinTokens) return recurrent(p, out, q, k, v, g, states, options);
  const std::span<float> state = states.to;
  std::copy(states.from.begin(), states.from.end(), state.begin());
  const int64_t N = int64_t(p.sequences.size());
  detail::for_each_head_block(N, p.H, N * p.H * p.T * p.K * p.V, detail::scan_floats_per_head(p),
                              detail::scan_floats_shared(p), [&](int64_t n, int64_t h0, int64_t heads, float* scratch) {
                                detail::scan_heads(p, p.sequences[size_t(n)], h0, heads, out, q, k, v, g, state,
                                                   options, scratch);
                              });
}

// The checks of an fp32 call: shapes, the size of the state it writes (`state`, named by its region) and of
// `initial` (an out-of-place call's initial_state; empty: none), and no output sharing memory with another or an
// input.
detail::DecayProblem check_call(const char* op, TensorView out, ConstTensorView q, ConstTensorView k, ConstTensorView v,
                                ConstTensorView g, size_t state_size, boundary::Region state,
                                const DecayedAttentionOptions& options, std::span<const float> initial = {}) {
  const detail::DecayProblem p = detail::check_decay_arguments(op, q, k, v, g, options);
  detail::check_recurrence_output(op, "out", out, q, v);
  detail::check_token_state(op, state_size, p, state.name);
  detail::check_state_span(op, "initial_state", initial.size(), p);
  const boundary::Region outputs[] = {boundary::region("out", out), state};
  std::vector<boundary::Region> inputs = detail::input_regions(q, k, v, {{"g", g}});
  inputs.push_back(boundary::region("initial_state", initial));
  detail::check_outputs(op, outputs, inputs);
  return p;
}

// The checks of a half call, on the half views themselves (nothing is copied), then the same shape checks.
template <HalfType H>
detail::DecayProblem check_call(const char* op, View4<H> out, HalfIn<H> q, HalfIn<H> k, HalfIn<H> v, HalfIn<H> g,
                                size_t state_size, boundary::Region state, const DecayedAttentionOptions& options) {
  kernels::HalfCall<H> c(op);
  c.in_place("q", q), c.in_place("k", k), c.in_place("v", v), c.out_in_place("out", out);
  if (g.data) c.in_place("g", g);
  c.out_region(state);
  c.check();
  using kernels::shape_view;
  const detail::DecayProblem p =
      detail::check_decay_arguments(op, shape_view(q), shape_view(k), shape_view(v), shape_view(g), options);
  detail::check_recurrence_output(op, "out", shape_view(out), shape_view(q), shape_view(v));
  detail::check_token_state(op, state_size, p);
  return p;
}

// A decode step's state, of either storage: out, q, k, v, g of element type I.
template <class I>
void step(const char* op, View4<I> out, View4<const I> q, View4<const I> k, View4<const I> v, View4<const I> g,
          RecurrentState& state, const DecayedAttentionOptions& options) {
  using kernels::shape_view;
  detail::decode_step<I>(
      op, state, !options.cu_seqlens.empty(), decay_name(options.decay), "decay_name(options.decay)", shape_view(q),
      shape_view(v), true,
      [&](const detail::DecodeState& S) { return check_call(op, out, q, k, v, g, S.size, S.region, options); },
      [&](const detail::DecayProblem& p, auto S) { recurrent(p, out, q, k, v, g, detail::TokenStates{S}, options); });
}

}  // namespace

void decayed_recurrent_forward(TensorView out, ConstTensorView q, ConstTensorView k, ConstTensorView v,
                               ConstTensorView g, std::span<float> state, const DecayedAttentionOptions& options) {
  const char* op = "decayed_recurrent_forward";
  const detail::DecayProblem p =
      check_call(op, out, q, k, v, g, state.size(), boundary::region("state", state), options);
  recurrent_forward(p, out, q, k, v, g, detail::TokenStates{state}, options);
}

void decayed_recurrent_forward(TensorView out, ConstTensorView q, ConstTensorView k, ConstTensorView v,
                               ConstTensorView g, std::span<const float> initial_state, std::span<float> final_state,
                               const DecayedAttentionOptions& options) {
  const char* op = "decayed_recurrent_forward";
  const detail::DecayProblem p = check_call(op, out, q, k, v, g, final_state.size(),
                                            boundary::region("final_state", final_state), options, initial_state);
  if (initial_state.empty()) std::fill(final_state.begin(), final_state.end(), 0.0f);  // zero, then in place
  recurrent_forward(p, out, q, k, v, g, detail::TokenStates<float>{final_state, initial_state}, options);
}

template <HalfType H>
void decayed_recurrent_forward(View4<H> out, HalfIn<H> q, HalfIn<H> k, HalfIn<H> v, HalfIn<H> g, std::span<float> state,
                               const DecayedAttentionOptions& options) {
  const char* op = "decayed_recurrent_forward";
  const detail::DecayProblem p =
      check_call(op, out, q, k, v, g, state.size(), boundary::region("state", state), options);
  recurrent_forward(p, out, q, k, v, g, detail::TokenStates{state}, options);
}

void decayed_step(TensorView out, ConstTensorView q, ConstTensorView k, ConstTensorView v, ConstTensorView g,
                  RecurrentState& state, const DecayedAttentionOptions& options) {
  step("decayed_step", out, q, k, v, g, state, options);
}

template <HalfType H>
void decayed_step(View4<H> out, HalfIn<H> q, HalfIn<H> k, HalfIn<H> v, HalfIn<H> g, RecurrentState& state,
                  const DecayedAttentionOptions& options) {
  step("decayed_step", out, q, k, v, g, state, options);
}

#define LINATTN_DECAYED_RECURRENT_HALF(H)                                                                              \
  template void decayed_recurrent_forward<H>(View4<H>, View4<const H>, View4<const H>, View4<const H>, View4<const H>, \
                                             std::span<float>, const DecayedAttentionOptions&);                        \
  template void decayed_step<H>(View4<H>, View4<const H>, View4<const H>, View4<const H>, View4<const H>,              \
                                RecurrentState&, const DecayedAttentionOptions&);
LINATTN_DECAYED_RECURRENT_HALF(bf16)
LINATTN_DECAYED_RECURRENT_HALF(f16)
#undef LINATTN_DECAYED_RECURRENT_HALF

}  // namespace linattn
