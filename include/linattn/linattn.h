/* linattn's C API: every operator (forward and backward), the recurrent state and the feature maps,
 * over tensor descriptors, for C and any language with a C FFI. C99; implemented in C++ by
 * src/capi/ and shipped as liblinattn_c (docs/c-api.md: ownership, errors, thread-safety).
 *
 * Conventions:
 * - Every function that can fail returns a linattn_status; LINATTN_OK is 0. On failure
 *   linattn_last_error() gives this thread's message, naming the argument, the value seen and the
 *   value expected. Nothing throws across this interface, out-of-memory included.
 * - Tensors are caller-owned memory described by linattn_tensor: logical order [B, N, H, D],
 *   strides in elements. Inputs are read, outputs overwritten; the library keeps no pointer.
 * - Handles (linattn_state, linattn_feature_map) are created by *_create / *_load and released by
 *   the matching *_free (NULL is accepted and ignored).
 * - A NULL tensor pointer where a tensor is optional (the gate g, the states) means "none". */
#ifndef LINATTN_LINATTN_H
#define LINATTN_LINATTN_H

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#define LINATTN_C_API
#elif defined(__GNUC__)
#define LINATTN_C_API __attribute__((visibility("default")))
#else
#define LINATTN_C_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* The C API's own version: bumped (major) when a struct or signature here changes incompatibly. */
#define LINATTN_C_API_VERSION 1

typedef enum linattn_status {
  LINATTN_OK = 0,
  LINATTN_ERROR_INVALID_ARGUMENT = 1,  /* a shape, stride, option or value the operator refuses */
  LINATTN_ERROR_NULL_POINTER = 2,      /* a required pointer argument is NULL */
  LINATTN_ERROR_UNSUPPORTED_DTYPE = 3, /* a known dtype a function cannot take (an f16 state, a bf16 output state) */
  LINATTN_ERROR_OUT_OF_MEMORY = 4,
  LINATTN_ERROR_IO = 5,      /* a state file that cannot be written, read or parsed */
  LINATTN_ERROR_INTERNAL = 6 /* anything else the library threw: a bug, please report it */
} linattn_status;

typedef enum linattn_dtype {
  LINATTN_F32 = 0,
  LINATTN_BF16 = 1, /* storage only: products accumulate in fp32, outputs rounded to nearest even */
  LINATTN_F16 = 2   /* IEEE binary16 storage, likewise */
} linattn_dtype;

/* A strided 4-d view [B, N, H, D] over caller memory; element (b, n, h, d) is at
 * data + b*stride[0] + n*stride[1] + h*stride[2] + d*stride[3] (elements of dtype). */
typedef struct linattn_tensor {
  void* data;
  int32_t dtype; /* a linattn_dtype */
  int64_t extent[4];
  int64_t stride[4];
} linattn_tensor;

/* A row-major [B, N, H, D] descriptor of f32 data, and one of memory laid out [B, H, N, D]. */
LINATTN_C_API linattn_tensor linattn_tensor_bnhd(float* data, int64_t B, int64_t N, int64_t H, int64_t D);
LINATTN_C_API linattn_tensor linattn_tensor_bhnd(float* data, int64_t B, int64_t H, int64_t N, int64_t D);

/* This thread's message for the last call that failed; "" after a call that succeeded. Valid until
 * this thread's next linattn call. Never NULL. */
LINATTN_C_API const char* linattn_last_error(void);
/* A fixed name for a status, e.g. "LINATTN_ERROR_NULL_POINTER". */
LINATTN_C_API const char* linattn_status_name(linattn_status status);

/* The library's version ("0.1.0"), its parts, and LINATTN_C_API_VERSION as built. */
LINATTN_C_API const char* linattn_version(void);
LINATTN_C_API void linattn_version_parts(int* major, int* minor, int* patch);
LINATTN_C_API int linattn_c_api_version(void);
/* The machine as linattn sees it (CPU features, Highway targets compiled in, the one dispatch chose,
 * version, threads): one JSON object, owned by the library, valid until this thread's next call. */
LINATTN_C_API const char* linattn_info_json(void);

/* Operator threads (OpenMP); 0 restores the default. Results are identical for every count. */
LINATTN_C_API linattn_status linattn_set_num_threads(int threads);
LINATTN_C_API int linattn_num_threads(void);

/* ---- Feature maps --------------------------------------------------------------------------- */

