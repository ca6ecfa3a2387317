/* The C API from C: every operator against a plain loop written here from its formula (forwards) or
 * against central finite differences of its own forward (backwards), the recurrent state's round
 * trips, the feature maps, and bad arguments (NULL, wrong extents, dtypes) giving the right status and
 * message. Compiled as C99 with -pedantic -Werror and linked to liblinattn_c only. Exit 0: all passed. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "linattn/linattn.h"
#include "support/sanitizers.h"
#ifdef LINATTN_TEST_MODEL_API
#include "linattn/linattn_model.h"
#endif

static int failures = 0, checks = 0;

#define CHECK(cond, ...)                                      \
  do {                                                        \
    ++checks;                                                 \
    if (!(cond)) {                                            \
      ++failures;                                             \
      fprintf(stderr, "%s:%d: FAILED: ", __FILE__, __LINE__); \
      fprintf(stderr, __VA_ARGS__);                           \
      fprintf(stderr, "\n");                                  \
    }                                                         \
  } while (0)

#define OK(call)                                                                                         \
  do {                                                                                                   \
    linattn_status s_ = (call);                                                                          \
    CHECK(s_ == LINATTN_OK, "%s returned %s: %s", #call, linattn_status_name(s_), linattn_last_error()); \
  } while (0)

/* Shapes: B batches, T tokens (Nk keys), NQ queries for the cross-attention cases, H heads, D head
 * dim, E value dim; small enough for finite differences of every element. */
enum { B = 2, T = 5, NQ = 4, H = 2, D = 3, E = 4, P = 3 };
#define QSIZE (B * T * H * D)
#define VSIZE (B * T * H * E)
#define GSIZE (B * T * H)
#define SSIZE (B * H * D * E)

static unsigned long long rng = 12345;
static float uniform(float lo, float hi) {
  rng = rng * 6364136223846793005ull + 1442695040888963407ull;
  return lo + (hi - lo) * (float)((rng >> 40) & 0xffffff) / 16777216.0f;
}
static void fill(float* x, int n, float lo, float hi) {
  int i;
  for (i = 0; i < n; ++i) x[i] = uniform(lo, hi);
}

/* [B, N, H, X] row-major. */
static int at(int b, int n, int h, int x, int N, int X) { return ((b * N + n) * H + h) * X + x; }

static double max_abs_diff(const float* a, const double* b, int n) {
  double m = 0;
  int i;
  for (i = 0; i < n; ++i)
    if (fabs(a[i] - b[i]) > m) m = fabs(a[i] - b[i]);
  return m;
}

/* ---- finite differences ---------------------------------------------------------------------- */

/* Runs a forward and returns the loss Σ out · dout (and any other terms the case adds). */
typedef double (*loss_fn)(void* ctx);

/* grad[i] against (loss(x + h e_i) − loss(x − h e_i)) / 2h for every i < n. */
static void check_gradient(const char* what, float* x, const float* grad, int n, loss_fn loss, void* ctx) {
  const float h = 1e-2f;
  double worst = 0;
  int i, bad = -1;
  for (i = 0; i < n; ++i) {
    const float saved = x[i];
    double plus, minus, numeric, err;
    x[i] = saved + h;
    plus = loss(ctx);
    x[i] = saved - h;
    minus = loss(ctx);
    x[i] = saved;
    numeric = (plus - minus) / (2.0 * (double)h);
    err = fabs(numeric - grad[i]) / (1.0 + fabs(numeric));
    if (err > worst) worst = err, bad = i;
  }
  CHECK(worst < 5e-3, "%s: gradient element %d is off by %g (relative) from finite differences", what, bad, worst);
}

static double dot(const float* a, const float* b, int n) {
  double s = 0;
  int i;
  for (i = 0; i < n; ++i) s += (double)a[i] * b[i];
  return s;
}

/* ---- softmax --------------------------------------------------------------------------------- */

/* out [B, Nq, H, E], lse [B, H, Nq] from the formula. */
static void softmax_loop(double* out, double* lse, const float* q, const float* k, const float* v, int Nq, int Nk,
                         int causal) {
  const double scale = 1.0 / sqrt((double)D);
  int b, h, i, j, d, e;
  for (b = 0; b < B; ++b)
    for (h = 0; h < H; ++h)
      for (i = 0; i < Nq; ++i) {
        double s[16], m = -INFINITY, sum = 0;
        const int last = causal ? i + (Nk - Nq) : Nk - 1;
        for (j = 0; j <= last; ++j) {
          s[j] = 0;
          for (d = 0; d < D; ++d) s[j] += (double)q[at(b, i, h, d, Nq, D)] * k[at(b, j, h, d, Nk, D)];
          s[j] *= scale;
          if (s[j] > m) m = s[j];
        }
        for (e = 0; e < E; ++e) out[at(b, i, h, e, Nq, E)] = 0;
        for (j = 0; j <= last; ++j) {
          const double p = exp(s[j] - m);
          sum += p;
          for (e = 0; e < E; ++e) out[at(b, i, h, e, Nq, E)] += p * v[at(b, j, h, e, Nk, E)];
        }
        for (e = 0; e < E; ++e) out[at(b, i, h, e, Nq, E)] /= sum;
        lse[(b * H + h) * Nq + i] = m + log(sum);
      }
}

struct softmax_case {
  float q[B * NQ * H * D], k[QSIZE], v[VSIZE], out[B * NQ * H * E], dout[B * NQ * H * E], lse[B * H * NQ];
  linattn_softmax_options options;
};

static double softmax_loss(void* p) {
  struct softmax_case* c = p;
  linattn_tensor out = linattn_tensor_bnhd(c->out, B, NQ, H, E), q = linattn_tensor_bnhd(c->q, B, NQ, H, D),
                 k = linattn_tensor_bnhd(c->k, B, T, H, D), v = linattn_tensor_bnhd(c->v, B, T, H, E);
  OK(linattn_softmax_forward(&out, c->lse, &q, &k, &v, &c->options));
  return dot(c->out, c->dout, B * NQ * H * E);
}

static void test_softmax(int causal) {
  static struct softmax_case c;
  double want[B * NQ * H * E], want_lse[B * H * NQ], lse_err = 0;
  float dq[B * NQ * H * D], dk[QSIZE], dv[VSIZE];
  int i;
  fill(c.q, B * NQ * H * D, -1, 1), fill(c.k, QSIZE, -1, 1), fill(c.v, VSIZE, -1, 1);
  fill(c.dout, B * NQ * H * E, -1, 1);
  linattn_softmax_options_init(&c.options);
  c.options.causal = causal;
  softmax_loss(&c);
  softmax_loop(want, want_lse, c.q, c.k, c.v, NQ, T, causal);
  CHECK(max_abs_diff(c.out, want, B * NQ * H * E) < 1e-5, "softmax forward (causal %d) differs from the loop by %g",
        causal, max_abs_diff(c.out, want, B * NQ * H * E));
  for (i = 0; i < B * H * NQ; ++i)
    if (fabs(c.lse[i] - want_lse[i]) > lse_err) lse_err = fabs(c.lse[i] - want_lse[i]);
  CHECK(lse_err < 1e-5, "softmax lse differs from the loop by %g", lse_err);
  {
    linattn_tensor tdq = linattn_tensor_bnhd(dq, B, NQ, H, D), tdk = linattn_tensor_bnhd(dk, B, T, H, D),
                   tdv = linattn_tensor_bnhd(dv, B, T, H, E), tdout = linattn_tensor_bnhd(c.dout, B, NQ, H, E),
                   q = linattn_tensor_bnhd(c.q, B, NQ, H, D), k = linattn_tensor_bnhd(c.k, B, T, H, D),
                   v = linattn_tensor_bnhd(c.v, B, T, H, E), out = linattn_tensor_bnhd(c.out, B, NQ, H, E);
    OK(linattn_softmax_backward(&tdq, &tdk, &tdv, &tdout, &q, &k, &v, &out, c.lse, &c.options));
  }
  check_gradient("softmax dq", c.q, dq, B * NQ * H * D, softmax_loss, &c);
  check_gradient("softmax dk", c.k, dk, QSIZE, softmax_loss, &c);
  check_gradient("softmax dv", c.v, dv, VSIZE, softmax_loss, &c);
}

/* ---- linear attention ------------------------------------------------------------------------ */

static double elu1(double x) { return x > 0 ? x + 1 : exp(x); }

