// The C API's linear attention (non-causal, causal, recurrent) and its recurrent state.
#include <memory>
#include <string>

#include "capi/capi_support.hpp"
#include "linattn/half_attention.hpp"
#include "linattn/linear_attention.hpp"

using namespace linattn::capi;

namespace {

linattn::LinearAttentionOptions linear_options(const char* function, const linattn_linear_options* o) {
  linattn::LinearAttentionOptions options;
  if (o == nullptr) return options;
  if (o->feature_map != nullptr) options.feature_map = o->feature_map->map;
  options.eps = o->eps;
  options.normalize = o->normalize != 0;
  options.causal = o->causal != 0;
  options.key_lengths = buffer(function, "options->key_lengths", o->key_lengths, o->n_key_lengths);
  options.chunk_size = o->chunk_size;
  return options;
}

linattn::RecurrentState& state_of(const char* function, linattn_state* state, const char* name = "state") {
  require(state, function, name);
  return state->state;
}
const linattn::RecurrentState& state_of(const char* function, const linattn_state* state, const char* name = "state") {
  require(state, function, name);
  return state->state;
}

// A state an operator writes in f32 (the causal forward's final_state, the backward's dinitial): a bf16
// one was silently remade as f32, its dtype changed under the caller. NULL: not wanted.
linattn::RecurrentState* f32_output_state(const char* function, const char* name, linattn_state* state) {
  if (state == nullptr) return nullptr;
  if (state->state.dtype() != linattn::DType::f32)
    fail(LINATTN_ERROR_UNSUPPORTED_DTYPE, function,
         std::string(name) +
             " is a LINATTN_BF16 state, expected LINATTN_F32: this operator writes S in f32 (a bf16 state serves "
             "linattn_recurrent_step; create this one with linattn_state_create)");
  return &state->state;
}

linattn_status create_state(const char* f, int64_t batch, int64_t heads, int64_t feature_dim, int64_t value_dim,
                            const char* feature_map, int32_t dtype, linattn_state** out) {
  return guard([&] {
    require(out, f, "out");
    *out = nullptr;
    require(feature_map, f, "feature_map");
    // A name that linattn_state_save cannot write was taken here and refused only at the save.
    if (const std::string why = linattn::state_feature_map_name_error(feature_map); !why.empty())
      fail(LINATTN_ERROR_INVALID_ARGUMENT, f, "feature_map: " + why);
    const int64_t extents[4] = {batch, heads, feature_dim, value_dim};
    const char* names[4] = {"batch", "heads", "feature_dim", "value_dim"};
    for (int i = 0; i < 4; ++i)
      if (extents[i] < 1)
        fail(LINATTN_ERROR_INVALID_ARGUMENT, f,
             std::string(names[i]) + " is " + std::to_string(extents[i]) + ", expected >= 1");
    if (dtype == LINATTN_F16)
      fail(LINATTN_ERROR_UNSUPPORTED_DTYPE, f,
           "dtype is LINATTN_F16; a state holds S in LINATTN_F32 or LINATTN_BF16 (f16's range is too narrow for "
           "sums over a long context)");
    if (dtype != LINATTN_F32 && dtype != LINATTN_BF16)
      fail(LINATTN_ERROR_INVALID_ARGUMENT, f,
           "dtype is " + std::to_string(dtype) + ", expected LINATTN_F32 (0) or LINATTN_BF16 (1)");
    // Sizes inside every bound can still ask for more than the process may allocate (16 GiB in a 3 GiB
    // container was killed): refused before allocating, as LINATTN_ERROR_OUT_OF_MEMORY.
    const double rows = double(batch) * double(heads) * double(feature_dim);
    linattn::check_allocation(std::string(f) + " of a state [" + std::to_string(batch) + ", " + std::to_string(heads) +
                                  ", " + std::to_string(feature_dim) + ", " + std::to_string(value_dim) + "]",
                              rows * double(value_dim) * (dtype == LINATTN_BF16 ? 2.0 : 4.0) + rows * 4.0);
    auto handle = std::make_unique<linattn_state>();
    handle->state = linattn::RecurrentState(batch, heads, feature_dim, value_dim, feature_map,
                                            dtype == LINATTN_BF16 ? linattn::DType::bf16 : linattn::DType::f32);
    *out = handle.release();
  });
}

}  // namespace