typedef struct linattn_feature_map linattn_feature_map;

typedef enum linattn_feature_role { LINATTN_ROLE_QUERY = 0, LINATTN_ROLE_KEY = 1 } linattn_feature_role;

/* "elu" (elu + 1, the default), "relu" or "identity". */
LINATTN_C_API linattn_status linattn_feature_map_create(const char* name, linattn_feature_map** out);
/* FAVOR+ positive random features for head dim `dim`; n_features 0: max(D, ceil(D ln D)). */
LINATTN_C_API linattn_status linattn_favor_map_create(int64_t dim, int64_t n_features, uint64_t seed, int orthogonal,
                                                      linattn_feature_map** out);
/* Random Fourier features for the Gaussian kernel; n_features even. */
LINATTN_C_API linattn_status linattn_random_fourier_map_create(int64_t dim, int64_t n_features, uint64_t seed,
                                                               linattn_feature_map** out);
LINATTN_C_API void linattn_feature_map_free(linattn_feature_map* map);
/* M, the number of features for head dim `dim`. */
LINATTN_C_API linattn_status linattn_feature_map_dim(const linattn_feature_map* map, int64_t dim, int64_t* features);
/* The map's name as a recurrent state records it, e.g. "elu" or "favor(d=16,m=45,seed=0,orthogonal)";
 * owned by the map. NULL for a NULL map. */
LINATTN_C_API const char* linattn_feature_map_name(const linattn_feature_map* map);
/* phi: [rows, M] = φ(x: [rows, D]), both contiguous f32. role: a value outside the enum is
 * LINATTN_ERROR_INVALID_ARGUMENT. */
LINATTN_C_API linattn_status linattn_feature_map_forward(const linattn_feature_map* map, float* phi, const float* x,
                                                         int64_t rows, int64_t dim, linattn_feature_role role);
/* dx: [rows, D] = (∂φ/∂x)ᵀ dphi, overwritten; dphi: [rows, M]. */
LINATTN_C_API linattn_status linattn_feature_map_backward(const linattn_feature_map* map, float* dx, const float* dphi,
                                                          const float* x, int64_t rows, int64_t dim,
                                                          linattn_feature_role role);

/* ---- Softmax attention ---------------------------------------------------------------------- */

typedef struct linattn_softmax_options {
  int has_scale; /* 0: scale = 1/sqrt(D) */
  float scale;
  int causal;                 /* bottom-right aligned: query i sees key j iff j <= i + (Nk - Nq) */
  const int64_t* key_lengths; /* [n_key_lengths = B] or NULL: all keys */
  int64_t n_key_lengths;
} linattn_softmax_options;

LINATTN_C_API void linattn_softmax_options_init(linattn_softmax_options* options);
/* out: [B, Nq, H, E]; lse: [B, H, Nq] contiguous f32 (B*H*Nq floats); q: [B, Nq, H, D];
 * k: [B, Nk, H, D]; v: [B, Nk, H, E]. options NULL: the defaults. */
LINATTN_C_API linattn_status linattn_softmax_forward(const linattn_tensor* out, float* lse, const linattn_tensor* q,
                                                     const linattn_tensor* k, const linattn_tensor* v,
                                                     const linattn_softmax_options* options);
/* dq, dk, dv overwritten; out and lse as the forward wrote them. */
LINATTN_C_API linattn_status linattn_softmax_backward(const linattn_tensor* dq, const linattn_tensor* dk,
                                                      const linattn_tensor* dv, const linattn_tensor* dout,
                                                      const linattn_tensor* q, const linattn_tensor* k,
                                                      const linattn_tensor* v, const linattn_tensor* out,
                                                      const float* lse, const linattn_softmax_options* options);

/* ---- Linear attention (non-causal, causal, recurrent) ---------------------------------------- */

typedef struct linattn_linear_options {
  const linattn_feature_map* feature_map; /* NULL: elu + 1; borrowed for the call only */
  float eps;                              /* added to the normaliser; default 1e-6 */
  int normalize;                          /* default 1 */
  int causal;                             /* default 0 */
  const int64_t* key_lengths;             /* [B] or NULL */
  int64_t n_key_lengths;
  int64_t chunk_size; /* causal mode's tokens per chunk; default 32 */
} linattn_linear_options;

typedef struct linattn_state linattn_state;