/* out_i = Σ_j φ(q_i)·φ(k_j) v_j / (Σ_j φ(q_i)·φ(k_j) + eps), over j ≤ i when causal (Nq = Nk = T). */
static void linear_loop(double* out, const float* q, const float* k, const float* v, int causal) {
  int b, h, i, j, d, e;
  for (b = 0; b < B; ++b)
    for (h = 0; h < H; ++h)
      for (i = 0; i < T; ++i) {
        double num[E] = {0}, den = 0;
        for (j = 0; j < (causal ? i + 1 : T); ++j) {
          double w = 0;
          for (d = 0; d < D; ++d) w += elu1(q[at(b, i, h, d, T, D)]) * elu1(k[at(b, j, h, d, T, D)]);
          den += w;
          for (e = 0; e < E; ++e) num[e] += w * v[at(b, j, h, e, T, E)];
        }
        for (e = 0; e < E; ++e) out[at(b, i, h, e, T, E)] = num[e] / (den + 1e-6);
      }
}

struct linear_case {
  float q[QSIZE], k[QSIZE], v[VSIZE], out[VSIZE], dout[VSIZE];
  linattn_linear_options options;
  linattn_state* initial; /* causal only; may be NULL */
};

static double linear_loss(void* p) {
  struct linear_case* c = p;
  linattn_tensor out = linattn_tensor_bnhd(c->out, B, T, H, E), q = linattn_tensor_bnhd(c->q, B, T, H, D),
                 k = linattn_tensor_bnhd(c->k, B, T, H, D), v = linattn_tensor_bnhd(c->v, B, T, H, E);
  if (c->options.causal)
    OK(linattn_causal_linear_forward(&out, &q, &k, &v, &c->options, c->initial, NULL));
  else
    OK(linattn_linear_forward(&out, &q, &k, &v, &c->options));
  return dot(c->out, c->dout, VSIZE);
}

static void test_linear(int causal) {
  static struct linear_case c;
  double want[VSIZE];
  float dq[QSIZE], dk[QSIZE], dv[VSIZE];
  linattn_tensor tdq = linattn_tensor_bnhd(dq, B, T, H, D), tdk = linattn_tensor_bnhd(dk, B, T, H, D),
                 tdv = linattn_tensor_bnhd(dv, B, T, H, E), tdout = linattn_tensor_bnhd(c.dout, B, T, H, E),
                 q = linattn_tensor_bnhd(c.q, B, T, H, D), k = linattn_tensor_bnhd(c.k, B, T, H, D),
                 v = linattn_tensor_bnhd(c.v, B, T, H, E);
  fill(c.q, QSIZE, -1, 1), fill(c.k, QSIZE, -1, 1), fill(c.v, VSIZE, -1, 1), fill(c.dout, VSIZE, -1, 1);
  linattn_linear_options_init(&c.options);
  c.options.causal = causal;
  c.options.chunk_size = 2; /* several chunks over T = 5 */
  c.initial = NULL;
  linear_loss(&c);
  linear_loop(want, c.q, c.k, c.v, causal);
  CHECK(max_abs_diff(c.out, want, VSIZE) < 1e-5, "linear forward (causal %d) differs from the loop by %g", causal,
        max_abs_diff(c.out, want, VSIZE));
  if (causal)
    OK(linattn_causal_linear_backward(&tdq, &tdk, &tdv, &tdout, &q, &k, &v, &c.options, NULL, NULL));
  else
    OK(linattn_linear_backward(&tdq, &tdk, &tdv, &tdout, &q, &k, &v, &c.options));
  check_gradient(causal ? "causal dq" : "linear dq", c.q, dq, QSIZE, linear_loss, &c);
  check_gradient(causal ? "causal dk" : "linear dk", c.k, dk, QSIZE, linear_loss, &c);
  check_gradient(causal ? "causal dv" : "linear dv", c.v, dv, VSIZE, linear_loss, &c);
}

/* The causal forward from an initial state, its dinitial against finite differences of the state's S
 * and z, and token-by-token recurrent steps reproducing the causal output and final state. */
static void test_recurrent_and_state(void) {
  static struct linear_case c;
  linattn_state *initial = NULL, *final_state = NULL, *dinitial = NULL, *stepped = NULL, *loaded = NULL;
  float *S = NULL, *z = NULL, *dS = NULL, *dz = NULL, *S2 = NULL, *z2 = NULL;
  int64_t nS = 0, nz = 0, extents[4], position = -1;
  float dq[QSIZE], dk[QSIZE], dv[VSIZE], step_out[VSIZE];
  int n, b, h, x, i;
  linattn_tensor tdq = linattn_tensor_bnhd(dq, B, T, H, D), tdk = linattn_tensor_bnhd(dk, B, T, H, D),
                 tdv = linattn_tensor_bnhd(dv, B, T, H, E), tdout = linattn_tensor_bnhd(c.dout, B, T, H, E),
                 q = linattn_tensor_bnhd(c.q, B, T, H, D), k = linattn_tensor_bnhd(c.k, B, T, H, D),
                 v = linattn_tensor_bnhd(c.v, B, T, H, E);
  const char* path = "c_api_test_state.bin";

  fill(c.q, QSIZE, -1, 1), fill(c.k, QSIZE, -1, 1), fill(c.v, VSIZE, -1, 1), fill(c.dout, VSIZE, -1, 1);
  linattn_linear_options_init(&c.options);
  c.options.causal = 1;
  OK(linattn_state_create(B, H, D, E, "elu", &initial));
  OK(linattn_state_create(B, H, D, E, "elu", &final_state));
  OK(linattn_state_create(B, H, D, E, "elu", &dinitial));
  OK(linattn_state_data(initial, &S, &nS, &z, &nz));
  CHECK(nS == SSIZE && nz == B * H * D, "state sizes %lld, %lld", (long long)nS, (long long)nz);
  fill(S, (int)nS, -0.5f, 0.5f), fill(z, (int)nz, 0.5f, 1.5f); /* z > 0: a normaliser away from 0 */
  c.initial = initial;

  {
    linattn_tensor out = linattn_tensor_bnhd(c.out, B, T, H, E);
    OK(linattn_causal_linear_forward(&out, &q, &k, &v, &c.options, initial, final_state));
  }
  OK(linattn_causal_linear_backward(&tdq, &tdk, &tdv, &tdout, &q, &k, &v, &c.options, initial, dinitial));
  OK(linattn_state_data(dinitial, &dS, NULL, &dz, NULL));
  check_gradient("causal dinitial S", S, dS, (int)nS, linear_loss, &c);
  check_gradient("causal dinitial z", z, dz, (int)nz, linear_loss, &c);
  check_gradient("causal dq (with an initial state)", c.q, dq, QSIZE, linear_loss, &c);

  /* The same tokens one at a time from a copy of the initial state (through a file). */
  OK(linattn_state_save(initial, path));
  OK(linattn_state_load(path, &stepped));
  OK(linattn_state_shape(stepped, extents, &position));
  CHECK(extents[0] == B && extents[1] == H && extents[2] == D && extents[3] == E && position == 0,
        "loaded state shape [%lld %lld %lld %lld] position %lld", (long long)extents[0], (long long)extents[1],
        (long long)extents[2], (long long)extents[3], (long long)position);
  CHECK(strcmp(linattn_state_feature_map(stepped), "elu") == 0, "loaded state's map is %s",
        linattn_state_feature_map(stepped));
  linear_loss(&c); /* c.out = the causal output from the initial state again */
  for (n = 0; n < T; ++n) {
    float qt[B * H * D], kt[B * H * D], vt[B * H * E], ot[B * H * E];
    linattn_tensor tq = linattn_tensor_bnhd(qt, B, 1, H, D), tk = linattn_tensor_bnhd(kt, B, 1, H, D),
                   tv = linattn_tensor_bnhd(vt, B, 1, H, E), to = linattn_tensor_bnhd(ot, B, 1, H, E);
    for (b = 0; b < B; ++b)
      for (h = 0; h < H; ++h) {
        for (x = 0; x < D; ++x) qt[(b * H + h) * D + x] = c.q[at(b, n, h, x, T, D)];
        for (x = 0; x < D; ++x) kt[(b * H + h) * D + x] = c.k[at(b, n, h, x, T, D)];
        for (x = 0; x < E; ++x) vt[(b * H + h) * E + x] = c.v[at(b, n, h, x, T, E)];
      }
    OK(linattn_recurrent_step(&to, &tq, &tk, &tv, stepped, NULL));
    for (b = 0; b < B; ++b)
      for (h = 0; h < H; ++h)
        for (x = 0; x < E; ++x) step_out[at(b, n, h, x, T, E)] = ot[(b * H + h) * E + x];
  }
  {
    double worst = 0;
    for (i = 0; i < VSIZE; ++i)
      if (fabs(step_out[i] - c.out[i]) > worst) worst = fabs(step_out[i] - c.out[i]);
    CHECK(worst < 1e-5, "recurrent steps differ from the causal forward by %g", worst);
  }
  OK(linattn_state_shape(stepped, extents, &position));
  CHECK(position == T, "position after %d steps is %lld", T, (long long)position);
  OK(linattn_state_data(stepped, &S, NULL, &z, NULL));
  OK(linattn_state_data(final_state, &S2, NULL, &z2, NULL));
  {
    double worst = 0;
    for (i = 0; i < SSIZE; ++i)
      if (fabs(S[i] - S2[i]) > worst) worst = fabs(S[i] - S2[i]);
    CHECK(worst < 1e-5, "stepped S differs from the causal final state by %g", worst);
  }
  OK(linattn_state_save(stepped, path));
  OK(linattn_state_load(path, &loaded));
  OK(linattn_state_data(loaded, &S2, NULL, NULL, NULL));
  CHECK(memcmp(S, S2, sizeof(float) * SSIZE) == 0, "a saved and loaded state's S changed");
  OK(linattn_state_reset(loaded));
  OK(linattn_state_shape(loaded, extents, &position));
  CHECK(position == 0 && S2[0] == 0.0f, "reset left position %lld, S[0] %g", (long long)position, S2[0]);
  remove(path);

  linattn_state_free(initial), linattn_state_free(final_state), linattn_state_free(dinitial);
  linattn_state_free(stepped), linattn_state_free(loaded);
  linattn_state_free(NULL);
}