extern "C" {

void linattn_linear_options_init(linattn_linear_options* options) {
  if (options) *options = linattn_linear_options{nullptr, 1e-6f, 1, 0, nullptr, 0, 32};
}

linattn_status linattn_linear_forward(const linattn_tensor* out, const linattn_tensor* q, const linattn_tensor* k,
                                      const linattn_tensor* v, const linattn_linear_options* options) {
  const char* f = "linattn_linear_forward";
  return guard([&] {
    by_dtype(f, "out", out, [&](auto element) {
      using T = decltype(element);
      linattn::linear_attention_forward(view_of<T>(f, "out", out), const_view_of<T>(f, "q", q),
                                        const_view_of<T>(f, "k", k), const_view_of<T>(f, "v", v),
                                        linear_options(f, options));
    });
  });
}

linattn_status linattn_linear_backward(const linattn_tensor* dq, const linattn_tensor* dk, const linattn_tensor* dv,
                                       const linattn_tensor* dout, const linattn_tensor* q, const linattn_tensor* k,
                                       const linattn_tensor* v, const linattn_linear_options* options) {
  const char* f = "linattn_linear_backward";
  return guard([&] {
    by_dtype(f, "dq", dq, [&](auto element) {
      using T = decltype(element);
      linattn::linear_attention_backward(view_of<T>(f, "dq", dq), view_of<T>(f, "dk", dk), view_of<T>(f, "dv", dv),
                                         const_view_of<T>(f, "dout", dout), const_view_of<T>(f, "q", q),
                                         const_view_of<T>(f, "k", k), const_view_of<T>(f, "v", v),
                                         linear_options(f, options));
    });
  });
}

linattn_status linattn_causal_linear_forward(const linattn_tensor* out, const linattn_tensor* q,
                                             const linattn_tensor* k, const linattn_tensor* v,
                                             const linattn_linear_options* options, const linattn_state* initial,
                                             linattn_state* final_state) {
  const char* f = "linattn_causal_linear_forward";
  return guard([&] {
    by_dtype(f, "out", out, [&](auto element) {
      using T = decltype(element);
      linattn::causal_linear_attention_forward(view_of<T>(f, "out", out), const_view_of<T>(f, "q", q),
                                               const_view_of<T>(f, "k", k), const_view_of<T>(f, "v", v),
                                               linear_options(f, options), initial ? &initial->state : nullptr,
                                               f32_output_state(f, "final_state", final_state));
    });
  });
}

linattn_status linattn_causal_linear_backward(const linattn_tensor* dq, const linattn_tensor* dk,
                                              const linattn_tensor* dv, const linattn_tensor* dout,
                                              const linattn_tensor* q, const linattn_tensor* k, const linattn_tensor* v,
                                              const linattn_linear_options* options, const linattn_state* initial,
                                              linattn_state* dinitial) {
  const char* f = "linattn_causal_linear_backward";
  return guard([&] {
    by_dtype(f, "dq", dq, [&](auto element) {
      using T = decltype(element);
      linattn::causal_linear_attention_backward(
          view_of<T>(f, "dq", dq), view_of<T>(f, "dk", dk), view_of<T>(f, "dv", dv), const_view_of<T>(f, "dout", dout),
          const_view_of<T>(f, "q", q), const_view_of<T>(f, "k", k), const_view_of<T>(f, "v", v),
          linear_options(f, options), initial ? &initial->state : nullptr, f32_output_state(f, "dinitial", dinitial));
    });
  });
}

linattn_status linattn_recurrent_step(const linattn_tensor* out, const linattn_tensor* q, const linattn_tensor* k,
                                      const linattn_tensor* v, linattn_state* state,
                                      const linattn_linear_options* options) {
  const char* f = "linattn_recurrent_step";
  return guard([&] {
    by_dtype(f, "out", out, [&](auto element) {
      using T = decltype(element);
      linattn::recurrent_step(view_of<T>(f, "out", out), const_view_of<T>(f, "q", q), const_view_of<T>(f, "k", k),
                              const_view_of<T>(f, "v", v), state_of(f, state), linear_options(f, options));
    });
  });
}

linattn_status linattn_state_create(int64_t batch, int64_t heads, int64_t feature_dim, int64_t value_dim,
                                    const char* feature_map, linattn_state** out) {
  return create_state("linattn_state_create", batch, heads, feature_dim, value_dim, feature_map, LINATTN_F32, out);
}

linattn_status linattn_state_create_dtype(int64_t batch, int64_t heads, int64_t feature_dim, int64_t value_dim,
                                          const char* feature_map, int32_t dtype, linattn_state** out) {
  return create_state("linattn_state_create_dtype", batch, heads, feature_dim, value_dim, feature_map, dtype, out);
}

linattn_status linattn_state_dtype(const linattn_state* state, int32_t* dtype) {
  const char* f = "linattn_state_dtype";
  return guard([&] {
    const linattn::RecurrentState& s = state_of(f, state);
    require(dtype, f, "dtype");
    *dtype = s.dtype() == linattn::DType::bf16 ? LINATTN_BF16 : LINATTN_F32;
  });
}

void linattn_state_free(linattn_state* state) { delete state; }

linattn_status linattn_state_reset(linattn_state* state) {
  return guard([&] { state_of("linattn_state_reset", state).reset(); });
}

linattn_status linattn_state_save(const linattn_state* state, const char* path) {
  const char* f = "linattn_state_save";
  return guard(
      [&] {
        const linattn::RecurrentState& s = state_of(f, state);
        require(path, f, "path");
        s.save(path);
      },
      /*io_errors=*/true);
}

linattn_status linattn_state_load(const char* path, linattn_state** out) {
  const char* f = "linattn_state_load";
  return guard(
      [&] {
        require(out, f, "out");
        *out = nullptr;
        require(path, f, "path");
        auto handle = std::make_unique<linattn_state>();
        handle->state = linattn::RecurrentState::load(path);
        *out = handle.release();
      },
      /*io_errors=*/true);
}

linattn_status linattn_state_shape(const linattn_state* state, int64_t extents[4], int64_t* position) {
  const char* f = "linattn_state_shape";
  return guard([&] {
    const linattn::RecurrentState& s = state_of(f, state);
    require(extents, f, "extents");
    extents[0] = s.batch();
    extents[1] = s.heads();
    extents[2] = s.feature_dim();
    extents[3] = s.value_dim();
    if (position) *position = s.position();
  });
}

linattn_status linattn_state_data(linattn_state* state, float** S, int64_t* S_size, float** z, int64_t* z_size) {
  const char* f = "linattn_state_data";
  return guard([&] {
    linattn::RecurrentState& s = state_of(f, state);
    if (S) *S = s.S().empty() ? nullptr : s.S().data();
    if (S_size) *S_size = int64_t(s.S().size());
    if (z) *z = s.z().data();
    if (z_size) *z_size = int64_t(s.z().size());
  });
}

const char* linattn_state_feature_map(const linattn_state* state) {
  return state == nullptr ? nullptr : state->state.feature_map().c_str();
}

}  // extern "C"
