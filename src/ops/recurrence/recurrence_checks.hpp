#pragma once
// What every recurrence family (the decayed family, the delta rule, the DPLR delta rule) checks and
// knows about a call, on top of the one boundary check of core/validate.hpp: one problem type, one
// gate, one declarative signature check that each family calls with its differences as data, the
// states' sizes, the inputs' regions and a decoding state's kind. The fast drivers and the fp64 oracles
// both call them, so that both refuse the same calls with the same words.
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "linattn/boundary.hpp"
#include "linattn/recurrent_state.hpp"
#include "linattn/view.hpp"
#include "ops/recurrence/sequences.hpp"

namespace linattn::detail {

// The shape of a recurrence's decay a_t = e^{g_t}: none (a = 1), one fixed log decay per head (no
// tensor: retention, lightning), one per head and token (g [B, T, H, 1]) or one per key dimension
// (g [B, T, H, K]). The public Decay and DeltaGate map onto it (decay_checks.hpp, delta_checks.hpp).
enum class Gate { none, head, token, key };

// H counts the value heads, those of v, beta, g and the states; q and k have H / group heads (grouped
// value heads: value head h reads q/k head h / group, flash-linear-attention's convention). With query
// groups (ONNX's LinearAttention, opset 27) q and out have H · queries heads over k's and v's H: query
// head h · queries + r reads the state of head h. The two groupings never come together (one of group and
// queries is 1). out has H · queries heads.
struct RecurrenceProblem {
  int64_t B, T, H, K, V, N;
  float scale;
  Gate gate;
  std::vector<Sequence> sequences;  // N of them, in state order
  int64_t group = 1;                // value heads per q/k head (1 unless the family takes grouped heads)
  int64_t queries = 1;              // query heads per k/v head (1 unless the family takes query groups)
  int64_t state_size() const { return N * H * K * V; }
  int64_t qk_heads() const { return H / group; }
  int64_t qk_head(int64_t h) const { return h / group; }
  // The r-th query head reading head h's state, and the head of out it writes (r < queries).
  int64_t q_head(int64_t h, int64_t r = 0) const { return qk_head(h) * queries + r; }
  int64_t out_head(int64_t h, int64_t r = 0) const { return h * queries + r; }
  // Columns of g: 1 (token), K (key), 0 (no gate tensor).
  int64_t gate_cols() const { return gate == Gate::token ? 1 : gate == Gate::key ? K : 0; }
};

// One (sequence, value head)'s tensors (beta: the delta rule's; empty elsewhere); q and k are read at
// head qk() (RecurrenceProblem::group), or with query groups q at q_head(r) and out at out_head(r).
// E: the tensors' element type, float or (the chunked forwards reading half rows as they pack) bf16, f16.
// g_wide: the log decays in fp32 beside half q, k, v (g then empty), as flash-linear-attention's bf16 models
// pass them: a log decay rounded to half would move every decay factor it enters.
template <class E>
struct RecurrenceHeadOf {
  View4<const E> q, k, v, g, beta;
  int64_t b, h;
  int64_t group = 1;
  int64_t queries = 1;
  View4<const float> g_wide = {};
  int64_t qk() const { return h / group; }
  int64_t q_head(int64_t r = 0) const { return qk() * queries + r; }
  int64_t out_head(int64_t r = 0) const { return h * queries + r; }
};
using RecurrenceHead = RecurrenceHeadOf<float>;

// Query groups without copies: query head h · queries + r of x (q or out, [B, T, queries · H, D]) as head h
// of a view with k's H heads, on the same memory.
template <class T>
View4<T> query_view(View4<T> x, int64_t queries, int64_t r) {
  if (queries == 1) return x;
  if (x.data) x.data += r * x.stride[2];
  x.stride[2] *= queries, x.extent[2] /= queries;
  return x;
}

// A named tensor of a call.
struct NamedView {
  const char* name;
  ConstTensorView view;
};

// What a family's call takes beside q, k [B, T, H, K] and v [B, T, H, V], as data for
// check_recurrence_arguments; each field says its words in the messages.
struct Signature {
  const char* family = "";  // "the decayed family", ...: why k has q's T ("<family> is causal")
  // Grouped value heads taken: v [B, T, HV, V] with HV a multiple of q's H; beta, g, out and the states
  // then have HV heads. Otherwise v has q's heads.
  bool grouped = false;
  // Query groups taken (ONNX's LinearAttention): q [B, T, R·H, K] over k [B, T, H, K], v [B, T, H, V];
  // g, beta and the states have H heads, out R·H. Otherwise such a q is refused naming its heads and
  // what takes them (query_groups_message).
  bool query_groups = false;
  bool query_groups_backward = false;  // and in the chunked backward too (else it refuses them)
  std::optional<float> scale = {};
  std::span<const int64_t> cu_seqlens = {};
  int64_t chunk_size = 1, max_chunk_size = 0;  // max 0: no chunked form, chunk_size unchecked
  const ConstTensorView* beta = nullptr;       // one β per head and token [B, T, H, 1], where taken
  Gate gate = Gate::none;
  ConstTensorView g = {};
  const char* gate_word = "";                    // "decay " or nothing: 'g is given for <gate_word>'<gate_name>''
  std::string gate_name = {};                    // the call's name (decay_name, delta_name)
  const char* gated = "";                        // the names that take a gate tensor
  const char* gate_because = "";                 // why g's last extent
  std::initializer_list<NamedView> like_k = {};  // tensors shaped like k (DPLR's a, b, gk)
};

// The checks, in the order every family had them: q, k, v agreeing (v's heads a multiple of q's where the
// signature takes grouped heads) and causal (T keys for T queries);
// scale finite; chunk_size in [1, max_chunk_size]; β; g shaped for the gate, or empty without one; the
// tensors like k; cu_seqlens empty or [N + 1] ascending from 0 to T with B = 1; N·H·K·V representable.
RecurrenceProblem check_recurrence_arguments(const char* op, ConstTensorView q, ConstTensorView k, ConstTensorView v,
                                             const Signature& signature);
// An output (out, dout) shaped [B, T, HV, V] for q [B, T, H, K] and v [B, T, HV, V], or [B, T, R·H, V] for
// query groups (q with R·H heads over v's H): the words of check_output_shape, with "v's heads" or "q's
// heads" where the heads are grouped.
void check_recurrence_output(const char* op, const char* name, ConstTensorView x, ConstTensorView q, ConstTensorView v);
// What takes query groups natively, for the refusals.
extern const char* const query_groups_native;
// Refuses query groups (p.queries > 1) in `op`, a call that does not take them natively (a backward).
void refuse_query_groups(const char* op, const RecurrenceProblem& p);
// A gradient and the input it is shaped like.
struct Gradient {
  const char* name;
  TensorView grad;
  ConstTensorView input;
  const char* input_name;
};
// The chunked backwards' checks after check_recurrence_arguments: dout shaped like out; each gradient
// like its input; dg like g where the gate has a tensor, else empty (named by the signature's words);
// the states' sizes; no output (the gradients, dinitial_state, dg) sharing memory with another or an
// input (q, k, v, `inputs`, dout, dfinal_state, initial_state).
void check_recurrence_backward(const char* op, const RecurrenceProblem& p, const Signature& signature,
                               ConstTensorView dout, ConstTensorView q, ConstTensorView k, ConstTensorView v,
                               std::initializer_list<NamedView> inputs, std::initializer_list<Gradient> grads,
                               TensorView dg, std::span<float> dinitial_state, std::span<const float> dfinal_state,
                               std::span<const float> initial_state);
// The chunked forwards' checks after check_recurrence_arguments, but the aliasing rule: out shaped as the call
// makes it, initial_state and final_state of N·H·K·V elements or empty (half views: as shape views).
void check_recurrence_forward_shapes(const char* op, const RecurrenceProblem& p, ConstTensorView out, ConstTensorView q,
                                     ConstTensorView v, size_t initial_state, size_t final_state);
// check_recurrence_backward's checks but the aliasing rule: for half-precision views, whose regions the caller
// registers with their own element size (q, v, dout, the gradients and dg as shape views).
void check_recurrence_backward_shapes(const char* op, const RecurrenceProblem& p, const Signature& signature,
                                      ConstTensorView dout, ConstTensorView q, ConstTensorView v,
                                      std::initializer_list<Gradient> grads, TensorView dg,
                                      std::span<float> dinitial_state, std::span<const float> dfinal_state,
                                      std::span<const float> initial_state);
// The name of enumerator e, from names given in the enum's order ("unknown" outside it).
template <class E, size_t N>
std::string enum_name(E e, const char* const (&names)[N]) {
  const auto i = size_t(e);
  return i < N ? names[i] : "unknown";
}
// A state argument (`name`) of exactly N·H·K·V elements, or empty.
void check_state_span(const char* op, const char* name, size_t size, const RecurrenceProblem& p);
// The token-by-token forwards' state (`name`): N·H·K·V elements, not empty.
void check_token_state(const char* op, size_t size, const RecurrenceProblem& p, const char* name = "state");
// The inputs' regions for the aliasing check: q, k, v and those of `more` that are given.
std::vector<boundary::Region> input_regions(ConstTensorView q, ConstTensorView k, ConstTensorView v,
                                            std::initializer_list<NamedView> more);
// A decoding state made for the recurrence `name` (by RecurrentState(B, HV, K, V, name_call)) whose
// extents match q [B, T, H, K] and v [B, T, HV, V] (HV = H unless `grouped`), at a position that q's tokens
// can advance.
void check_decode_state(const char* op, const RecurrentState& state, const std::string& name, const char* name_call,
                        ConstTensorView q, ConstTensorView v, bool grouped = false);

}  // namespace linattn::detail