/* ---- feature maps ----------------------------------------------------------------------------- */

/* FAVOR+: linear attention with the map equals the normalised sum over the map's own features. */
static void test_feature_maps(void) {
  linattn_feature_map *favor = NULL, *rff = NULL, *relu = NULL, *bad = NULL;
  int64_t M = 0;
  float q[QSIZE], k[QSIZE], v[VSIZE], out[VSIZE], phq[B * T * H * 64], phk[B * T * H * 64];
  double want[VSIZE];
  int b, h, i, j, m, e;
  linattn_linear_options options;
  linattn_tensor tq = linattn_tensor_bnhd(q, B, T, H, D), tk = linattn_tensor_bnhd(k, B, T, H, D),
                 tv = linattn_tensor_bnhd(v, B, T, H, E), to = linattn_tensor_bnhd(out, B, T, H, E);
  fill(q, QSIZE, -1, 1), fill(k, QSIZE, -1, 1), fill(v, VSIZE, -1, 1);

  OK(linattn_favor_map_create(D, 8, 7, 1, &favor));
  OK(linattn_feature_map_dim(favor, D, &M));
  CHECK(M == 8, "favor feature dim %lld, expected 8", (long long)M);
  CHECK(strncmp(linattn_feature_map_name(favor), "favor(", 6) == 0, "favor name %s", linattn_feature_map_name(favor));
  /* q and k are [B, T, H, D] row-major: B*T*H contiguous rows of D. */
  OK(linattn_feature_map_forward(favor, phq, q, B * T * H, D, LINATTN_ROLE_QUERY));
  OK(linattn_feature_map_forward(favor, phk, k, B * T * H, D, LINATTN_ROLE_KEY));
  linattn_linear_options_init(&options);
  options.feature_map = favor;
  OK(linattn_linear_forward(&to, &tq, &tk, &tv, &options));
  for (b = 0; b < B; ++b)
    for (h = 0; h < H; ++h)
      for (i = 0; i < T; ++i) {
        double num[E] = {0}, den = 0;
        for (j = 0; j < T; ++j) {
          double w = 0;
          for (m = 0; m < M; ++m) w += (double)phq[((b * T + i) * H + h) * M + m] * phk[((b * T + j) * H + h) * M + m];
          den += w;
          for (e = 0; e < E; ++e) num[e] += w * v[at(b, j, h, e, T, E)];
        }
        for (e = 0; e < E; ++e) want[at(b, i, h, e, T, E)] = num[e] / (den + 1e-6);
      }
  CHECK(max_abs_diff(out, want, VSIZE) < 1e-5, "favor linear attention differs from its features by %g",
        max_abs_diff(out, want, VSIZE));

  /* relu's backward: dx = dphi where x > 0. */
  OK(linattn_feature_map_create("relu", &relu));
  {
    float x[6] = {-1, 2, 0.5f, -0.25f, 3, -2}, dphi[6] = {1, 2, 3, 4, 5, 6}, dx[6];
    OK(linattn_feature_map_backward(relu, dx, dphi, x, 2, 3, LINATTN_ROLE_KEY));
    CHECK(dx[0] == 0 && dx[1] == 2 && dx[2] == 3 && dx[3] == 0 && dx[4] == 5 && dx[5] == 0, "relu backward");
  }
  OK(linattn_random_fourier_map_create(D, 6, 1, &rff));
  OK(linattn_feature_map_dim(rff, D, &M));
  CHECK(M == 6, "random Fourier feature dim %lld", (long long)M);
  CHECK(linattn_random_fourier_map_create(D, 5, 1, &bad) == LINATTN_ERROR_INVALID_ARGUMENT && bad == NULL,
        "an odd random Fourier feature count was accepted");
  CHECK(linattn_feature_map_create("softplus", &bad) == LINATTN_ERROR_INVALID_ARGUMENT && bad == NULL &&
            strstr(linattn_last_error(), "softplus") != NULL,
        "an unknown map name: %s", linattn_last_error());
  linattn_feature_map_free(favor), linattn_feature_map_free(rff), linattn_feature_map_free(relu);
}

/* ---- Linformer -------------------------------------------------------------------------------- */

struct linformer_case {
  float q[B * NQ * H * D], k[QSIZE], v[VSIZE], out[B * NQ * H * E], dout[B * NQ * H * E], lse[B * H * NQ];
  float Ep[H * P * T], Fp[H * P * T];
  linattn_linformer_options options;
};

static double linformer_loss(void* p) {
  struct linformer_case* c = p;
  linattn_tensor out = linattn_tensor_bnhd(c->out, B, NQ, H, E), q = linattn_tensor_bnhd(c->q, B, NQ, H, D),
                 k = linattn_tensor_bnhd(c->k, B, T, H, D), v = linattn_tensor_bnhd(c->v, B, T, H, E);
  OK(linattn_linformer_forward(&out, c->lse, &q, &k, &v, c->Ep, c->Fp, H * P * T, &c->options));
  return dot(c->out, c->dout, B * NQ * H * E);
}