LINATTN_C_API void linattn_linear_options_init(linattn_linear_options* options);
/* out: [B, Nq, H, E]; q: [B, Nq, H, D]; k: [B, Nk, H, D]; v: [B, Nk, H, E]. */
LINATTN_C_API linattn_status linattn_linear_forward(const linattn_tensor* out, const linattn_tensor* q,
                                                    const linattn_tensor* k, const linattn_tensor* v,
                                                    const linattn_linear_options* options);
LINATTN_C_API linattn_status linattn_linear_backward(const linattn_tensor* dq, const linattn_tensor* dk,
                                                     const linattn_tensor* dv, const linattn_tensor* dout,
                                                     const linattn_tensor* q, const linattn_tensor* k,
                                                     const linattn_tensor* v, const linattn_linear_options* options);
/* Causal (options->causal implied), from `initial` (NULL: zero); final_state (NULL: not wanted) is
 * reshaped and overwritten with the state after the last key; it must be an f32 state (a bf16 one is
 * LINATTN_ERROR_UNSUPPORTED_DTYPE, left as it was). */
LINATTN_C_API linattn_status linattn_causal_linear_forward(const linattn_tensor* out, const linattn_tensor* q,
                                                           const linattn_tensor* k, const linattn_tensor* v,
                                                           const linattn_linear_options* options,
                                                           const linattn_state* initial, linattn_state* final_state);
/* dinitial (NULL: not wanted, else an f32 state) receives the gradient with respect to initial's S and z. */
LINATTN_C_API linattn_status linattn_causal_linear_backward(const linattn_tensor* dq, const linattn_tensor* dk,
                                                            const linattn_tensor* dv, const linattn_tensor* dout,
                                                            const linattn_tensor* q, const linattn_tensor* k,
                                                            const linattn_tensor* v,
                                                            const linattn_linear_options* options,
                                                            const linattn_state* initial, linattn_state* dinitial);
/* One token per (batch, head): out [B, 1, H, E]; q, k [B, 1, H, D]; v [B, 1, H, E]; advances state. */
LINATTN_C_API linattn_status linattn_recurrent_step(const linattn_tensor* out, const linattn_tensor* q,
                                                    const linattn_tensor* k, const linattn_tensor* v,
                                                    linattn_state* state, const linattn_linear_options* options);

/* ---- The recurrent state: S [B, H, M, E], z [B, H, M], and the tokens consumed ---------------- */

/* A zero state. feature_map: the name of the map (or recurrence) whose sums it holds: "elu", a random
 * map's linattn_feature_map_name, or a decayed / delta recurrence's name (linattn_decay_name); 1..256
 * printable ASCII characters without spaces (what linattn_state_save can write), else
 * LINATTN_ERROR_INVALID_ARGUMENT. */
LINATTN_C_API linattn_status linattn_state_create(int64_t batch, int64_t heads, int64_t feature_dim, int64_t value_dim,
                                                  const char* feature_map, linattn_state** out);
/* The same with S's element type: LINATTN_F32 (linattn_state_create's) or LINATTN_BF16 (half the decode
 * memory; z stays f32; the decode steps linattn_recurrent_step, linattn_decayed_step and
 * linattn_delta_step take a bf16 state, the other operators refuse it by name). LINATTN_F16 is
 * LINATTN_ERROR_UNSUPPORTED_DTYPE. */
LINATTN_C_API linattn_status linattn_state_create_dtype(int64_t batch, int64_t heads, int64_t feature_dim,
                                                        int64_t value_dim, const char* feature_map, int32_t dtype,
                                                        linattn_state** out);
/* S's element type: LINATTN_F32 or LINATTN_BF16 (a bf16 state saved and loaded stays bf16). */
LINATTN_C_API linattn_status linattn_state_dtype(const linattn_state* state, int32_t* dtype);
LINATTN_C_API void linattn_state_free(linattn_state* state);
LINATTN_C_API linattn_status linattn_state_reset(linattn_state* state);
/* Atomic write (temporary + rename), format docs/state-format.md; LINATTN_ERROR_IO on failure. */
LINATTN_C_API linattn_status linattn_state_save(const linattn_state* state, const char* path);
LINATTN_C_API linattn_status linattn_state_load(const char* path, linattn_state** out);
/* extents[4] = {batch, heads, feature_dim, value_dim}; position = tokens consumed. */
LINATTN_C_API linattn_status linattn_state_shape(const linattn_state* state, int64_t extents[4], int64_t* position);
/* The state's own S and z (contiguous, row-major), valid until the state is freed or reshaped;
 * sizes in floats. Either output pointer may be NULL. A bf16 state's S is not floats: NULL, size 0. */
