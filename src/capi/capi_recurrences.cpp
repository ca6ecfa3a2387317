// The C API's recurrences: the decayed family (linear, retention, lightning, simple GLA, GLA; Mamba-2 is its
// token-decay call, linattn.h), the delta rule family (DeltaNet, Gated DeltaNet, KDA) and the DPLR delta rule
// (RWKV-7): forward and backward, token by token, decoding steps.
#include <algorithm>
#include <array>
#include <optional>
#include <string>
#include <vector>

#include "capi/capi_support.hpp"
#include "linattn/decay.hpp"
#include "linattn/delta.hpp"
#include "linattn/dplr.hpp"
#include "linattn/half_attention.hpp"
#include "linattn/memory.hpp"

using namespace linattn::capi;

namespace {

std::optional<float> scale_of(int has_scale, float scale) {
  return has_scale ? std::optional<float>(scale) : std::nullopt;
}

linattn::Decay to_decay(const char* function, int32_t decay) {
  if (decay < LINATTN_DECAY_NONE || decay > LINATTN_DECAY_KEY)
    fail(LINATTN_ERROR_INVALID_ARGUMENT, function,
         "options->decay is " + std::to_string(decay) + ", expected LINATTN_DECAY_NONE (0) .. LINATTN_DECAY_KEY (4)");
  // The C enum lists the values in the C++ enum's order.
  return static_cast<linattn::Decay>(decay);
}

linattn::DeltaGate to_gate(const char* function, int32_t gate) {
  if (gate < LINATTN_DELTA_NONE || gate > LINATTN_DELTA_KEY)
    fail(LINATTN_ERROR_INVALID_ARGUMENT, function,
         "options->gate is " + std::to_string(gate) + ", expected LINATTN_DELTA_NONE (0) .. LINATTN_DELTA_KEY (2)");
  return static_cast<linattn::DeltaGate>(gate);
}

linattn::DecayedAttentionOptions decay_options(const char* function, const linattn_decay_options* o) {
  linattn::DecayedAttentionOptions options;
  if (o == nullptr) return options;
  options.decay = to_decay(function, o->decay);
  options.scale = scale_of(o->has_scale, o->scale);
  options.g_gamma = buffer(function, "options->g_gamma", o->g_gamma, o->n_g_gamma);
  options.cu_seqlens = buffer(function, "options->cu_seqlens", o->cu_seqlens, o->n_cu_seqlens);
  options.chunk_size = o->chunk_size;
  return options;
}

linattn::DeltaRuleOptions delta_options(const char* function, const linattn_delta_options* o) {
  linattn::DeltaRuleOptions options;
  if (o == nullptr) return options;
  options.gate = to_gate(function, o->gate);
  options.scale = scale_of(o->has_scale, o->scale);
  options.qk_l2norm = o->qk_l2norm != 0;
  options.cu_seqlens = buffer(function, "options->cu_seqlens", o->cu_seqlens, o->n_cu_seqlens);
  options.chunk_size = o->chunk_size;
  return options;
}

// The operator's chunked scratch, refused before it is allocated: a C caller's tensor extents are size
// arguments too (K = V = 2^15 is a 4 GiB state per thread). Its states are per value head: v's heads, which
// grouped value heads make a multiple of q's. Shapes the operator refuses count nothing.
void check_scratch(const char* function, bool delta, const linattn_tensor* q, const linattn_tensor* v,
                   std::span<const int64_t> cu_seqlens, int64_t chunk_size, bool backward) {
  // The operator's checks name a missing tensor, and heads that are not grouped one way or the other (value
  // heads a multiple of q's, or query heads a multiple of v's: the scratch is per value head either way).
  if (q == nullptr || v == nullptr || q->extent[2] < 1 || v->extent[2] < 1) return;
  if (v->extent[2] % q->extent[2] != 0 && q->extent[2] % v->extent[2] != 0) return;
  const int64_t N = cu_seqlens.empty() ? q->extent[0] : int64_t(cu_seqlens.size()) - 1;
  const int64_t HV = v->extent[2];
  std::string what(function);
  what += ": the chunked scratch of q [";
  for (int i = 0; i < 4; ++i) {
    if (i > 0) what += ", ";
    what += std::to_string(q->extent[i]);
  }
  what += "] with ";
  what += std::to_string(v->extent[3]);
  what += " value columns in ";
  what += std::to_string(HV);
  what += HV == 1 ? " value head" : " value heads";
  what += " and chunk_size ";
  what += std::to_string(chunk_size);
  linattn::check_allocation(what, linattn::chunked_scratch_bytes(
                                      {delta, N, q->extent[1], HV, q->extent[3], v->extent[3], chunk_size, backward}));
}

// An optional state buffer of n_state floats: NULL is none.
template <class T>
std::span<T> state_buffer(const char* function, const char* name, T* data, int64_t n_state) {
  return data == nullptr ? std::span<T>{} : buffer(function, name, data, n_state);
}

linattn::RecurrentState& state_of(const char* function, linattn_state* state) {
  require(state, function, "state");
  return state->state;
}

linattn::DplrOptions dplr_options(const char* function, const linattn_dplr_options* o) {
  linattn::DplrOptions options;
  if (o == nullptr) return options;
  options.scale = scale_of(o->has_scale, o->scale);
  options.cu_seqlens = buffer(function, "options->cu_seqlens", o->cu_seqlens, o->n_cu_seqlens);
  return options;
}

// The DPLR delta rule takes f32 only: another known dtype of the call's first output is refused as
// unsupported (the views below then hold every other tensor to f32).
void require_f32(const char* function, const char* name, const linattn_tensor* t) {
  require(t, function, name);
  if (t->dtype == LINATTN_F32) return;
  const char* known = dtype_name(t->dtype);
  if (!known) fail_unknown_dtype(function, name, t->dtype);
  fail(LINATTN_ERROR_UNSUPPORTED_DTYPE, function,
       std::string(name) + ".dtype is " + known + ", expected LINATTN_F32 (the DPLR delta rule runs in f32)");
}

// The six inputs of a DPLR call.
struct DplrInputs {
  linattn::ConstTensorView q, k, v, a, b, gk;
};
DplrInputs dplr_inputs(const char* f, const linattn_tensor* q, const linattn_tensor* k, const linattn_tensor* v,
                       const linattn_tensor* a, const linattn_tensor* b, const linattn_tensor* gk) {
  return {const_view_of<float>(f, "q", q), const_view_of<float>(f, "k", k), const_view_of<float>(f, "v", v),
          const_view_of<float>(f, "a", a), const_view_of<float>(f, "b", b), const_view_of<float>(f, "gk", gk)};
}

// The floats of a state [N, H, K, V] for q and v, bounded by the memory check; 0 where an extent is not
// positive (the operator's checks then name it).
size_t dplr_state_floats(const char* function, const DplrInputs& x, const linattn::DplrOptions& o) {
  const int64_t N = o.cu_seqlens.empty() ? x.q.batch() : int64_t(o.cu_seqlens.size()) - 1;
  const double floats = double(N) * double(x.q.heads()) * double(x.q.dim()) * double(x.v.dim());
  if (N <= 0 || x.q.heads() <= 0 || x.q.dim() <= 0 || x.v.dim() <= 0) return 0;
  linattn::check_allocation(std::string(function) + ": the state [N, H, K, V] of q and v", 4.0 * floats);
  return size_t(floats);
}

}  // namespace