static void test_linformer(void) {
  static struct linformer_case c;
  float kp[B * P * H * D], vp[B * P * H * E], dq[B * NQ * H * D], dk[QSIZE], dv[VSIZE], dE[H * P * T], dF[H * P * T];
  double want[B * NQ * H * E], want_lse[B * H * NQ];
  int b, h, p, n, x;
  fill(c.q, B * NQ * H * D, -1, 1), fill(c.k, QSIZE, -1, 1), fill(c.v, VSIZE, -1, 1);
  fill(c.dout, B * NQ * H * E, -1, 1), fill(c.Ep, H * P * T, -0.5f, 0.5f), fill(c.Fp, H * P * T, -0.5f, 0.5f);
  linattn_linformer_options_init(&c.options);
  c.options.projected_length = P;
  c.options.max_length = T;
  linformer_loss(&c);
  /* k̃ = E k and ṽ = F v per head, then the softmax loop over the P projected positions. */
  for (b = 0; b < B; ++b)
    for (h = 0; h < H; ++h)
      for (p = 0; p < P; ++p) {
        for (x = 0; x < D; ++x) {
          double s = 0;
          for (n = 0; n < T; ++n) s += (double)c.Ep[(h * P + p) * T + n] * c.k[at(b, n, h, x, T, D)];
          kp[at(b, p, h, x, P, D)] = (float)s;
        }
        for (x = 0; x < E; ++x) {
          double s = 0;
          for (n = 0; n < T; ++n) s += (double)c.Fp[(h * P + p) * T + n] * c.v[at(b, n, h, x, T, E)];
          vp[at(b, p, h, x, P, E)] = (float)s;
        }
      }
  softmax_loop(want, want_lse, c.q, kp, vp, NQ, P, 0);
  CHECK(max_abs_diff(c.out, want, B * NQ * H * E) < 1e-5, "linformer forward differs from the loop by %g",
        max_abs_diff(c.out, want, B * NQ * H * E));
  {
    linattn_tensor tdq = linattn_tensor_bnhd(dq, B, NQ, H, D), tdk = linattn_tensor_bnhd(dk, B, T, H, D),
                   tdv = linattn_tensor_bnhd(dv, B, T, H, E), tdout = linattn_tensor_bnhd(c.dout, B, NQ, H, E),
                   q = linattn_tensor_bnhd(c.q, B, NQ, H, D), k = linattn_tensor_bnhd(c.k, B, T, H, D),
                   v = linattn_tensor_bnhd(c.v, B, T, H, E), out = linattn_tensor_bnhd(c.out, B, NQ, H, E);
    OK(linattn_linformer_backward(&tdq, &tdk, &tdv, dE, dF, &tdout, &q, &k, &v, c.Ep, c.Fp, H * P * T, &out, c.lse,
                                  &c.options));
  }
  check_gradient("linformer dq", c.q, dq, B * NQ * H * D, linformer_loss, &c);
  check_gradient("linformer dk", c.k, dk, QSIZE, linformer_loss, &c);
  check_gradient("linformer dv", c.v, dv, VSIZE, linformer_loss, &c);
  check_gradient("linformer dE", c.Ep, dE, H * P * T, linformer_loss, &c);
  check_gradient("linformer dF", c.Fp, dF, H * P * T, linformer_loss, &c);
}

/* ---- the decayed family and the delta rule ----------------------------------------------------- */

/* Per (b, h), from S = initial: decayed: S = exp(g) S + k vᵀ; delta: P = exp(g) S,
 * S = P + β k (v − Pᵀk)ᵀ; then o = scale Sᵀ q. The state is [B, H, K, V]. */
static void recurrence_loop(double* out, double* state, const float* q, const float* k, const float* v, const float* g,
                            const float* beta, const float* initial, int delta) {
  const double scale = 1.0 / sqrt((double)D);
  int b, h, t, d, e;
  for (b = 0; b < B; ++b)
    for (h = 0; h < H; ++h) {
      double S[D][E];
      for (d = 0; d < D; ++d)
        for (e = 0; e < E; ++e) S[d][e] = initial[((b * H + h) * D + d) * E + e];
      for (t = 0; t < T; ++t) {
        const double decay = exp(g[(b * T + t) * H + h]);
        for (d = 0; d < D; ++d)
          for (e = 0; e < E; ++e) S[d][e] *= decay;
        for (e = 0; e < E; ++e) {
          double u = v[at(b, t, h, e, T, E)];
          if (delta) {
            double pk = 0;
            for (d = 0; d < D; ++d) pk += S[d][e] * k[at(b, t, h, d, T, D)];
            u = beta[(b * T + t) * H + h] * (u - pk);
          }
          for (d = 0; d < D; ++d) S[d][e] += k[at(b, t, h, d, T, D)] * u;
        }
        for (e = 0; e < E; ++e) {
          double o = 0;
          for (d = 0; d < D; ++d) o += S[d][e] * q[at(b, t, h, d, T, D)];
          out[at(b, t, h, e, T, E)] = scale * o;
        }
      }
      for (d = 0; d < D; ++d)
        for (e = 0; e < E; ++e) state[((b * H + h) * D + d) * E + e] = S[d][e];
    }
}

struct recurrence_case {
  int delta;
  float q[QSIZE], k[QSIZE], v[VSIZE], g[GSIZE], beta[GSIZE], out[VSIZE], dout[VSIZE];
  float initial[SSIZE], final_state[SSIZE], dfinal[SSIZE];
  linattn_decay_options decay;
  linattn_delta_options gate;
};

/* Σ out · dout + Σ final_state · dfinal. */
static double recurrence_loss(void* p) {
  struct recurrence_case* c = p;
  linattn_tensor out = linattn_tensor_bnhd(c->out, B, T, H, E), q = linattn_tensor_bnhd(c->q, B, T, H, D),
                 k = linattn_tensor_bnhd(c->k, B, T, H, D), v = linattn_tensor_bnhd(c->v, B, T, H, E),
                 g = linattn_tensor_bnhd(c->g, B, T, H, 1), beta = linattn_tensor_bnhd(c->beta, B, T, H, 1);
  if (c->delta)
    OK(linattn_delta_forward(&out, &q, &k, &v, &beta, &g, &c->gate, c->initial, c->final_state, SSIZE));
  else
    OK(linattn_decayed_forward(&out, &q, &k, &v, &g, &c->decay, c->initial, c->final_state, SSIZE));
  return dot(c->out, c->dout, VSIZE) + dot(c->final_state, c->dfinal, SSIZE);
}

static void test_recurrence(int delta) {
  static struct recurrence_case c;
  const char* name = delta ? "gated delta rule" : "simple GLA";
  double want[VSIZE], want_state[SSIZE];
  float dq[QSIZE], dk[QSIZE], dv[VSIZE], dg[GSIZE], dbeta[GSIZE], dinitial[SSIZE], rec_out[VSIZE], rec_state[SSIZE];
  linattn_state* state = NULL;
  float* S = NULL;
  char what[64];
  linattn_tensor tdq = linattn_tensor_bnhd(dq, B, T, H, D), tdk = linattn_tensor_bnhd(dk, B, T, H, D),
                 tdv = linattn_tensor_bnhd(dv, B, T, H, E), tdg = linattn_tensor_bnhd(dg, B, T, H, 1),
                 tdbeta = linattn_tensor_bnhd(dbeta, B, T, H, 1), tdout = linattn_tensor_bnhd(c.dout, B, T, H, E),
                 q = linattn_tensor_bnhd(c.q, B, T, H, D), k = linattn_tensor_bnhd(c.k, B, T, H, D),
                 v = linattn_tensor_bnhd(c.v, B, T, H, E), g = linattn_tensor_bnhd(c.g, B, T, H, 1),
                 beta = linattn_tensor_bnhd(c.beta, B, T, H, 1), rout = linattn_tensor_bnhd(rec_out, B, T, H, E);
  c.delta = delta;
  fill(c.q, QSIZE, -1, 1), fill(c.k, QSIZE, -1, 1), fill(c.v, VSIZE, -1, 1), fill(c.dout, VSIZE, -1, 1);
  fill(c.g, GSIZE, -0.5f, -0.05f), fill(c.beta, GSIZE, 0.1f, 0.9f);
  fill(c.initial, SSIZE, -0.5f, 0.5f), fill(c.dfinal, SSIZE, -1, 1);
  linattn_decay_options_init(&c.decay);
  c.decay.decay = LINATTN_DECAY_TOKEN;
  c.decay.chunk_size = 2;
  linattn_delta_options_init(&c.gate);
  c.gate.gate = LINATTN_DELTA_TOKEN;
  c.gate.chunk_size = 2;

  recurrence_loss(&c);
  recurrence_loop(want, want_state, c.q, c.k, c.v, c.g, c.beta, c.initial, delta);
  CHECK(max_abs_diff(c.out, want, VSIZE) < 1e-5, "%s chunked forward differs from the loop by %g", name,
        max_abs_diff(c.out, want, VSIZE));
  CHECK(max_abs_diff(c.final_state, want_state, SSIZE) < 1e-5, "%s final state differs from the loop by %g", name,
        max_abs_diff(c.final_state, want_state, SSIZE));

  /* Token by token over a state buffer, then decoding against a linattn_state. */
  memcpy(rec_state, c.initial, sizeof rec_state);
  if (delta)
    OK(linattn_delta_recurrent_forward(&rout, &q, &k, &v, &beta, &g, rec_state, SSIZE, &c.gate));
  else
    OK(linattn_decayed_recurrent_forward(&rout, &q, &k, &v, &g, rec_state, SSIZE, &c.decay));
  CHECK(max_abs_diff(rec_out, want, VSIZE) < 1e-5, "%s recurrent forward differs from the loop by %g", name,
        max_abs_diff(rec_out, want, VSIZE));
  OK(linattn_state_create(
      B, H, D, E, delta ? linattn_delta_name(LINATTN_DELTA_TOKEN) : linattn_decay_name(LINATTN_DECAY_TOKEN), &state));
  OK(linattn_state_data(state, &S, NULL, NULL, NULL));
  memcpy(S, c.initial, sizeof c.initial);
  memset(rec_out, 0, sizeof rec_out);
  if (delta)
    OK(linattn_delta_step(&rout, &q, &k, &v, &beta, &g, state, &c.gate));
  else
    OK(linattn_decayed_step(&rout, &q, &k, &v, &g, state, &c.decay));
  CHECK(max_abs_diff(rec_out, want, VSIZE) < 1e-5 && max_abs_diff(S, want_state, SSIZE) < 1e-5,
        "%s decoding step differs from the loop by %g", name, max_abs_diff(rec_out, want, VSIZE));
  /* A state made for the other family is refused, naming both recurrences. */
  {
    linattn_state* other = NULL;
    OK(linattn_state_create(B, H, D, E, "elu", &other));
    CHECK((delta ? linattn_delta_step(&rout, &q, &k, &v, &beta, &g, other, &c.gate)
                 : linattn_decayed_step(&rout, &q, &k, &v, &g, other, &c.decay)) == LINATTN_ERROR_INVALID_ARGUMENT,
          "%s step accepted an elu state", name);
    linattn_state_free(other);
  }
  linattn_state_free(state);

  if (delta)
    OK(linattn_delta_backward(&tdq, &tdk, &tdv, &tdbeta, &tdg, dinitial, &tdout, c.dfinal, &q, &k, &v, &beta, &g,
                              &c.gate, c.initial, SSIZE));
  else
    OK(linattn_decayed_backward(&tdq, &tdk, &tdv, &tdg, dinitial, &tdout, c.dfinal, &q, &k, &v, &g, &c.decay, c.initial,
                                SSIZE));
  sprintf(what, "%s dq", name), check_gradient(what, c.q, dq, QSIZE, recurrence_loss, &c);
  sprintf(what, "%s dk", name), check_gradient(what, c.k, dk, QSIZE, recurrence_loss, &c);
  sprintf(what, "%s dv", name), check_gradient(what, c.v, dv, VSIZE, recurrence_loss, &c);
  sprintf(what, "%s dg", name), check_gradient(what, c.g, dg, GSIZE, recurrence_loss, &c);
  sprintf(what, "%s dinitial", name), check_gradient(what, c.initial, dinitial, SSIZE, recurrence_loss, &c);
  if (delta) sprintf(what, "%s dbeta", name), check_gradient(what, c.beta, dbeta, GSIZE, recurrence_loss, &c);
}