LINATTN_C_API linattn_status linattn_state_data(linattn_state* state, float** S, int64_t* S_size, float** z,
                                                int64_t* z_size);
/* The name the state records; owned by the state. NULL for a NULL state. */
LINATTN_C_API const char* linattn_state_feature_map(const linattn_state* state);

/* ---- Linformer ------------------------------------------------------------------------------ */

typedef struct linattn_linformer_options {
  int64_t projected_length; /* P: rows of E and F */
  int64_t max_length;       /* N_max: columns of E and F */
  int share_heads;          /* 1: E, F are [1, P, N_max]; 0: [H, P, N_max] */
  int share_key_value;      /* 1: E projects both keys and values; pass F = dF = NULL */
  int has_scale;
  float scale;
  const int64_t* key_lengths; /* [B] or NULL */
  int64_t n_key_lengths;
} linattn_linformer_options;

LINATTN_C_API void linattn_linformer_options_init(linattn_linformer_options* options);
/* E, F: n_proj floats each, n_proj = (share_heads ? 1 : H) * P * N_max, contiguous; lse: B*H*Nq. */
LINATTN_C_API linattn_status linattn_linformer_forward(const linattn_tensor* out, float* lse, const linattn_tensor* q,
                                                       const linattn_tensor* k, const linattn_tensor* v, const float* E,
                                                       const float* F, int64_t n_proj,
                                                       const linattn_linformer_options* options);
LINATTN_C_API linattn_status linattn_linformer_backward(const linattn_tensor* dq, const linattn_tensor* dk,
                                                        const linattn_tensor* dv, float* dE, float* dF,
                                                        const linattn_tensor* dout, const linattn_tensor* q,
                                                        const linattn_tensor* k, const linattn_tensor* v,
                                                        const float* E, const float* F, int64_t n_proj,
                                                        const linattn_tensor* out, const float* lse,
                                                        const linattn_linformer_options* options);

/* ---- The decayed family: linear, retention, lightning, simple GLA, GLA ------------------------ */

typedef enum linattn_decay {
  LINATTN_DECAY_NONE = 0,      /* S_t = S_{t-1} + k vᵀ */
  LINATTN_DECAY_RETENTION = 1, /* RetNet: g = log(1 - 2^(-5-h)) */
  LINATTN_DECAY_HEAD = 2,      /* lightning: g = g_gamma[h] */
  LINATTN_DECAY_TOKEN = 3,     /* simple GLA: g [B, T, H, 1] */
  LINATTN_DECAY_KEY = 4        /* GLA: g [B, T, H, K] */
} linattn_decay;

typedef struct linattn_decay_options {
  int32_t decay; /* a linattn_decay */
  int has_scale; /* 0: K^-1/2 */
  float scale;
  const float* g_gamma; /* [H] for LINATTN_DECAY_HEAD, else NULL */
  int64_t n_g_gamma;
  const int64_t* cu_seqlens; /* [N + 1] packed sequences (B = 1), or NULL */
  int64_t n_cu_seqlens;
  int64_t chunk_size; /* default 64 */
} linattn_decay_options;

LINATTN_C_API void linattn_decay_options_init(linattn_decay_options* options);
/* The recurrence's name ("linear", "retention", "lightning", "simple_gla", "gla"), for
 * linattn_state_create; NULL for an unknown value. */
LINATTN_C_API const char* linattn_decay_name(int32_t decay);
/* Grouped value heads: v may have HV heads, a multiple of q's H (value head j reads q/k head j / (HV / H));
 * then out, g, g_gamma, beta and the states have HV heads where these comments say H (docs/c-api.md).
 * States are [N, H, K, V] contiguous f32 with n_state floats, or NULL (zero initial / not wanted); a
 * state pointer with n_state = 0 is LINATTN_ERROR_INVALID_ARGUMENT, as is any pointer whose count is 0
 * (cu_seqlens with n_cu_seqlens = 0: pass NULL for none). g: NULL for the decays without a gate tensor. */
LINATTN_C_API linattn_status linattn_decayed_forward(const linattn_tensor* out, const linattn_tensor* q,
                                                     const linattn_tensor* k, const linattn_tensor* v,
                                                     const linattn_tensor* g, const linattn_decay_options* options,
                                                     const float* initial_state, float* final_state, int64_t n_state);