extern "C" {

void linattn_decay_options_init(linattn_decay_options* options) {
  if (options) *options = linattn_decay_options{LINATTN_DECAY_NONE, 0, 0.0f, nullptr, 0, nullptr, 0, 64};
}

const char* linattn_decay_name(int32_t decay) {
  if (decay < LINATTN_DECAY_NONE || decay > LINATTN_DECAY_KEY) return nullptr;
  try {
    // The C++ names, made once: the pointers stay valid for the life of the process.
    static const std::array<std::string, 5> names = [] {
      std::array<std::string, 5> n;
      for (int i = 0; i < 5; ++i) n[size_t(i)] = linattn::decay_name(static_cast<linattn::Decay>(i));
      return n;
    }();
    return names[size_t(decay)].c_str();
  } catch (...) {
    return nullptr;
  }
}

linattn_status linattn_decayed_forward(const linattn_tensor* out, const linattn_tensor* q, const linattn_tensor* k,
                                       const linattn_tensor* v, const linattn_tensor* g,
                                       const linattn_decay_options* options, const float* initial_state,
                                       float* final_state, int64_t n_state) {
  const char* f = "linattn_decayed_forward";
  return guard([&] {
    by_dtype(f, "out", out, [&](auto element) {
      using T = decltype(element);
      const linattn::DecayedAttentionOptions o = decay_options(f, options);
      check_scratch(f, false, q, v, o.cu_seqlens, o.chunk_size, false);
      linattn::decayed_attention_forward(view_of<T>(f, "out", out), const_view_of<T>(f, "q", q),
                                         const_view_of<T>(f, "k", k), const_view_of<T>(f, "v", v),
                                         optional_const_view_of<T>(f, "g", g), o,
                                         state_buffer(f, "initial_state", initial_state, n_state),
                                         state_buffer(f, "final_state", final_state, n_state));
    });
  });
}

linattn_status linattn_decayed_backward(const linattn_tensor* dq, const linattn_tensor* dk, const linattn_tensor* dv,
                                        const linattn_tensor* dg, float* dinitial_state, const linattn_tensor* dout,
                                        const float* dfinal_state, const linattn_tensor* q, const linattn_tensor* k,
                                        const linattn_tensor* v, const linattn_tensor* g,
                                        const linattn_decay_options* options, const float* initial_state,
                                        int64_t n_state) {
  const char* f = "linattn_decayed_backward";
  return guard([&] {
    by_dtype(f, "dq", dq, [&](auto element) {
      using T = decltype(element);
      const linattn::DecayedAttentionOptions o = decay_options(f, options);
      check_scratch(f, false, q, v, o.cu_seqlens, o.chunk_size, true);
      linattn::decayed_attention_backward(
          view_of<T>(f, "dq", dq), view_of<T>(f, "dk", dk), view_of<T>(f, "dv", dv), optional_view_of<T>(f, "dg", dg),
          state_buffer(f, "dinitial_state", dinitial_state, n_state), const_view_of<T>(f, "dout", dout),
          state_buffer(f, "dfinal_state", dfinal_state, n_state), const_view_of<T>(f, "q", q),
          const_view_of<T>(f, "k", k), const_view_of<T>(f, "v", v), optional_const_view_of<T>(f, "g", g), o,
          state_buffer(f, "initial_state", initial_state, n_state));
    });
  });
}

linattn_status linattn_decayed_recurrent_forward(const linattn_tensor* out, const linattn_tensor* q,
                                                 const linattn_tensor* k, const linattn_tensor* v,
                                                 const linattn_tensor* g, float* state, int64_t n_state,
                                                 const linattn_decay_options* options) {
  const char* f = "linattn_decayed_recurrent_forward";
  return guard([&] {
    by_dtype(f, "out", out, [&](auto element) {
      using T = decltype(element);
      require(state, f, "state");
      linattn::decayed_recurrent_forward(view_of<T>(f, "out", out), const_view_of<T>(f, "q", q),
                                         const_view_of<T>(f, "k", k), const_view_of<T>(f, "v", v),
                                         optional_const_view_of<T>(f, "g", g), buffer(f, "state", state, n_state),
                                         decay_options(f, options));
    });
  });
}

linattn_status linattn_decayed_step(const linattn_tensor* out, const linattn_tensor* q, const linattn_tensor* k,
                                    const linattn_tensor* v, const linattn_tensor* g, linattn_state* state,
                                    const linattn_decay_options* options) {
  const char* f = "linattn_decayed_step";
  return guard([&] {
    by_dtype(f, "out", out, [&](auto element) {
      using T = decltype(element);
      linattn::decayed_step(view_of<T>(f, "out", out), const_view_of<T>(f, "q", q), const_view_of<T>(f, "k", k),
                            const_view_of<T>(f, "v", v), optional_const_view_of<T>(f, "g", g), state_of(f, state),
                            decay_options(f, options));
    });
  });
}

void linattn_delta_options_init(linattn_delta_options* options) {
  if (options) *options = linattn_delta_options{LINATTN_DELTA_NONE, 0, 0.0f, 0, nullptr, 0, 64};
}

const char* linattn_delta_name(int32_t gate) {
  if (gate < LINATTN_DELTA_NONE || gate > LINATTN_DELTA_KEY) return nullptr;
  try {
    static const std::array<std::string, 3> names = [] {
      std::array<std::string, 3> n;
      for (int i = 0; i < 3; ++i) n[size_t(i)] = linattn::delta_name(static_cast<linattn::DeltaGate>(i));
      return n;
    }();
    return names[size_t(gate)].c_str();
  } catch (...) {
    return nullptr;
  }
}

linattn_status linattn_delta_forward(const linattn_tensor* out, const linattn_tensor* q, const linattn_tensor* k,
                                     const linattn_tensor* v, const linattn_tensor* beta, const linattn_tensor* g,
                                     const linattn_delta_options* options, const float* initial_state,
                                     float* final_state, int64_t n_state) {
  const char* f = "linattn_delta_forward";
  return guard([&] {
    by_dtype(f, "out", out, [&](auto element) {
      using T = decltype(element);
      const linattn::DeltaRuleOptions o = delta_options(f, options);
      check_scratch(f, true, q, v, o.cu_seqlens, o.chunk_size, false);
      linattn::delta_rule_forward(view_of<T>(f, "out", out), const_view_of<T>(f, "q", q), const_view_of<T>(f, "k", k),
                                  const_view_of<T>(f, "v", v), const_view_of<T>(f, "beta", beta),
                                  optional_const_view_of<T>(f, "g", g), o,
                                  state_buffer(f, "initial_state", initial_state, n_state),
                                  state_buffer(f, "final_state", final_state, n_state));
    });
  });
}

linattn_status linattn_delta_backward(const linattn_tensor* dq, const linattn_tensor* dk, const linattn_tensor* dv,
                                      const linattn_tensor* dbeta, const linattn_tensor* dg, float* dinitial_state,
                                      const linattn_tensor* dout, const float* dfinal_state, const linattn_tensor* q,
                                      const linattn_tensor* k, const linattn_tensor* v, const linattn_tensor* beta,
                                      const linattn_tensor* g, const linattn_delta_options* options,
                                      const float* initial_state, int64_t n_state) {
  const char* f = "linattn_delta_backward";
  return guard([&] {
    by_dtype(f, "dq", dq, [&](auto element) {
      using T = decltype(element);
      const linattn::DeltaRuleOptions o = delta_options(f, options);
      check_scratch(f, true, q, v, o.cu_seqlens, o.chunk_size, true);
      linattn::delta_rule_backward(
          view_of<T>(f, "dq", dq), view_of<T>(f, "dk", dk), view_of<T>(f, "dv", dv), view_of<T>(f, "dbeta", dbeta),
          optional_view_of<T>(f, "dg", dg), state_buffer(f, "dinitial_state", dinitial_state, n_state),
          const_view_of<T>(f, "dout", dout), state_buffer(f, "dfinal_state", dfinal_state, n_state),
          const_view_of<T>(f, "q", q), const_view_of<T>(f, "k", k), const_view_of<T>(f, "v", v),
          const_view_of<T>(f, "beta", beta), optional_const_view_of<T>(f, "g", g), o,
          state_buffer(f, "initial_state", initial_state, n_state));
    });
  });
}

linattn_status linattn_delta_recurrent_forward(const linattn_tensor* out, const linattn_tensor* q,
                                               const linattn_tensor* k, const linattn_tensor* v,
                                               const linattn_tensor* beta, const linattn_tensor* g, float* state,
                                               int64_t n_state, const linattn_delta_options* options) {
  const char* f = "linattn_delta_recurrent_forward";
  return guard([&] {
    by_dtype(f, "out", out, [&](auto element) {
      using T = decltype(element);
      require(state, f, "state");
      linattn::delta_rule_recurrent_forward(view_of<T>(f, "out", out), const_view_of<T>(f, "q", q),
                                            const_view_of<T>(f, "k", k), const_view_of<T>(f, "v", v),
                                            const_view_of<T>(f, "beta", beta), optional_const_view_of<T>(f, "g", g),
                                            buffer(f, "state", state, n_state), delta_options(f, options));
    });
  });
}

linattn_status linattn_delta_step(const linattn_tensor* out, const linattn_tensor* q, const linattn_tensor* k,
                                  const linattn_tensor* v, const linattn_tensor* beta, const linattn_tensor* g,
                                  linattn_state* state, const linattn_delta_options* options) {
  const char* f = "linattn_delta_step";
  return guard([&] {
    by_dtype(f, "out", out, [&](auto element) {
      using T = decltype(element);
      linattn::delta_rule_step(view_of<T>(f, "out", out), const_view_of<T>(f, "q", q), const_view_of<T>(f, "k", k),
                               const_view_of<T>(f, "v", v), const_view_of<T>(f, "beta", beta),
                               optional_const_view_of<T>(f, "g", g), state_of(f, state), delta_options(f, options));
    });
  });
}

void linattn_dplr_options_init(linattn_dplr_options* options) {
  if (options) *options = linattn_dplr_options{0, 0.0f, nullptr, 0};
}

const char* linattn_dplr_name(void) { return linattn::kDplrName; }

linattn_status linattn_dplr_forward(const linattn_tensor* out, const linattn_tensor* q, const linattn_tensor* k,
                                    const linattn_tensor* v, const linattn_tensor* a, const linattn_tensor* b,
                                    const linattn_tensor* gk, const linattn_dplr_options* options,
                                    const float* initial_state, float* final_state, int64_t n_state) {
  const char* f = "linattn_dplr_forward";
  return guard([&] {
    require_f32(f, "out", out);
    const linattn::DplrOptions o = dplr_options(f, options);
    const DplrInputs x = dplr_inputs(f, q, k, v, a, b, gk);
    const std::span<const float> initial = state_buffer(f, "initial_state", initial_state, n_state);
    // The token-by-token forward advances one state in place: final_state itself, or a scratch one.
    std::span<float> state = state_buffer(f, "final_state", final_state, n_state);
    std::vector<float> scratch;
    if (state.empty()) {
      scratch.resize(initial.empty() ? dplr_state_floats(f, x, o) : initial.size());
      state = scratch;
    }
    if (initial.empty())
      std::fill(state.begin(), state.end(), 0.0f);
    else if (initial.data() != state.data())
      std::copy(initial.begin(), initial.end(), state.begin());
    linattn::dplr_delta_rule_recurrent_forward(view_of<float>(f, "out", out), x.q, x.k, x.v, x.a, x.b, x.gk, state, o);
  });
}

linattn_status linattn_dplr_backward(const linattn_tensor* dq, const linattn_tensor* dk, const linattn_tensor* dv,
                                     const linattn_tensor* da, const linattn_tensor* db, const linattn_tensor* dgk,
                                     float* dinitial_state, const linattn_tensor* dout, const float* dfinal_state,
                                     const linattn_tensor* q, const linattn_tensor* k, const linattn_tensor* v,
                                     const linattn_tensor* a, const linattn_tensor* b, const linattn_tensor* gk,
                                     const linattn_dplr_options* options, const float* initial_state, int64_t n_state) {
  const char* f = "linattn_dplr_backward";
  return guard([&] {
    require_f32(f, "dq", dq);
    const DplrInputs x = dplr_inputs(f, q, k, v, a, b, gk);
    linattn::dplr_delta_rule_recurrent_backward(
        view_of<float>(f, "dq", dq), view_of<float>(f, "dk", dk), view_of<float>(f, "dv", dv),
        view_of<float>(f, "da", da), view_of<float>(f, "db", db), view_of<float>(f, "dgk", dgk),
        state_buffer(f, "dinitial_state", dinitial_state, n_state), const_view_of<float>(f, "dout", dout),
        state_buffer(f, "dfinal_state", dfinal_state, n_state), x.q, x.k, x.v, x.a, x.b, x.gk, dplr_options(f, options),
        state_buffer(f, "initial_state", initial_state, n_state));
  });
}

linattn_status linattn_dplr_recurrent_forward(const linattn_tensor* out, const linattn_tensor* q,
                                              const linattn_tensor* k, const linattn_tensor* v, const linattn_tensor* a,
                                              const linattn_tensor* b, const linattn_tensor* gk, float* state,
                                              int64_t n_state, const linattn_dplr_options* options) {
  const char* f = "linattn_dplr_recurrent_forward";
  return guard([&] {
    require_f32(f, "out", out);
    require(state, f, "state");
    const DplrInputs x = dplr_inputs(f, q, k, v, a, b, gk);
    linattn::dplr_delta_rule_recurrent_forward(view_of<float>(f, "out", out), x.q, x.k, x.v, x.a, x.b, x.gk,
                                               buffer(f, "state", state, n_state), dplr_options(f, options));
  });
}

linattn_status linattn_dplr_step(const linattn_tensor* out, const linattn_tensor* q, const linattn_tensor* k,
                                 const linattn_tensor* v, const linattn_tensor* a, const linattn_tensor* b,
                                 const linattn_tensor* gk, linattn_state* state, const linattn_dplr_options* options) {
  const char* f = "linattn_dplr_step";
  return guard([&] {
    require_f32(f, "out", out);
    const DplrInputs x = dplr_inputs(f, q, k, v, a, b, gk);
    linattn::dplr_delta_rule_step(view_of<float>(f, "out", out), x.q, x.k, x.v, x.a, x.b, x.gk, state_of(f, state),
                                  dplr_options(f, options));
  });
}

}  // extern "C"