/* ---- errors ----------------------------------------------------------------------------------- */

static int contains(const char* haystack, const char* needle) { return strstr(haystack, needle) != NULL; }

/* bf16 bits of x, rounded to nearest even (finite x). */
static unsigned short to_bf16(float x) {
  unsigned int u;
  memcpy(&u, &x, sizeof u);
  return (unsigned short)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}
static float from_bf16(unsigned short h) {
  unsigned int u = (unsigned int)h << 16;
  float x;
  memcpy(&x, &u, sizeof x);
  return x;
}
static linattn_tensor bf16_tensor(unsigned short* bits, int n, int x) {
  linattn_tensor t = linattn_tensor_bnhd((float*)(void*)bits, B, n, H, x);
  t.dtype = LINATTN_BF16;
  return t;
}

/* One decode step of a state, whatever its recurrence (options: that operator's, or NULL). */
typedef linattn_status (*state_step)(const linattn_tensor* out, const linattn_tensor* q, const linattn_tensor* k,
                                     const linattn_tensor* v, linattn_state* state, const void* options);
static linattn_status linear_step(const linattn_tensor* out, const linattn_tensor* q, const linattn_tensor* k,
                                  const linattn_tensor* v, linattn_state* state, const void* options) {
  (void)options;
  return linattn_recurrent_step(out, q, k, v, state, NULL);
}
static linattn_status retention_step(const linattn_tensor* out, const linattn_tensor* q, const linattn_tensor* k,
                                     const linattn_tensor* v, linattn_state* state, const void* options) {
  return linattn_decayed_step(out, q, k, v, NULL, state, (const linattn_decay_options*)options);
}

/* Steps over q, k, v (f32, [B, T, H, *]) on an f32 state and on a bf16 one: the bf16 state's outputs follow
 * the f32 state's to bf16's precision (2% of the largest output). */
static void expect_bf16_steps_follow_f32(const char* what, state_step step, const void* options, linattn_state* s32,
                                         linattn_state* s16, const float* q, const float* k, const float* v) {
  float out32[B * H * E], out16[B * H * E];
  double worst = 0, scale = 0;
  int t, i;
  for (t = 0; t < T; ++t) {
    /* Token t of every batch and head: rows of [B, T, H, *] with the batch stride of the whole sequence. */
    linattn_tensor tq = linattn_tensor_bnhd((float*)q + t * H * D, B, 1, H, D),
                   tk = linattn_tensor_bnhd((float*)k + t * H * D, B, 1, H, D),
                   tv = linattn_tensor_bnhd((float*)v + t * H * E, B, 1, H, E),
                   t32 = linattn_tensor_bnhd(out32, B, 1, H, E), t16 = linattn_tensor_bnhd(out16, B, 1, H, E);
    tq.stride[0] = tk.stride[0] = T * H * D;
    tv.stride[0] = T * H * E;
    OK(step(&t32, &tq, &tk, &tv, s32, options));
    OK(step(&t16, &tq, &tk, &tv, s16, options));
    for (i = 0; i < B * H * E; ++i) {
      const double d = fabs((double)out16[i] - out32[i]);
      worst = d > worst ? d : worst;
      scale = fabs(out32[i]) > scale ? fabs(out32[i]) : scale;
    }
  }
  CHECK(scale > 0.05 && worst <= 0.02 * scale, "%s: worst difference %g against outputs up to %g", what, worst, scale);
}

/* RetNet's decode step on a bf16 state, as the linear step's. */
static void test_bf16_decayed_state(const float* q, const float* k, const float* v) {
  linattn_state *s32 = NULL, *s16 = NULL;
  linattn_decay_options o;
  linattn_decay_options_init(&o);
  o.decay = LINATTN_DECAY_RETENTION;
  OK(linattn_state_create(B, H, D, E, "retention", &s32));
  OK(linattn_state_create_dtype(B, H, D, E, "retention", LINATTN_BF16, &s16));
  expect_bf16_steps_follow_f32("bf16 retention state steps", retention_step, &o, s32, s16, q, k, v);
  linattn_state_free(s32);
  linattn_state_free(s16);
}

/* A bf16 state (linattn_state_create_dtype): recurrent steps follow the f32 state's outputs to bf16's
 * precision, the state reports and keeps its dtype through save and load, and an f16 state is refused. */
static void test_bf16_state(const float* q, const float* k, const float* v) {
  linattn_state *s32 = NULL, *s16 = NULL, *loaded = NULL, *refused = NULL;
  int32_t dtype = -1;
  float* S = (float*)1;
  int64_t S_size = -1;
  const char* path = "c_api_test_bf16_state.bin";
  OK(linattn_state_create(B, H, D, E, "elu", &s32));
  OK(linattn_state_create_dtype(B, H, D, E, "elu", LINATTN_BF16, &s16));
  expect_bf16_steps_follow_f32("bf16 state steps", linear_step, NULL, s32, s16, q, k, v);
  test_bf16_decayed_state(q, k, v);
  OK(linattn_state_dtype(s16, &dtype));
  CHECK(dtype == LINATTN_BF16, "bf16 state reports dtype %d", (int)dtype);
  OK(linattn_state_data(s16, &S, &S_size, NULL, NULL));
  CHECK(S == NULL && S_size == 0, "a bf16 state's f32 S should be NULL/0");
  OK(linattn_state_save(s16, path));
  OK(linattn_state_load(path, &loaded));
  OK(linattn_state_dtype(loaded, &dtype));
  CHECK(dtype == LINATTN_BF16, "a loaded bf16 state reports dtype %d", (int)dtype);
  remove(path);
  CHECK(linattn_state_create_dtype(B, H, D, E, "elu", LINATTN_F16, &refused) == LINATTN_ERROR_UNSUPPORTED_DTYPE &&
            refused == NULL && contains(linattn_last_error(), "dtype is LINATTN_F16"),
        "f16 state: %s", linattn_last_error());
  linattn_state_free(s32);
  linattn_state_free(s16);
  linattn_state_free(loaded);
}