/* dg: NULL when g is; dinitial_state, dfinal_state: NULL or n_state floats. */
LINATTN_C_API linattn_status linattn_decayed_backward(const linattn_tensor* dq, const linattn_tensor* dk,
                                                      const linattn_tensor* dv, const linattn_tensor* dg,
                                                      float* dinitial_state, const linattn_tensor* dout,
                                                      const float* dfinal_state, const linattn_tensor* q,
                                                      const linattn_tensor* k, const linattn_tensor* v,
                                                      const linattn_tensor* g, const linattn_decay_options* options,
                                                      const float* initial_state, int64_t n_state);
/* Token by token; state (n_state floats, required) holds the initial state and receives the final. */
LINATTN_C_API linattn_status linattn_decayed_recurrent_forward(const linattn_tensor* out, const linattn_tensor* q,
                                                               const linattn_tensor* k, const linattn_tensor* v,
                                                               const linattn_tensor* g, float* state, int64_t n_state,
                                                               const linattn_decay_options* options);
/* Decoding against a linattn_state made as (B, H, K, V, linattn_decay_name(decay)). */
LINATTN_C_API linattn_status linattn_decayed_step(const linattn_tensor* out, const linattn_tensor* q,
                                                  const linattn_tensor* k, const linattn_tensor* v,
                                                  const linattn_tensor* g, linattn_state* state,
                                                  const linattn_decay_options* options);

/* Mamba-2's SSD (mamba_ssm's mamba_chunk_scan_combined) is this family's LINATTN_DECAY_TOKEN call:
 *   h_t = exp(dt_t·A_h)·h_{t-1} + dt_t·B_t x_tᵀ,   y_t = C_tᵀ h_t + D_h·x_t
 * is linattn_decayed_forward with q = C, k = B (K = the state size N), v = dt·x (V = the head dim P),
 * g = dt·A [B, T, H, 1], has_scale = 1 and scale = 1, then y += D·x. With G groups of B and C (head h
 * reads group h / (H/G)), call once per group on heads [j·H/G, (j + 1)·H/G) of v, g and out, with q and k
 * descriptors of group j whose head stride is 0 (no copy); their gradients (linattn_decayed_backward, dq
 * and dk per head) sum over the group's heads. States are [N, H, N_state, P] (mamba_ssm's [batch, H, P,
 * N] transposed). docs/mamba.md has the mapping; the Python module's linattn.mamba has the whole interface. */

/* ---- The delta rule: DeltaNet, Gated DeltaNet, KDA ------------------------------------------- */

typedef enum linattn_delta_gate {
  LINATTN_DELTA_NONE = 0,  /* DeltaNet */
  LINATTN_DELTA_TOKEN = 1, /* Gated DeltaNet: g [B, T, H, 1] */
  LINATTN_DELTA_KEY = 2    /* KDA: g [B, T, H, K] */
} linattn_delta_gate;

typedef struct linattn_delta_options {
  int32_t gate; /* a linattn_delta_gate */
  int has_scale;
  float scale;
  int qk_l2norm;
  const int64_t* cu_seqlens;
  int64_t n_cu_seqlens;
  int64_t chunk_size; /* default 64 */
} linattn_delta_options;

LINATTN_C_API void linattn_delta_options_init(linattn_delta_options* options);
/* "delta_rule", "gated_delta_rule", "kda"; NULL for an unknown value. */
LINATTN_C_API const char* linattn_delta_name(int32_t gate);
/* beta: [B, T, H, 1]; g: NULL for DeltaNet; states as for the decayed family. */
LINATTN_C_API linattn_status linattn_delta_forward(const linattn_tensor* out, const linattn_tensor* q,
                                                   const linattn_tensor* k, const linattn_tensor* v,
                                                   const linattn_tensor* beta, const linattn_tensor* g,
                                                   const linattn_delta_options* options, const float* initial_state,
                                                   float* final_state, int64_t n_state);
LINATTN_C_API linattn_status linattn_delta_backward(
    const linattn_tensor* dq, const linattn_tensor* dk, const linattn_tensor* dv, const linattn_tensor* dbeta,
    const linattn_tensor* dg, float* dinitial_state, const linattn_tensor* dout, const float* dfinal_state,
    const linattn_tensor* q, const linattn_tensor* k, const linattn_tensor* v, const linattn_tensor* beta,
    const linattn_tensor* g, const linattn_delta_options* options, const float* initial_state, int64_t n_state);
