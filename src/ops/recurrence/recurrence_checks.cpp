#include "ops/recurrence/recurrence_checks.hpp"

#include <array>
#include <cmath>

#include "core/validate.hpp"
#include "linattn/limits.hpp"

namespace linattn::detail {

namespace {

// Where the value heads' extent comes from in the messages: q's heads, or v's where they are grouped.
const char* heads_word(ConstTensorView q, ConstTensorView v) {
  return v.heads() == q.heads() ? "q's heads" : "v's heads";
}

// q's heads over k's, R, where q's are a multiple R > 1 of k's (query groups): refused unless the
// signature takes them, and with v's heads other than k's (the two groupings at once); 1 otherwise (a q
// whose heads are no multiple of k's is left to the attention inputs' check, unless it has more heads than
// k and v where the signature takes query groups).
int64_t query_groups(const char* op, ConstTensorView q, ConstTensorView k, ConstTensorView v, const Signature& s) {
  if (q.heads() == k.heads() || k.heads() <= 0) return 1;
  if (q.heads() % k.heads() != 0) {
    if (s.query_groups && v.heads() == k.heads() && q.heads() > k.heads())
      fail_with(op, "q.extent[2] (heads) is ", q.heads(), ", expected a multiple of k's ", k.heads(),
                " heads (query groups: each k/v head serving HQ / H query heads)");
    return 1;
  }
  if (!s.query_groups)
    fail_with(op, "q.extent[2] (heads) is ", q.heads(), ", expected k's ", k.heads(),
              " heads: query heads grouped over the key/value heads (ONNX LinearAttention's ", q.heads() / k.heads(),
              " query heads a k/v head) are native only in ", query_groups_native,
              "; repeat k, v and their gates per query head, or call once per query head of a group");
  if (v.heads() != k.heads())
    fail_with(op, "v.extent[2] (heads) is ", v.heads(), ", expected k's ", k.heads(), " heads: q's ", q.heads(),
              " heads group over k's (query groups), and value heads grouped over the q/k heads cannot come with them");
  return q.heads() / k.heads();
}

// v's heads HV, a positive multiple of q's H where the signature takes grouped heads (then q, k and v are
// checked as attention inputs with v seen at q's heads); otherwise q's H. With query groups (R > 1) q is
// checked as if it had k's heads.
int64_t value_heads(const char* op, ConstTensorView q, ConstTensorView k, ConstTensorView v, const Signature& s,
                    int64_t R) {
  if (R > 1) {
    ConstTensorView q_per_kv_head = q;  // q's other extents against k and v (its heads checked above)
    q_per_kv_head.extent[2] = k.heads();
    check_attention_inputs(op, q_per_kv_head, k, v);
    return v.heads();
  }
  if (!s.grouped || v.heads() == q.heads()) {
    check_attention_inputs(op, q, k, v);
    return q.heads();
  }
  check_view(op, "v", v);
  if (q.heads() <= 0 || v.heads() % q.heads() != 0)
    fail_with(op, "v.extent[2] (heads) is ", v.heads(), ", expected a multiple of ", q.heads(),
              " (q's heads: grouped value heads, each q/k head serving HV / H of them)");
  ConstTensorView v_per_qk_head = v;  // v's other extents against q and k (its heads checked above)
  v_per_qk_head.extent[2] = q.heads();
  check_attention_inputs(op, q, k, v_per_qk_head);
  return v.heads();
}

}  // namespace

RecurrenceProblem check_recurrence_arguments(const char* op, ConstTensorView q, ConstTensorView k, ConstTensorView v,
                                             const Signature& s) {
  check_view(op, "q", q), check_view(op, "k", k), check_view(op, "v", v);
  const int64_t R = query_groups(op, q, k, v, s), HV = value_heads(op, q, k, v, s, R);
  const std::string causal = std::string("q's sequence length (") + s.family + " is causal: T keys for T queries)";
  check_extent(op, "k", k, 1, q.seq(), causal.c_str());
  check_scale(op, s.scale);
  // Before anything is allocated: a chunk's scratch is quadratic in its length (limits.hpp).
  if (s.max_chunk_size > 0)
    check_bounded(op, "options.chunk_size", s.chunk_size, int64_t(1), s.max_chunk_size,
                  "a chunk's scratch holds [chunk_size, chunk_size] matrices per thread");
  RecurrenceProblem p{q.batch(), q.seq(), HV, q.dim(), v.dim(), q.batch(), 1.0f, s.gate, {}, HV / k.heads(), R};
  p.scale = s.scale ? *s.scale : float(1.0 / std::sqrt(double(p.K)));
  const char* axes[] = {"q's batch", "q's sequence length", R > 1 ? "k's and v's heads" : heads_word(q, v)};
  const int64_t want[] = {p.B, p.T, p.H};
  if (s.beta) {
    check_view(op, "beta", *s.beta);
    for (int axis = 0; axis < 3; ++axis) check_extent(op, "beta", *s.beta, axis, want[axis], axes[axis]);
    check_extent(op, "beta", *s.beta, 3, 1, "one β per head and token");
  }
  if (p.gate_cols() > 0) {
    check_view(op, "g", s.g);
    for (int axis = 0; axis < 3; ++axis) check_extent(op, "g", s.g, axis, want[axis], axes[axis]);
    check_extent(op, "g", s.g, 3, p.gate_cols(), s.gate_because);
  } else if (s.g.data) {
    fail_with(op, "g is given for ", s.gate_word, "'", s.gate_name, "', expected an empty view (only ", s.gated,
              " take a gate tensor)");
  }
  // One value per key dimension of each head and token, like k.
  for (const NamedView& x : s.like_k) check_like(op, x.name, x.view, k, "k");
  p.sequences = packed_sequences(op, p.B, p.T, s.cu_seqlens);
  p.N = int64_t(p.sequences.size());
  checked_mul(op, "N × H × K × V", checked_mul(op, "N × H", p.N, p.H), checked_mul(op, "K × V", p.K, p.V));
  return p;
}

void check_recurrence_forward_shapes(const char* op, const RecurrenceProblem& p, ConstTensorView out, ConstTensorView q,
                                     ConstTensorView v, size_t initial_state, size_t final_state) {
  check_recurrence_output(op, "out", out, q, v);
  check_state_span(op, "initial_state", initial_state, p);
  check_state_span(op, "final_state", final_state, p);
}

void check_recurrence_backward_shapes(const char* op, const RecurrenceProblem& p, const Signature& s,
                                      ConstTensorView dout, ConstTensorView q, ConstTensorView v,
                                      std::initializer_list<Gradient> grads, TensorView dg,
                                      std::span<float> dinitial_state, std::span<const float> dfinal_state,
                                      std::span<const float> initial_state) {
  if (!s.query_groups_backward) refuse_query_groups(op, p);
  check_recurrence_output(op, "dout", dout, q, v);
  for (const Gradient& d : grads) check_like(op, d.name, d.grad, d.input, d.input_name);
  if (p.gate_cols() > 0)
    check_like(op, "dg", dg, s.g, "g");
  else if (dg.data)
    fail_with(op, "dg is given for ", s.gate_word, "'", s.gate_name, "', expected an empty view (no gate tensor)");
  check_state_span(op, "initial_state", initial_state.size(), p);
  check_state_span(op, "dfinal_state", dfinal_state.size(), p);
  check_state_span(op, "dinitial_state", dinitial_state.size(), p);
}

void check_recurrence_backward(const char* op, const RecurrenceProblem& p, const Signature& s, ConstTensorView dout,
                               ConstTensorView q, ConstTensorView k, ConstTensorView v,
                               std::initializer_list<NamedView> inputs, std::initializer_list<Gradient> grads,
                               TensorView dg, std::span<float> dinitial_state, std::span<const float> dfinal_state,
                               std::span<const float> initial_state) {
  check_recurrence_backward_shapes(op, p, s, dout, q, v, grads, dg, dinitial_state, dfinal_state, initial_state);
  std::vector<boundary::Region> in = input_regions(q, k, v, inputs);
  for (const boundary::Region& r : {boundary::region("dout", dout), boundary::region("dfinal_state", dfinal_state),
                                    boundary::region("initial_state", initial_state)})
    in.push_back(r);
  std::vector<boundary::Region> out;
  for (const Gradient& d : grads) out.push_back(boundary::region(d.name, d.grad));
  out.push_back(boundary::region("dinitial_state", dinitial_state));
  if (p.gate_cols() > 0) out.push_back(boundary::region("dg", dg));
  check_outputs(op, out, in);
}

void check_recurrence_output(const char* op, const char* name, ConstTensorView x, ConstTensorView q,
                             ConstTensorView v) {
  if (v.heads() == q.heads()) return check_output_shape(op, name, x, q, v);
  check_view(op, name, x);
  const bool queries = q.heads() > v.heads();  // query groups: out has q's heads
  const int64_t want[] = {q.batch(), q.seq(), queries ? q.heads() : v.heads(), v.dim()};
  const char* because[] = {"q's batch", "q's sequence length", queries ? "q's heads" : "v's heads", "v's value dim"};
  for (int axis = 0; axis < 4; ++axis) check_extent(op, name, x, axis, want[axis], because[axis]);
}

const char* const query_groups_native =
    "the forwards of the decayed family and the delta rule (decayed_attention_forward, decayed_recurrent_forward, "
    "decayed_step, delta_rule_forward, delta_rule_recurrent_forward, delta_rule_step) and "
    "decayed_attention_backward";

void refuse_query_groups(const char* op, const RecurrenceProblem& p) {
  if (p.queries > 1)
    fail_with(op, "q has ", p.H * p.queries, " heads over k's and v's ", p.H,
              " (query groups), which this backward does not take natively (they are native only in ",
              query_groups_native, "): run it once per query head r of a group, with q[:, :, r::", p.queries,
              "] and dout[:, :, r::", p.queries,
              "] against the same k, v and gates (dfinal_state in one run only), and sum dk, dv, dg and"
              " dinitial_state over the runs");
}

namespace {
// The states' shape with its extents, for the messages: grouped value heads size a state by v's heads, and a
// state sized by q's is then told so.
std::string state_shape(const RecurrenceProblem& p) {
  return std::string(p.group > 1 ? "[N, HV, K, V] = [" : "[N, H, K, V] = [") + std::to_string(p.N) + ", " +
         std::to_string(p.H) + ", " + std::to_string(p.K) + ", " + std::to_string(p.V) + "]" +
         (p.group > 1     ? ", HV v's heads"
          : p.queries > 1 ? ", H k's and v's heads (one state a k/v head)"
                          : "");
}
}  // namespace

void check_state_span(const char* op, const char* name, size_t size, const RecurrenceProblem& p) {
  if (size == 0) return;
  check_size(op, name, int64_t(size), p.state_size(), state_shape(p).c_str());
}

void check_token_state(const char* op, size_t size, const RecurrenceProblem& p, const char* name) {
  if (size == 0) fail_with(op, name, " is empty, expected ", state_shape(p), " = ", p.state_size(), " values");
  check_state_span(op, name, size, p);
}

std::vector<boundary::Region> input_regions(ConstTensorView q, ConstTensorView k, ConstTensorView v,
                                            std::initializer_list<NamedView> more) {
  std::vector<boundary::Region> r{boundary::region("q", q), boundary::region("k", k), boundary::region("v", v)};
  for (const NamedView& x : more)
    if (x.view.data) r.push_back(boundary::region(x.name, x.view));
  return r;
}

void check_decode_state(const char* op, const RecurrentState& state, const std::string& name, const char* name_call,
                        ConstTensorView q, ConstTensorView v, bool grouped) {
  if (state.dtype() != DType::f32 && state.dtype() != DType::bf16)
    fail_with(op, "state.dtype() is ", dtype_name(state.dtype()), ", expected f32 or bf16");
  if (state.feature_map() != name)
    fail_with(op, "state is a '", state.feature_map(), "' state, expected a '", name,
              "' state (RecurrentState(B, H, K, V, ", name_call, "))");
  const std::array<int64_t, 4> seen{state.batch(), state.heads(), state.feature_dim(), state.value_dim()};
  // The value heads where grouped (v's heads checked against q's after this), else q's heads.
  const ConstTensorView heads = grouped ? v : q;
  const std::array<int64_t, 4> want{q.batch(), heads.heads(), q.dim(), v.dim()};
  const char* what[] = {"batch()", "heads()", "feature_dim()", "value_dim()"};
  const char* because[] = {"q's batch", heads_word(q, heads), "q's head dim K", "v's value dim"};
  for (int i = 0; i < 4; ++i)
    if (seen[size_t(i)] != want[size_t(i)])
      fail_with(op, "state.", what[i], " is ", seen[size_t(i)], ", expected ", want[size_t(i)], " (", because[i], ")");
  // Refused before the state changes: a position past the bound could not be saved.
  check_bounded(op, "state.position()", state.position(), 0, limits::kMaxPosition - q.seq(),
                "the step adds q's tokens");
}

}  // namespace linattn::detail
