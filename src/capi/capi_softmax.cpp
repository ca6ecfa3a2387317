// The C API's softmax attention and Linformer (softmax over projected keys).
#include <optional>

#include "capi/capi_support.hpp"
#include "linattn/half_attention.hpp"
#include "linattn/linformer.hpp"
#include "linattn/softmax_attention.hpp"

using namespace linattn::capi;

namespace {

std::optional<float> scale_of(int has_scale, float scale) {
  return has_scale ? std::optional<float>(scale) : std::nullopt;
}

linattn::SoftmaxAttentionOptions softmax_options(const char* function, const linattn_softmax_options* o) {
  linattn::SoftmaxAttentionOptions options;
  if (o == nullptr) return options;
  options.scale = scale_of(o->has_scale, o->scale);
  options.causal = o->causal != 0;
  options.key_lengths = buffer(function, "options->key_lengths", o->key_lengths, o->n_key_lengths);
  return options;
}

linattn::LinformerOptions linformer_options(const char* function, const linattn_linformer_options* o) {
  require(o, function, "options");  // P and N_max have no default
  linattn::LinformerOptions options;
  options.projected_length = o->projected_length;
  options.max_length = o->max_length;
  options.share_heads = o->share_heads != 0;
  options.share_key_value = o->share_key_value != 0;
  options.scale = scale_of(o->has_scale, o->scale);
  options.key_lengths = buffer(function, "options->key_lengths", o->key_lengths, o->n_key_lengths);
  return options;
}

}  // namespace

extern "C" {

void linattn_softmax_options_init(linattn_softmax_options* options) {
  if (options) *options = linattn_softmax_options{0, 0.0f, 0, nullptr, 0};
}

linattn_status linattn_softmax_forward(const linattn_tensor* out, float* lse, const linattn_tensor* q,
                                       const linattn_tensor* k, const linattn_tensor* v,
                                       const linattn_softmax_options* options) {
  const char* f = "linattn_softmax_forward";
  return guard([&] {
    by_dtype(f, "out", out, [&](auto element) {
      using T = decltype(element);
      require(lse, f, "lse");
      linattn::softmax_attention_forward(view_of<T>(f, "out", out), {lse, size_t(lse_size(q))},
                                         const_view_of<T>(f, "q", q), const_view_of<T>(f, "k", k),
                                         const_view_of<T>(f, "v", v), softmax_options(f, options));
    });
  });
}

linattn_status linattn_softmax_backward(const linattn_tensor* dq, const linattn_tensor* dk, const linattn_tensor* dv,
                                        const linattn_tensor* dout, const linattn_tensor* q, const linattn_tensor* k,
                                        const linattn_tensor* v, const linattn_tensor* out, const float* lse,
                                        const linattn_softmax_options* options) {
  const char* f = "linattn_softmax_backward";
  return guard([&] {
    by_dtype(f, "dq", dq, [&](auto element) {
      using T = decltype(element);
      require(lse, f, "lse");
      linattn::softmax_attention_backward(
          view_of<T>(f, "dq", dq), view_of<T>(f, "dk", dk), view_of<T>(f, "dv", dv), const_view_of<T>(f, "dout", dout),
          const_view_of<T>(f, "q", q), const_view_of<T>(f, "k", k), const_view_of<T>(f, "v", v),
          const_view_of<T>(f, "out", out), {lse, size_t(lse_size(q))}, softmax_options(f, options));
    });
  });
}

void linattn_linformer_options_init(linattn_linformer_options* options) {
  if (options) *options = linattn_linformer_options{0, 0, 0, 0, 0, 0.0f, nullptr, 0};
}

linattn_status linattn_linformer_forward(const linattn_tensor* out, float* lse, const linattn_tensor* q,
                                         const linattn_tensor* k, const linattn_tensor* v, const float* E,
                                         const float* F, int64_t n_proj, const linattn_linformer_options* options) {
  const char* f = "linattn_linformer_forward";
  return guard([&] {
    by_dtype(f, "out", out, [&](auto element) {
      using T = decltype(element);
      require(lse, f, "lse");
      require(E, f, "E");
      const linattn::LinformerOptions o = linformer_options(f, options);
      linattn::linformer_attention_forward(view_of<T>(f, "out", out), {lse, size_t(lse_size(q))},
                                           const_view_of<T>(f, "q", q), const_view_of<T>(f, "k", k),
                                           const_view_of<T>(f, "v", v), buffer(f, "E", E, n_proj),
                                           F ? buffer(f, "F", F, n_proj) : std::span<const float>{}, o);
    });
  });
}

linattn_status linattn_linformer_backward(const linattn_tensor* dq, const linattn_tensor* dk, const linattn_tensor* dv,
                                          float* dE, float* dF, const linattn_tensor* dout, const linattn_tensor* q,
                                          const linattn_tensor* k, const linattn_tensor* v, const float* E,
                                          const float* F, int64_t n_proj, const linattn_tensor* out, const float* lse,
                                          const linattn_linformer_options* options) {
  const char* f = "linattn_linformer_backward";
  return guard([&] {
    by_dtype(f, "dq", dq, [&](auto element) {
      using T = decltype(element);
      require(lse, f, "lse");
      require(E, f, "E");
      require(dE, f, "dE");
      const linattn::LinformerOptions o = linformer_options(f, options);
      linattn::linformer_attention_backward(
          view_of<T>(f, "dq", dq), view_of<T>(f, "dk", dk), view_of<T>(f, "dv", dv), buffer(f, "dE", dE, n_proj),
          dF ? buffer(f, "dF", dF, n_proj) : std::span<float>{}, const_view_of<T>(f, "dout", dout),
          const_view_of<T>(f, "q", q), const_view_of<T>(f, "k", k), const_view_of<T>(f, "v", v),
          buffer(f, "E", E, n_proj), F ? buffer(f, "F", F, n_proj) : std::span<const float>{},
          const_view_of<T>(f, "out", out), {lse, size_t(lse_size(q))}, o);
    });
  });
}

}  // extern "C"