/* bf16 descriptors: the causal linear forward and the decayed forward on bf16 q, k, v (and g) give the
 * f32 operator's result on the same (rounded) values, rounded once, bit for bit; a bf16 out with f32
 * inputs is refused by name. */
static void test_bf16(void) {
  float q[QSIZE], k[QSIZE], v[VSIZE], g[B * T * H], out[VSIZE];
  unsigned short hq[QSIZE], hk[QSIZE], hv[VSIZE], hg[B * T * H], hout[VSIZE];
  linattn_tensor tq = linattn_tensor_bnhd(q, B, T, H, D), tk = linattn_tensor_bnhd(k, B, T, H, D),
                 tv = linattn_tensor_bnhd(v, B, T, H, E), tg = linattn_tensor_bnhd(g, B, T, H, 1),
                 to = linattn_tensor_bnhd(out, B, T, H, E);
  linattn_tensor bq = bf16_tensor(hq, T, D), bk = bf16_tensor(hk, T, D), bv = bf16_tensor(hv, T, E),
                 bg = bf16_tensor(hg, T, 1), bo = bf16_tensor(hout, T, E);
  linattn_linear_options lin;
  linattn_decay_options dec;
  int i, differ = 0;
  fill(q, QSIZE, -1, 1), fill(k, QSIZE, -1, 1), fill(v, VSIZE, -1, 1), fill(g, B * T * H, -1, 0);
  for (i = 0; i < QSIZE; ++i)
    hq[i] = to_bf16(q[i]), q[i] = from_bf16(hq[i]), hk[i] = to_bf16(k[i]), k[i] = from_bf16(hk[i]);
  for (i = 0; i < VSIZE; ++i) hv[i] = to_bf16(v[i]), v[i] = from_bf16(hv[i]);
  for (i = 0; i < B * T * H; ++i) hg[i] = to_bf16(g[i]), g[i] = from_bf16(hg[i]);

  linattn_linear_options_init(&lin);
  lin.causal = 1;
  OK(linattn_causal_linear_forward(&to, &tq, &tk, &tv, &lin, NULL, NULL));
  OK(linattn_causal_linear_forward(&bo, &bq, &bk, &bv, &lin, NULL, NULL));
  for (i = 0; i < VSIZE; ++i) differ += hout[i] != to_bf16(out[i]);
  CHECK(differ == 0, "bf16 causal linear forward: %d of %d elements differ from the rounded f32 result", differ, VSIZE);

  linattn_decay_options_init(&dec);
  dec.decay = LINATTN_DECAY_TOKEN;
  OK(linattn_decayed_forward(&to, &tq, &tk, &tv, &tg, &dec, NULL, NULL, 0));
  OK(linattn_decayed_forward(&bo, &bq, &bk, &bv, &bg, &dec, NULL, NULL, 0));
  for (differ = 0, i = 0; i < VSIZE; ++i) differ += hout[i] != to_bf16(out[i]);
  CHECK(differ == 0, "bf16 decayed forward: %d of %d elements differ from the rounded f32 result", differ, VSIZE);

  test_bf16_state(q, k, v);

  CHECK(linattn_linear_forward(&bo, &tq, &tk, &tv, NULL) == LINATTN_ERROR_INVALID_ARGUMENT &&
            contains(linattn_last_error(), ".dtype is LINATTN_F32, expected LINATTN_BF16"),
        "f32 q with a bf16 out: %s", linattn_last_error());
}

/* Issue 42, item 12: the C API's quiet acceptances, each refused by name. */
static void test_defect_bf16_final_state_is_refused(void) {
  float q[QSIZE], k[QSIZE], v[VSIZE], out[VSIZE];
  linattn_tensor tq = linattn_tensor_bnhd(q, B, T, H, D), tk = linattn_tensor_bnhd(k, B, T, H, D),
                 tv = linattn_tensor_bnhd(v, B, T, H, E), to = linattn_tensor_bnhd(out, B, T, H, E);
  linattn_state* s16 = NULL;
  int32_t dtype = -1;
  linattn_status s;
  fill(q, QSIZE, -1, 1), fill(k, QSIZE, -1, 1), fill(v, VSIZE, -1, 1);
  OK(linattn_state_create_dtype(B, H, D, E, "elu", LINATTN_BF16, &s16));
  /* The forward remade it as an f32 state: the caller's bf16 state changed its dtype unasked. */
  s = linattn_causal_linear_forward(&to, &tq, &tk, &tv, NULL, NULL, s16);
  CHECK(s == LINATTN_ERROR_UNSUPPORTED_DTYPE && contains(linattn_last_error(), "final_state is a LINATTN_BF16 state"),
        "bf16 final_state: %s, %s", linattn_status_name(s), linattn_last_error());
  OK(linattn_state_dtype(s16, &dtype));
  CHECK(dtype == LINATTN_BF16, "a refused call changed the state's dtype to %d", (int)dtype);
  linattn_state_free(s16);
}

static void test_defect_feature_role_out_of_range_is_refused(void) {
  float x[2 * D], phi[2 * D];
  linattn_feature_map* map = NULL;
  linattn_status s;
  fill(x, 2 * D, -1, 1);
  OK(linattn_feature_map_create("elu", &map));
  /* A C caller's int outside the enum: read as an integer before any conversion (UBSan caught a load of 7). */
  s = linattn_feature_map_forward(map, phi, x, 2, D, (linattn_feature_role)7);
  CHECK(s == LINATTN_ERROR_INVALID_ARGUMENT && contains(linattn_last_error(), "role is 7"), "role 7: %s, %s",
        linattn_status_name(s), linattn_last_error());
  s = linattn_feature_map_backward(map, phi, x, x, 2, D, (linattn_feature_role)-1);
  CHECK(s == LINATTN_ERROR_INVALID_ARGUMENT && contains(linattn_last_error(), "role is "), "role -1: %s, %s",
        linattn_status_name(s), linattn_last_error());
  linattn_feature_map_free(map);
}

static void test_defect_state_create_takes_only_names_save_writes(void) {
  const char* names[3] = {"two words", "", "tab\tname"};
  char long_name[300];
  linattn_state* state = NULL;
  linattn_status s;
  int i;
  memset(long_name, 'x', sizeof long_name - 1);
  long_name[sizeof long_name - 1] = '\0';
  for (i = 0; i < 4; ++i) {
    const char* name = i < 3 ? names[i] : long_name;
    state = NULL;
    s = linattn_state_create(B, H, D, E, name, &state);
    CHECK(s == LINATTN_ERROR_INVALID_ARGUMENT && state == NULL &&
              contains(linattn_last_error(), "printable ASCII characters without spaces"),
          "state name %d: %s, %s", i, linattn_status_name(s), linattn_last_error());
    linattn_state_free(state);
  }
  OK(linattn_state_create(B, H, D, E, "favor(d=3,m=8,seed=0,orthogonal)", &state));
  linattn_state_free(state);
}

/* Issue 42 item 9: a size argument that passes every bound can still ask for more memory than the
 * process may allocate. linattn_state_create of 16 GiB was killed by the OOM killer; it (and the feature
 * maps' projections, and the recurrences' chunked scratch, which their tensors' extents size) must
 * return LINATTN_ERROR_OUT_OF_MEMORY naming the request, before allocating. The gigabyte cases run in a
 * child whose address space is limited to 4 GiB, so that they are refused on any machine (the bound
 * named is then RLIMIT_AS, or MemAvailable where less is free) and never allocate here; the petabyte
 * cases exceed every machine. */
static int refused_out_of_memory(linattn_status s, const char* what, const char* needle) {
  if (s == LINATTN_ERROR_OUT_OF_MEMORY && contains(linattn_last_error(), needle)) return 1;
  fprintf(stderr, "%s: %s: %s\n", what, linattn_status_name(s), linattn_last_error());
  return 0;
}