LINATTN_C_API linattn_status linattn_delta_recurrent_forward(const linattn_tensor* out, const linattn_tensor* q,
                                                             const linattn_tensor* k, const linattn_tensor* v,
                                                             const linattn_tensor* beta, const linattn_tensor* g,
                                                             float* state, int64_t n_state,
                                                             const linattn_delta_options* options);
LINATTN_C_API linattn_status linattn_delta_step(const linattn_tensor* out, const linattn_tensor* q,
                                                const linattn_tensor* k, const linattn_tensor* v,
                                                const linattn_tensor* beta, const linattn_tensor* g,
                                                linattn_state* state, const linattn_delta_options* options);

/* ---- The DPLR delta rule: RWKV-7 ------------------------------------------------------------- */

/* S_t = (diag(exp(gk_t)) + b_t a_tᵀ) S_{t-1} + k_t v_tᵀ,  o_t = scale · S_tᵀ q_t  (include/linattn/dplr.hpp;
 * flash-linear-attention's chunk_dplr_delta_rule; RWKV-7's chunk_rwkv7 is r = q, w = gk, scale 1). q, k, a,
 * b, gk [B, T, H, K]; v, out [B, T, H, V]; states [N, H, K, V] contiguous f32 with n_state floats, N = B or
 * the number of packed sequences. f32 only: any other dtype is LINATTN_ERROR_UNSUPPORTED_DTYPE. The
 * recurrence runs token by token (its chunked form is not built yet), so linattn_dplr_forward and
 * linattn_dplr_recurrent_forward compute the same thing with the two families' state conventions. */
typedef struct linattn_dplr_options {
  int has_scale; /* 0: K^-1/2 */
  float scale;
  const int64_t* cu_seqlens; /* [N + 1] packed sequences (B = 1), or NULL */
  int64_t n_cu_seqlens;
} linattn_dplr_options;

LINATTN_C_API void linattn_dplr_options_init(linattn_dplr_options* options);
/* "dplr_delta_rule": the recurrence's name, for linattn_state_create (a state of another one is refused). */
LINATTN_C_API const char* linattn_dplr_name(void);
/* From initial_state (NULL: zero) into final_state (NULL: not wanted), as linattn_decayed_forward. */
LINATTN_C_API linattn_status linattn_dplr_forward(const linattn_tensor* out, const linattn_tensor* q,
                                                  const linattn_tensor* k, const linattn_tensor* v,
                                                  const linattn_tensor* a, const linattn_tensor* b,
                                                  const linattn_tensor* gk, const linattn_dplr_options* options,
                                                  const float* initial_state, float* final_state, int64_t n_state);
/* Overwrites dq, dk, dv, da, db, dgk; dinitial_state, dfinal_state, initial_state: NULL or n_state floats. */
LINATTN_C_API linattn_status linattn_dplr_backward(
    const linattn_tensor* dq, const linattn_tensor* dk, const linattn_tensor* dv, const linattn_tensor* da,
    const linattn_tensor* db, const linattn_tensor* dgk, float* dinitial_state, const linattn_tensor* dout,
    const float* dfinal_state, const linattn_tensor* q, const linattn_tensor* k, const linattn_tensor* v,
    const linattn_tensor* a, const linattn_tensor* b, const linattn_tensor* gk, const linattn_dplr_options* options,
    const float* initial_state, int64_t n_state);
/* state (n_state floats, required) holds the initial state and receives the final. */
LINATTN_C_API linattn_status linattn_dplr_recurrent_forward(const linattn_tensor* out, const linattn_tensor* q,
                                                            const linattn_tensor* k, const linattn_tensor* v,
                                                            const linattn_tensor* a, const linattn_tensor* b,
                                                            const linattn_tensor* gk, float* state, int64_t n_state,
                                                            const linattn_dplr_options* options);
/* Decoding against an f32 linattn_state made as (B, H, K, V, linattn_dplr_name()). */
LINATTN_C_API linattn_status linattn_dplr_step(const linattn_tensor* out, const linattn_tensor* q,
                                               const linattn_tensor* k, const linattn_tensor* v,
                                               const linattn_tensor* a, const linattn_tensor* b,
                                               const linattn_tensor* gk, linattn_state* state,
                                               const linattn_dplr_options* options);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* LINATTN_LINATTN_H */