static int refuses_gigabytes_under_4_gib(void) {
  const struct rlimit limit = {(rlim_t)4 << 30, (rlim_t)4 << 30};
  /* K = V = 2^15 over one float (every stride 0; the output overlapping itself would be refused later):
   * one head's [K, V] state in the operator's scratch is 4 GiB, the delta rule's with its gradient 8. */
  static float zero = 0;
  const linattn_tensor wide = {&zero, LINATTN_F32, {1, 1, 1, 32768}, {0, 0, 0, 0}};
  const linattn_tensor beta = {&zero, LINATTN_F32, {1, 1, 1, 1}, {0, 0, 0, 0}};
  const linattn_tensor narrow = {&zero, LINATTN_F32, {1, 1, 1, 8192}, {0, 0, 0, 0}};
  const linattn_tensor grouped = {&zero, LINATTN_F32, {1, 1, 32, 8192}, {0, 0, 0, 0}};
  const linattn_tensor queries = {&zero, LINATTN_F32, {1, 1, 4, 32768}, {0, 0, 0, 0}};
  linattn_state* state = NULL;
  int ok = 1;
  if (setrlimit(RLIMIT_AS, &limit) != 0) return 2;
  ok &= refused_out_of_memory(linattn_state_create(1, 1, 65536, 65536, "elu", &state), "16 GiB state",
                              "linattn_state_create of a state [1, 1, 65536, 65536] needs about 16.0 GiB");
  ok &= state == NULL;
  ok &= refused_out_of_memory(linattn_decayed_forward(&wide, &wide, &wide, &wide, NULL, NULL, NULL, NULL, 0),
                              "decayed K = V = 2^15",
                              "linattn_decayed_forward: the chunked scratch of q [1, 1, 1, 32768] with 32768");
  ok &= refused_out_of_memory(linattn_delta_forward(&wide, &wide, &wide, &wide, &beta, NULL, NULL, NULL, NULL, 0),
                              "delta K = V = 2^15",
                              "linattn_delta_forward: the chunked scratch of q [1, 1, 1, 32768] with 32768");
  /* Grouped value heads (issue 38): one q/k head and 32 value heads of K = V = 2^13, a 256 MiB state each.
   * The scratch holds the value heads' states (8 GiB), not q's one head's. */
  ok &= refused_out_of_memory(linattn_decayed_forward(&grouped, &narrow, &narrow, &grouped, NULL, NULL, NULL, NULL, 0),
                              "decayed 32 value heads of K = V = 2^13",
                              "linattn_decayed_forward: the chunked scratch of q [1, 1, 1, 8192] with 8192 value "
                              "columns in 32 value heads");
  /* Query groups (issue 38, ONNX's GQA): 4 query heads over one key/value head of K = V = 2^15; the scratch
   * holds that head's state (4 GiB), and is checked as well (it was skipped for q with more heads than v). */
  ok &= refused_out_of_memory(linattn_decayed_forward(&queries, &queries, &wide, &wide, NULL, NULL, NULL, NULL, 0),
                              "decayed 4 query heads over one head of K = V = 2^15",
                              "linattn_decayed_forward: the chunked scratch of q [1, 1, 4, 32768] with 32768 value "
                              "columns in 1 value head");
  return ok ? 0 : 1;
}

static void test_defect_huge_requests_are_refused_before_allocating(void) {
  linattn_state* state = NULL;
  linattn_feature_map* map = NULL;
  linattn_status s;
  int child_status = -1;
  if (!linattn_address_space_limit_untestable()) { /* not under the sanitizers or qemu-user */
    const pid_t child = fork();
    if (child == 0) _exit(refuses_gigabytes_under_4_gib());
    CHECK(child > 0 && waitpid(child, &child_status, 0) == child && WIFEXITED(child_status) &&
              WEXITSTATUS(child_status) == 0,
          "gigabyte requests under a 4 GiB address-space limit: child status %d", child_status);
  }
  s = linattn_state_create_dtype(65536, 65536, 65536, 16384, "elu", LINATTN_BF16, &state);
  CHECK(s == LINATTN_ERROR_OUT_OF_MEMORY && state == NULL && contains(linattn_last_error(), "needs about") &&
            contains(linattn_last_error(), "is available"),
        "2^62-byte bf16 state: %s: %s", linattn_status_name(s), linattn_last_error());
  s = linattn_favor_map_create(1 << 20, (int64_t)1 << 30, 1, 0, &map);
  CHECK(s == LINATTN_ERROR_OUT_OF_MEMORY && map == NULL && contains(linattn_last_error(), "linattn_favor_map_create") &&
            contains(linattn_last_error(), "[1073741824, 1048576] projection"),
        "favor 2^30 x 2^20: %s: %s", linattn_status_name(s), linattn_last_error());
  s = linattn_random_fourier_map_create(1 << 20, (int64_t)1 << 30, 1, &map);
  CHECK(s == LINATTN_ERROR_OUT_OF_MEMORY && map == NULL &&
            contains(linattn_last_error(), "linattn_random_fourier_map_create"),
        "random Fourier 2^30 x 2^20: %s: %s", linattn_status_name(s), linattn_last_error());
  /* Bad sizes keep their own errors: the memory check never hides them. */
  s = linattn_state_create(0, 1, 65536, 65536, "elu", &state);
  CHECK(s == LINATTN_ERROR_INVALID_ARGUMENT && contains(linattn_last_error(), "batch is 0"), "batch 0: %s",
        linattn_last_error());
}

static void test_defect_pointer_with_count_zero_is_refused(void) {
  float q[QSIZE], k[QSIZE], v[VSIZE], out[VSIZE], beta[GSIZE], final_state[SSIZE];
  const int64_t cu[2] = {0, T};
  linattn_tensor tq = linattn_tensor_bnhd(q, 1, T, H, D), tk = linattn_tensor_bnhd(k, 1, T, H, D),
                 tv = linattn_tensor_bnhd(v, 1, T, H, E), to = linattn_tensor_bnhd(out, 1, T, H, E),
                 tb = linattn_tensor_bnhd(beta, 1, T, H, 1);
  linattn_decay_options dec;
  linattn_delta_options del;
  linattn_status s;
  fill(q, QSIZE, -1, 1), fill(k, QSIZE, -1, 1), fill(v, VSIZE, -1, 1), fill(beta, GSIZE, 0, 1);
  /* A final_state asked for with n_state = 0 was silently not written. */
  s = linattn_decayed_forward(&to, &tq, &tk, &tv, NULL, NULL, NULL, final_state, 0);
  CHECK(s == LINATTN_ERROR_INVALID_ARGUMENT &&
            contains(linattn_last_error(), "final_state is a pointer with a count of 0"),
        "final_state with n_state 0: %s, %s", linattn_status_name(s), linattn_last_error());
  /* cu_seqlens with n_cu_seqlens = 0 ran unpacked. */
  linattn_decay_options_init(&dec);
  dec.cu_seqlens = cu;
  s = linattn_decayed_forward(&to, &tq, &tk, &tv, NULL, &dec, NULL, NULL, 0);
  CHECK(s == LINATTN_ERROR_INVALID_ARGUMENT &&
            contains(linattn_last_error(), "options->cu_seqlens is a pointer with a count of 0"),
        "decayed cu_seqlens with count 0: %s, %s", linattn_status_name(s), linattn_last_error());
  linattn_delta_options_init(&del);
  del.cu_seqlens = cu;
  s = linattn_delta_forward(&to, &tq, &tk, &tv, &tb, NULL, &del, NULL, NULL, 0);
  CHECK(s == LINATTN_ERROR_INVALID_ARGUMENT &&
            contains(linattn_last_error(), "options->cu_seqlens is a pointer with a count of 0"),
        "delta cu_seqlens with count 0: %s, %s", linattn_status_name(s), linattn_last_error());
  del.n_cu_seqlens = 2; /* the same call with its count runs */
  OK(linattn_delta_forward(&to, &tq, &tk, &tv, &tb, NULL, &del, NULL, final_state, H * D * E));
}

static void* other_thread(void* arg) {
  /* The main thread's last call failed; this thread has made none: its message is its own (""). */
  *(int*)arg = linattn_last_error()[0] == '\0';
  return NULL;
}

static void test_errors(void) {
  float q[QSIZE], k[QSIZE], v[VSIZE], out[VSIZE], lse[B * H * T];
  linattn_tensor tq = linattn_tensor_bnhd(q, B, T, H, D), tk = linattn_tensor_bnhd(k, B, T, H, D),
                 tv = linattn_tensor_bnhd(v, B, T, H, E), to = linattn_tensor_bnhd(out, B, T, H, E), bad;
  linattn_state* state = NULL;
  linattn_status s;
  int fresh = 0;
  pthread_t thread;
  fill(q, QSIZE, -1, 1), fill(k, QSIZE, -1, 1), fill(v, VSIZE, -1, 1);

  s = linattn_softmax_forward(&to, lse, NULL, &tk, &tv, NULL);
  CHECK(s == LINATTN_ERROR_NULL_POINTER && contains(linattn_last_error(), "q is NULL"), "NULL q: %s, %s",
        linattn_status_name(s), linattn_last_error());
  CHECK(pthread_create(&thread, NULL, other_thread, &fresh) == 0 && pthread_join(thread, NULL) == 0 && fresh,
        "another thread saw this thread's error");
  s = linattn_softmax_forward(&to, NULL, &tq, &tk, &tv, NULL);
  CHECK(s == LINATTN_ERROR_NULL_POINTER && contains(linattn_last_error(), "lse"), "NULL lse: %s", linattn_last_error());

  bad = tk;
  bad.extent[3] = D + 1; /* k's head dim differs from q's */
  s = linattn_linear_forward(&to, &tq, &bad, &tv, NULL);
  CHECK(s == LINATTN_ERROR_INVALID_ARGUMENT && contains(linattn_last_error(), "k.extent[3]"),
        "wrong k head dim: %s, %s", linattn_status_name(s), linattn_last_error());
  bad = tq;
  bad.data = NULL;
  s = linattn_linear_forward(&to, &bad, &tk, &tv, NULL);
  CHECK(s == LINATTN_ERROR_INVALID_ARGUMENT && contains(linattn_last_error(), "q.data is null"), "NULL q.data: %s",
        linattn_last_error());

  bad = tv;
  bad.dtype = LINATTN_BF16; /* one bf16 tensor among f32 ones */
  s = linattn_softmax_forward(&to, lse, &tq, &tk, &bad, NULL);
  CHECK(s == LINATTN_ERROR_INVALID_ARGUMENT &&
            contains(linattn_last_error(), "v.dtype is LINATTN_BF16, expected LINATTN_F32"),
        "bf16 v: %s, %s", linattn_status_name(s), linattn_last_error());
  bad.dtype = LINATTN_F16;
  s = linattn_decayed_forward(&to, &tq, &tk, &bad, NULL, NULL, NULL, NULL, 0);
  CHECK(s == LINATTN_ERROR_INVALID_ARGUMENT && contains(linattn_last_error(), "LINATTN_F16"), "f16 v: %s",
        linattn_last_error());
  bad.dtype = 7;
  s = linattn_linear_forward(&to, &tq, &tk, &bad, NULL);
  CHECK(s == LINATTN_ERROR_INVALID_ARGUMENT && contains(linattn_last_error(), "v.dtype is 7"), "dtype 7: %s",
        linattn_last_error());

  OK(linattn_linear_forward(&to, &tq, &tk, &tv, NULL));
  CHECK(linattn_last_error()[0] == '\0', "a success left the message \"%s\"", linattn_last_error());

  {
    linattn_decay_options o;
    linattn_decay_options_init(&o);
    o.decay = 9;
    s = linattn_decayed_forward(&to, &tq, &tk, &tv, NULL, &o, NULL, NULL, 0);
    CHECK(s == LINATTN_ERROR_INVALID_ARGUMENT && contains(linattn_last_error(), "options->decay is 9"), "decay 9: %s",
          linattn_last_error());
  }
  {
    linattn_softmax_options o;
    linattn_softmax_options_init(&o);
    o.n_key_lengths = B; /* and no pointer */
    s = linattn_softmax_forward(&to, lse, &tq, &tk, &tv, &o);
    CHECK(s == LINATTN_ERROR_NULL_POINTER && contains(linattn_last_error(), "key_lengths"), "key_lengths: %s",
          linattn_last_error());
  }
  s = linattn_recurrent_step(&to, &tq, &tk, &tv, NULL, NULL);
  CHECK(s == LINATTN_ERROR_NULL_POINTER && contains(linattn_last_error(), "state is NULL"), "NULL state: %s",
        linattn_last_error());
  s = linattn_state_create(B, 0, D, E, "elu", &state);
  CHECK(s == LINATTN_ERROR_INVALID_ARGUMENT && state == NULL && contains(linattn_last_error(), "heads is 0"),
        "zero heads: %s", linattn_last_error());
  s = linattn_state_load("no/such/state.bin", &state);
  CHECK(s == LINATTN_ERROR_IO && state == NULL && contains(linattn_last_error(), "no/such/state.bin"),
        "missing file: %s, %s", linattn_status_name(s), linattn_last_error());
  s = linattn_set_num_threads(-1);
  CHECK(s == LINATTN_ERROR_INVALID_ARGUMENT && contains(linattn_last_error(), "threads"), "threads -1: %s",
        linattn_last_error());
}

static void test_version_and_info(void) {
  int major = -1, minor = -1, patch = -1;
  char expect[32];
  const char* info = linattn_info_json();
  linattn_version_parts(&major, &minor, &patch);
  sprintf(expect, "%d.%d.%d", major, minor, patch);
  CHECK(strcmp(expect, linattn_version()) == 0, "version %s, parts %s", linattn_version(), expect);
  CHECK(linattn_c_api_version() == LINATTN_C_API_VERSION, "C API version %d, header %d", linattn_c_api_version(),
        LINATTN_C_API_VERSION);
  CHECK(contains(info, "\"dispatched_target\": \"") && contains(info, "\"compiled_targets\": [") &&
            contains(info, linattn_version()),
        "info: %s", info);
  CHECK(strcmp(linattn_status_name(LINATTN_ERROR_IO), "LINATTN_ERROR_IO") == 0, "status name");
}

#ifdef LINATTN_TEST_MODEL_API
/* The model's C API without a model file (tools/tests/test_decode_example.py trains one): sampling,
 * and the errors of loading and feeding. */
static void test_model_api(void) {
  const float logits[5] = {0.5f, 3.0f, -1.0f, 3.0f, 2.0f};
  int32_t token = -1;
  linattn_model* model = NULL;
  linattn_status s;
  OK(linattn_sample_token(logits, 5, 0.0, 0.5, &token));
  CHECK(token == 1, "argmax with ties took %d, expected the lowest index 1", token);
  OK(linattn_sample_token(logits, 5, 1.0, 0.0, &token));
  CHECK(token == 0, "u = 0 drew %d, expected the first token", token);
  s = linattn_sample_token(logits, 5, 1.0, 1.0, &token);
  CHECK(s == LINATTN_ERROR_INVALID_ARGUMENT && contains(linattn_last_error(), "u is 1"), "u = 1: %s",
        linattn_last_error());
  s = linattn_sample_token(logits, 5, -1.0, 0.5, &token);
  CHECK(s == LINATTN_ERROR_INVALID_ARGUMENT && contains(linattn_last_error(), "temperature"), "temperature -1: %s",
        linattn_last_error());
  s = linattn_model_load("no/such.model", &model);
  CHECK(s == LINATTN_ERROR_IO && model == NULL && contains(linattn_last_error(), "no/such.model"), "missing model: %s",
        linattn_last_error());
  s = linattn_generator_feed(NULL, &token, 1, NULL);
  CHECK(s == LINATTN_ERROR_NULL_POINTER && contains(linattn_last_error(), "generator is NULL"), "NULL generator: %s",
        linattn_last_error());
  linattn_model_free(NULL);
  linattn_generator_free(NULL);
}
#endif

int main(void) {
  test_version_and_info();
  test_softmax(0);
  test_softmax(1);
  test_linear(0);
  test_linear(1);
  test_recurrent_and_state();
  test_feature_maps();
  test_linformer();
  test_recurrence(0);
  test_recurrence(1);
  test_errors();
  test_bf16();
  test_defect_bf16_final_state_is_refused();
  test_defect_feature_role_out_of_range_is_refused();
  test_defect_state_create_takes_only_names_save_writes();
  test_defect_pointer_with_count_zero_is_refused();
  test_defect_huge_requests_are_refused_before_allocating();
#ifdef LINATTN_TEST_MODEL_API
  test_model_api();
#endif
  printf("c_api_test: %d checks, %d failed\n", checks, failures);
  return failures == 0 ? 0 : 1;
}
