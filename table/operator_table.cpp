// The rows of the operator table (operator_table.hpp): per operator its calls, its oracle, its
// flop and byte models and its test cases. docs/performance.md and docs/cli.md quote the models.
#include "operator_table.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <string>

#include "delta_rows.hpp"
#include "linattn/error.hpp"
#include "linattn/favor.hpp"
#include "recurrence_rows.hpp"

namespace linattn::table {
namespace {

// ---- sizes -------------------------------------------------------------------------------------

double bh(const Sizes& s) { return double(s.batch) * double(s.heads); }

// FAVOR+'s m: as given, or the library's default for D.
int64_t favor_features(const Sizes& s) { return s.features > 0 ? s.features : default_favor_features(s.dim); }
// Random Fourier features' m: as given, or FAVOR+'s default rounded up to an even count (cos, sin pairs).
int64_t fourier_features(const Sizes& s) {
  return s.features > 0 ? s.features : (default_favor_features(s.dim) + 1) / 2 * 2;
}

FeatureMapPtr map_of(const Sizes& s) {
  if (s.map == "favor") return favor_feature_map(s.dim, FavorOptions{favor_features(s), s.seed, true});
  if (s.map == "random_fourier") return random_fourier_feature_map(s.dim, fourier_features(s), s.seed);
  return feature_map_by_name(s.map);
}

int64_t map_features(const Sizes& s) {
  if (s.map == "favor") return favor_features(s);
  if (s.map == "random_fourier") return fourier_features(s);
  return s.dim;
}
int64_t no_features(const Sizes&) { return 0; }
// The gate's columns: simple GLA one log decay per head and token, GLA one per key dimension.
int64_t token_gate(const Sizes&) { return 1; }
int64_t key_gate(const Sizes& s) { return s.dim; }

// Query-key pairs the queries see: all Nq·Nk, or with the bottom-right mask i sees j ≤ i + Nk − Nq.
double visible_pairs(int64_t Nq, int64_t Nk, bool causal) {
  if (!causal) return double(Nq) * double(Nk);
  double pairs = 0;
  for (int64_t i = 0; i < Nq; ++i) pairs += double(std::clamp<int64_t>(i + Nk - Nq + 1, 0, Nk));
  return pairs;
}

// ---- flop models: what the kernels multiply, per (batch, head) ----------------------------------

// Softmax forward per visible pair: q·k (2·D), p·v (2·E); exp and the running max not counted.
double softmax_forward_flops(const Sizes& s) {
  return bh(s) * visible_pairs(s.seq_q, s.seq_k, s.causal) * (2.0 * double(s.dim) + 2.0 * double(s.value_dim));
}
// Backward per visible pair (FlashAttention-2): recompute q·k (2·D), dP = dO·v (2·E), dV += Pᵀ·dO
// (2·E), dQ += dS·k (2·D), dK += dSᵀ·q (2·D).
double softmax_backward_flops(const Sizes& s) {
  return bh(s) * visible_pairs(s.seq_q, s.seq_k, s.causal) * (6.0 * double(s.dim) + 4.0 * double(s.value_dim));
}

// Non-causal linear forward: S = φ(K)ᵀV (2·Nk·M·E), z = Σφ(k) (Nk·M); per query φ(q)ᵀS (2·M·E) and,
// with the normaliser, φ(q)·z (2·M) and the division (E).
double linear_forward_count(const Sizes& s, int64_t M_) {
  const double M = double(M_), E = double(s.value_dim), den = s.normalize ? 2.0 * M + E : 0.0;
  return bh(s) * (double(s.seq_k) * (2.0 * M * E + M) + double(s.seq_q) * (2.0 * M * E + den));
}
// Backward, five GEMMs of 2·N·M·E: on the keys S again, dφ(K) = V dSᵀ and dV = φ(K) dS (plus z and
// dz: 2·Nk·M); on the queries P = S dO (which also gives ∂den) and dS += φ(Q)ᵀ dnum (plus, with the
// normaliser, the ∂den and dz terms: 4·Nq·M). Leading term 10·N·M·E at Nq = Nk.
double linear_backward_count(const Sizes& s, int64_t M_) {
  const double M = double(M_), E = double(s.value_dim), den = s.normalize ? 4.0 * M : 0.0;
  return bh(s) * (double(s.seq_k) * (6.0 * M * E + 2.0 * M) + double(s.seq_q) * (4.0 * M * E + den));
}

// Causal (chunked, chunk C) forward, per chunk of c tokens: intra-chunk A = φ(Q_c)φ(K_c)ᵀ (2·c²·M,
// the whole tile: the masked half is computed too), A·V_c (2·c²·E), row sums of A (c²); inter-chunk
// φ(Q_c)S (2·c·M·E), φ(Q_c)·z (2·c·M), the state update φ(K_c)ᵀV_c (2·c·M·E), z (c·M); division (c·E).
double causal_forward_count(const Sizes& s, int64_t M_) {
  const double M = double(M_), E = double(s.value_dim);
  double per_bh = 0;
  for (int64_t t0 = 0; t0 < s.seq_q; t0 += s.chunk) {
    const double c = double(std::min(s.chunk, s.seq_q - t0));
    per_bh += c * c * (2.0 * M + 2.0 * E + 1.0) + c * (4.0 * M * E + 3.0 * M + E);
  }
  return bh(s) * per_bh;
}
// Backward per chunk: intra A again (2·c²·M), dA = dnum·V_cᵀ (2·c²·E), dφ(Q_c) += dA·φ(K_c) (2·c²·M),
// dφ(K_c) += dAᵀφ(Q_c) (2·c²·M), dV_c += Aᵀdnum (2·c²·E), the ∂den terms (2·c²); inter-chunk: the
// state before the chunk, dnum·Sᵀ, V_c·dSᵀ, φ(K_c)dS, dS += φ(Q_c)ᵀdnum (5 × 2·c·M·E), z, dz (6·c·M).
double causal_backward_count(const Sizes& s, int64_t M_) {
  const double M = double(M_), E = double(s.value_dim);
  double per_bh = 0;
  for (int64_t t0 = 0; t0 < s.seq_q; t0 += s.chunk) {
    const double c = double(std::min(s.chunk, s.seq_q - t0));
    per_bh += c * c * (6.0 * M + 4.0 * E + 2.0) + c * (10.0 * M * E + 6.0 * M);
  }
  return bh(s) * per_bh;
}

double linear_family_forward(const Sizes& s, bool causal, int64_t M) {
  return causal ? causal_forward_count(s, M) : linear_forward_count(s, M);
}
double linear_family_backward(const Sizes& s, bool causal, int64_t M) {
  return causal ? causal_backward_count(s, M) : linear_backward_count(s, M);
}

double linear_forward_flops(const Sizes& s) { return linear_forward_count(s, map_features(s)); }
double linear_backward_flops(const Sizes& s) { return linear_backward_count(s, map_features(s)); }
double causal_forward_flops(const Sizes& s) { return causal_forward_count(s, map_features(s)); }
double causal_backward_flops(const Sizes& s) { return causal_backward_count(s, map_features(s)); }

// One step per token: S += φ(k)vᵀ (2·M·E), z (M), φ(q)ᵀS (2·M·E), φ(q)·z (2·M), division (E).
double recurrent_forward_flops(const Sizes& s) {
  const double M = double(map_features(s)), E = double(s.value_dim);
  return bh(s) * double(s.seq_q) * (4.0 * M * E + 3.0 * M + E);
}
double no_flops(const Sizes&) { return 0; }

// Decayed linear attention, chunked (chunk C; per (batch, head) and chunk of c tokens, K = D, V = E):
//   forward   c(c+1)·(K + V)     intra-chunk A = (Q_c K_cᵀ ⊙ decay) and A·V_c on the lower triangle
//                                (c(c+1)/2 pairs, 2·K and 2·V flops each)
//           + 4·c·K·V            inter-chunk Q_c·S and the state update S += K_cᵀ·V_c
//           + K·V                the state's decay across the chunk, diag(exp(Σg))·S
//   backward c(c+1)·(3K + 2V)    A again, dA = dO_c V_cᵀ, dQ_c += dA·K_c, dK_c += dAᵀ·Q_c, dV_c += Aᵀ·dO_c
//           + 10·c·K·V           the states again (K_cᵀV_c), dO_c·Sᵀ, V_c·dSᵀ, K_c·dS, dS += Q_cᵀ·dO_c
//           + 2·K·V              the state's and dS's decay across the chunk
// The gate's elementwise work (cumulative sums, exponentials, the decay factors folded into Q and K,
// dg from q ⊙ dq − k ⊙ dk) is O(c·K) per chunk and not counted, like the feature maps above.
double decayed_count(const Sizes& s, double per_pair, double per_token, double per_chunk) {
  const double K = double(s.dim), V = double(s.value_dim);
  double per_bh = 0;
  for (int64_t t0 = 0; t0 < s.seq_q; t0 += s.chunk) {
    const double c = double(std::min(s.chunk, s.seq_q - t0));
    per_bh += c * (c + 1) * per_pair + c * per_token * K * V + per_chunk * K * V;
  }
  return bh(s) * per_bh;
}
double decayed_forward_flops(const Sizes& s) { return decayed_count(s, double(s.dim + s.value_dim), 4.0, 1.0); }
double decayed_backward_flops(const Sizes& s) {
  return decayed_count(s, 3.0 * double(s.dim) + 2.0 * double(s.value_dim), 10.0, 2.0);
}

// FAVOR+: φ itself is ωᵀx for every row of q and k (2·D·M each); its backward recomputes that and
// adds ω·∂φ (4·D·M per row). Then the linear counts with M = m.
double favor_forward_flops(const Sizes& s) {
  const double rows = bh(s) * double(s.seq_q + s.seq_k), M = double(favor_features(s));
  return rows * 2.0 * double(s.dim) * M + linear_family_forward(s, s.causal, favor_features(s));
}
double favor_backward_flops(const Sizes& s) {
  const double rows = bh(s) * double(s.seq_q + s.seq_k), M = double(favor_features(s));
  return rows * 4.0 * double(s.dim) * M + linear_family_backward(s, s.causal, favor_features(s));
}
// Random Fourier features: ω has m/2 rows, so ωᵀx is D·m per row (cos and sin not counted), 2·D·m
// in the backward; then the linear counts, without the normaliser (the operator runs without it).
Sizes unnormalised(Sizes s) {
  s.normalize = false;
  return s;
}
double fourier_forward_flops(const Sizes& s) {
  const double rows = bh(s) * double(s.seq_q + s.seq_k), M = double(fourier_features(s));
  return rows * double(s.dim) * M + linear_family_forward(unnormalised(s), s.causal, fourier_features(s));
}
double fourier_backward_flops(const Sizes& s) {
  const double rows = bh(s) * double(s.seq_q + s.seq_k), M = double(fourier_features(s));
  return rows * 2.0 * double(s.dim) * M + linear_family_backward(unnormalised(s), s.causal, fourier_features(s));
}

// Linformer: the projections k̃ = E·k (2·P·Nk·D) and ṽ = F·v (2·P·Nk·E), then softmax attention of
// Nq queries over P positions. Backward: softmax's over P, then dk = Eᵀdk̃ and dE = dk̃·kᵀ (2·2·P·Nk·D),
// likewise dv and dF (2·2·P·Nk·E).
Sizes over_projection(Sizes s) {
  s.seq_k = projected_length(s);
  s.causal = false;
  return s;
}
double linformer_forward_flops(const Sizes& s) {
  return bh(s) * 2.0 * double(projected_length(s)) * double(s.seq_k) * double(s.dim + s.value_dim) +
         softmax_forward_flops(over_projection(s));
}
double linformer_backward_flops(const Sizes& s) {
  return bh(s) * 4.0 * double(projected_length(s)) * double(s.seq_k) * double(s.dim + s.value_dim) +
         softmax_backward_flops(over_projection(s));
}

// ---- byte models: compulsory fp32 traffic ------------------------------------------------------

// Floats of q, k, v and out (or dO) per (batch, head).
double qkv_floats(const Sizes& s) {
  return double(s.seq_q) * double(s.dim) + double(s.seq_k) * double(s.dim + s.value_dim);
}
// Forward: q, k, v read, out written.
double attention_forward_bytes(const Sizes& s) { return 4.0 * bh(s) * (qkv_floats(s) + double(s.seq_q * s.value_dim)); }
// Backward: q, k, v, dO read, dq, dk, dv written.
double attention_backward_bytes(const Sizes& s) {
  return 4.0 * bh(s) * (2.0 * qkv_floats(s) + double(s.seq_q * s.value_dim));
}
// Softmax adds lse (written; read by the backward, which reads out too).
double softmax_forward_bytes(const Sizes& s) { return attention_forward_bytes(s) + 4.0 * bh(s) * double(s.seq_q); }
double softmax_backward_bytes(const Sizes& s) {
  return attention_backward_bytes(s) + 4.0 * bh(s) * double(s.seq_q) * double(s.value_dim + 1);
}
// The recurrent step: every token's q, k, v read and out written, the state S, z read and written
// once (between steps it stays in cache).
double recurrent_forward_bytes(const Sizes& s) {
  const double M = double(map_features(s));
  return attention_forward_bytes(s) + 2.0 * 4.0 * bh(s) * (M * double(s.value_dim) + M);
}
double no_bytes(const Sizes&) { return 0; }
// Decayed rows: q, k, v and g (gate_dim columns) read, out written; the backward reads dO too and
// writes dq, dk, dv, dg.
double gate_floats(const Sizes& s, int64_t gate_cols) { return double(s.seq_q) * double(gate_cols); }
double decayed_forward_bytes_with(const Sizes& s, int64_t gate_cols) {
  return attention_forward_bytes(s) + 4.0 * bh(s) * gate_floats(s, gate_cols);
}
double decayed_backward_bytes_with(const Sizes& s, int64_t gate_cols) {
  return attention_backward_bytes(s) + 2.0 * 4.0 * bh(s) * gate_floats(s, gate_cols);
}
double ungated_forward_bytes(const Sizes& s) { return decayed_forward_bytes_with(s, 0); }
double ungated_backward_bytes(const Sizes& s) { return decayed_backward_bytes_with(s, 0); }
double token_gate_forward_bytes(const Sizes& s) { return decayed_forward_bytes_with(s, 1); }
double token_gate_backward_bytes(const Sizes& s) { return decayed_backward_bytes_with(s, 1); }
double key_gate_forward_bytes(const Sizes& s) { return decayed_forward_bytes_with(s, s.dim); }
double key_gate_backward_bytes(const Sizes& s) { return decayed_backward_bytes_with(s, s.dim); }
// Linformer adds E and F (read), and in the backward out (read), dE and dF (written).
double linformer_forward_bytes(const Sizes& s) {
  return attention_forward_bytes(s) + 2.0 * 4.0 * double(projection_floats(s));
}
double linformer_backward_bytes(const Sizes& s) {
  return attention_backward_bytes(s) + 4.0 * bh(s) * double(s.seq_q * s.value_dim) +
         4.0 * 4.0 * double(projection_floats(s));
}

// ---- working memory ----------------------------------------------------------------------------

double softmax_working(const Sizes& s, bool) { return bh(s) * double(s.seq_q); }  // lse
// S, z (and their gradients), φ(q), φ(k) (and dφ) if materialised; causal backward: chunk states.
double linear_working_with(const Sizes& s, bool backward, int64_t M_, bool chunk_states) {
  const double M = double(M_), E = double(s.value_dim), n = double(s.seq_q);
  double floats = bh(s) * M * (E + 1) * (backward ? 2 : 1) + bh(s) * n * M * (backward ? 4 : 2);
  if (chunk_states && backward) floats += bh(s) * (n / 64 + 1) * M * (E + 1);
  return floats;
}
double linear_working(const Sizes& s, bool backward) {
  return linear_working_with(s, backward, map_features(s), false);
}
double causal_working(const Sizes& s, bool backward) { return linear_working_with(s, backward, map_features(s), true); }
double favor_working(const Sizes& s, bool backward) {
  return linear_working_with(s, backward, favor_features(s), s.causal);
}
double fourier_working(const Sizes& s, bool backward) {
  return linear_working_with(s, backward, fourier_features(s), s.causal);
}
// Decayed rows: the state S and the cumulative log gates of every token (a column per key dim, the
// most any decay needs) in the forward; the backward adds the state before every chunk (it walks the
// chunks backwards), dS, and the forward's.
double decayed_working(const Sizes& s, bool backward) {
  const double KV = double(s.dim) * double(s.value_dim), n = double(s.seq_q);
  double floats = bh(s) * (KV + n * double(s.dim));
  if (backward) floats = 2.0 * floats + bh(s) * (std::ceil(n / double(s.chunk)) + 1.0) * KV;
  return floats;
}
// k̃, ṽ and lse (and their gradients), E and F (and dE, dF).
double linformer_working(const Sizes& s, bool backward) {
  const double P = double(projected_length(s));
  return (bh(s) * P * double(s.dim + s.value_dim + 1) + 2.0 * double(projection_floats(s))) * (backward ? 2 : 1);
}

// ---- options -----------------------------------------------------------------------------------

Options softmax_options(const Sizes& s) {
  Options o;
  o.softmax.causal = s.causal;
  o.softmax.key_lengths = s.key_lengths;
  return o;
}
Options linear_options_with(const Sizes& s, FeatureMapPtr map, bool causal, bool normalize) {
  Options o;
  o.linear.feature_map = std::move(map);
  o.linear.causal = causal;
  o.linear.normalize = normalize;
  o.linear.chunk_size = s.chunk;
  o.linear.key_lengths = s.key_lengths;
  return o;
}
Options linear_options(const Sizes& s) { return linear_options_with(s, map_of(s), false, s.normalize); }
Options causal_options(const Sizes& s) { return linear_options_with(s, map_of(s), true, s.normalize); }
// recurrent_step takes no mask: the step sees the whole state, which is causal by construction.
Options recurrent_options(const Sizes& s) { return linear_options_with(s, map_of(s), false, s.normalize); }
Options favor_options(const Sizes& s) {
  return linear_options_with(s, favor_feature_map(s.dim, FavorOptions{favor_features(s), s.seed, true}), s.causal,
                             s.normalize);
}
Options fourier_options(const Sizes& s) {
  return linear_options_with(s, random_fourier_feature_map(s.dim, fourier_features(s), s.seed), s.causal, false);
}
// The decayed rows: the decay, the chunk, packed sequences; lightning's g_gamma is ALiBi's slopes
// (lightning attention's decay rates): g_gamma[h] = −2^(−8(h + 1)/H).
Options decayed_options_with(const Sizes& s, Decay decay) {
  Options o;
  o.decayed.decay = decay;
  o.decayed.chunk_size = s.chunk;
  o.decayed.cu_seqlens = s.cu_seqlens;
  if (decay == Decay::head) {
    auto gamma = std::make_shared<std::vector<float>>();
    for (int64_t h = 0; h < s.heads; ++h) gamma->push_back(-float(std::exp2(-8.0 * double(h + 1) / double(s.heads))));
    o.g_gamma = gamma;
    o.decayed.g_gamma = *gamma;
  }
  return o;
}
Options retention_options(const Sizes& s) { return decayed_options_with(s, Decay::retention); }
Options lightning_options(const Sizes& s) { return decayed_options_with(s, Decay::head); }
Options simple_gla_options(const Sizes& s) { return decayed_options_with(s, Decay::token); }
Options gla_options(const Sizes& s) { return decayed_options_with(s, Decay::key); }
Options linformer_options(const Sizes& s) {
  Options o;
  o.linformer.projected_length = projected_length(s);
  o.linformer.max_length = s.max_length > 0 ? s.max_length : s.seq_k;
  o.linformer.share_heads = s.share_heads;
  o.linformer.key_lengths = s.key_lengths;
  return o;
}

// ---- calls -------------------------------------------------------------------------------------

void softmax_forward(const Operands& a, const Options& o) {
  softmax_attention_forward(a.out, a.lse, a.q, a.k, a.v, o.softmax);
}
void softmax_backward(const Operands& a, const Options& o) {
  softmax_attention_backward(a.dq, a.dk, a.dv, a.dout, a.q, a.k, a.v, a.out, a.lse, o.softmax);
}
// The linear family: causal self-attention through the causal entry point, anything else (non-causal,
// causal cross-attention) through linear_attention_*.
void linear_forward(const Operands& a, const Options& o) {
  if (o.linear.causal && a.q.seq() == a.k.seq())
    causal_linear_attention_forward(a.out, a.q, a.k, a.v, o.linear);
  else
    linear_attention_forward(a.out, a.q, a.k, a.v, o.linear);
}
void linear_backward(const Operands& a, const Options& o) {
  if (o.linear.causal && a.q.seq() == a.k.seq())
    causal_linear_attention_backward(a.dq, a.dk, a.dv, a.dout, a.q, a.k, a.v, o.linear);
  else
    linear_attention_backward(a.dq, a.dk, a.dv, a.dout, a.q, a.k, a.v, o.linear);
}
void recurrent_forward(const Operands& a, const Options& o) {
  if (a.state == nullptr) throw Error("linattn: table recurrent: operands.state is null, expected a RecurrentState");
  step_through(a.out, a.q, a.k, a.v, *a.state, o.linear);
}
void linformer_forward(const Operands& a, const Options& o) {
  linformer_attention_forward(a.out, a.lse, a.q, a.k, a.v, a.E, a.F, o.linformer);
}
void linformer_backward(const Operands& a, const Options& o) {
  linformer_attention_backward(a.dq, a.dk, a.dv, a.dE, a.dF, a.dout, a.q, a.k, a.v, a.E, a.F, a.out, a.lse,
                               o.linformer);
}

// The decayed rows through the chunked entry points (no initial or final state: the table's operands
// have none).
void decayed_forward(const Operands& a, const Options& o) {
  decayed_attention_forward(a.out, a.q, a.k, a.v, a.g, o.decayed);
}
void decayed_backward(const Operands& a, const Options& o) {
  decayed_attention_backward(a.dq, a.dk, a.dv, a.dg, {}, a.dout, {}, a.q, a.k, a.v, a.g, o.decayed);
}

// ---- oracles -----------------------------------------------------------------------------------

OracleForward softmax_oracle_forward(const OracleInputs& in, const Options& o) {
  OracleForward r;
  r.out = reference::softmax_attention_forward(in.q, in.k, in.v, o.softmax, &r.lse);
  return r;
}
OracleBackward softmax_oracle_backward(const OracleInputs& in, const Options& o) {
  reference::Gradients g = reference::softmax_attention_backward(in.dout, in.q, in.k, in.v, o.softmax);
  return {std::move(g.dq), std::move(g.dk), std::move(g.dv), {}, {}, {}};
}
OracleForward linear_oracle_forward(const OracleInputs& in, const Options& o) {
  return {reference::linear_attention_forward(in.q, in.k, in.v, o.linear), {}};
}
OracleBackward linear_oracle_backward(const OracleInputs& in, const Options& o) {
  reference::Gradients g = reference::linear_attention_backward(in.dout, in.q, in.k, in.v, o.linear);
  return {std::move(g.dq), std::move(g.dk), std::move(g.dv), {}, {}, {}};
}
// The recurrent step's oracle is causal linear attention over the whole sequence.
OracleForward recurrent_oracle_forward(const OracleInputs& in, const Options& o) {
  LinearAttentionOptions causal = o.linear;
  causal.causal = true;
  return {reference::linear_attention_forward(in.q, in.k, in.v, causal), {}};
}
OracleForward linformer_oracle_forward(const OracleInputs& in, const Options& o) {
  OracleForward r;
  r.out = reference::linformer_attention_forward(in.q, in.k, in.v, in.E, in.F, o.linformer, &r.lse);
  return r;
}
OracleBackward linformer_oracle_backward(const OracleInputs& in, const Options& o) {
  reference::LinformerGradients g =
      reference::linformer_attention_backward(in.dout, in.q, in.k, in.v, in.E, in.F, o.linformer);
  return {std::move(g.dq), std::move(g.dk), std::move(g.dv), std::move(g.dE), std::move(g.dF), {}};
}

// The decayed oracle, token by token from the recurrence; g only where the row has a gate tensor.
const reference::Tensor* gate_of(const OracleInputs& in) { return in.g.data.empty() ? nullptr : &in.g; }
OracleForward decayed_oracle_forward(const OracleInputs& in, const Options& o) {
  return {reference::decayed_attention_forward(in.q, in.k, in.v, gate_of(in), o.decayed).out, {}};
}
OracleBackward decayed_oracle_backward(const OracleInputs& in, const Options& o) {
  reference::DecayedGradients g =
      reference::decayed_attention_backward(in.dout, nullptr, in.q, in.k, in.v, gate_of(in), o.decayed);
  return {std::move(g.dq), std::move(g.dk), std::move(g.dv), {}, {}, std::move(g.dg)};
}

// ---- test cases --------------------------------------------------------------------------------

Sizes shape(int64_t B, int64_t Nq, int64_t Nk, int64_t H, int64_t D, int64_t E) {
  Sizes s;
  s.batch = B, s.seq_q = Nq, s.seq_k = Nk, s.heads = H, s.dim = D, s.value_dim = E;
  return s;
}

// Sequence lengths around the tile (16) and chunk (32, 64) sizes, odd head dims, E ≠ D, cross-attention.
const std::array<Sizes, 9> kAwkward = {
    shape(1, 1, 1, 1, 1, 1),         shape(3, 2, 2, 1, 16, 16),    shape(1, 63, 63, 3, 59, 16),
    shape(2, 64, 64, 3, 64, 64),     shape(1, 65, 65, 1, 128, 59), shape(3, 97, 97, 3, 16, 128),
    shape(1, 1000, 1000, 1, 64, 64), shape(1, 97, 65, 3, 59, 64),  shape(1, 63, 130, 1, 64, 16)};

constexpr Storage kStorages[] = {Storage::bnhd, Storage::bhnd, Storage::padded};

// Every awkward shape (with D = 1 only where `tiny_dim`: with one key dim the normalised linear
// output hardly depends on q and dq is pure cancellation) under each variant, cycling the storage,
// ragged key lengths and (for the causal ones) the chunk size 64 / 17 from case to case.
template <class Vary>
std::vector<TestCase> sweep(bool tiny_dim, int variants, const Vary& vary) {
  std::vector<TestCase> cases;
  int n = 0;
  for (const Sizes& base : kAwkward) {
    if (base.dim == 1 && !tiny_dim) continue;
    for (int variant = 0; variant < variants; ++variant, ++n) {
      TestCase c{base, kStorages[n % 3], n % 2 == 1};
      c.sizes.chunk = n % 3 == 0 ? 64 : 17;
      vary(c.sizes, variant);
      cases.push_back(c);
    }
  }
  return cases;
}

std::vector<TestCase> softmax_cases() {
  return sweep(true, 2, [](Sizes& s, int variant) { s.causal = variant == 1; });
}
std::vector<TestCase> linear_cases() {
  std::vector<TestCase> cases = sweep(false, 2, [](Sizes& s, int variant) { s.map = variant ? "relu" : "elu"; });
  // identity features can be negative, so its normaliser can vanish: checked without it.
  for (const Sizes& base : kAwkward) {
    if (base.dim == 1) continue;
    TestCase c{base};
    c.sizes.map = "identity";
    c.sizes.normalize = false;
    cases.push_back(c);
  }
  return cases;
}
std::vector<TestCase> causal_cases() {
  return sweep(false, 2, [](Sizes& s, int variant) { s.map = variant ? "relu" : "elu"; });
}
std::vector<TestCase> random_features_cases() {
  return sweep(false, 2, [](Sizes& s, int variant) {
    s.causal = variant == 1;
    s.seed = 3;
  });
}
std::vector<TestCase> recurrent_cases() {
  std::vector<TestCase> cases;
  for (const Sizes& base : {shape(3, 97, 97, 3, 59, 16), shape(1, 130, 130, 1, 64, 64)})
    for (const char* map : {"elu", "favor"}) {
      TestCase c{base};
      c.sizes.map = map;
      c.sizes.seed = 5;
      cases.push_back(c);
    }
  return cases;
}
std::vector<TestCase> linformer_cases() {
  std::vector<TestCase> cases;
  for (const Sizes& base : {shape(2, 65, 65, 3, 59, 16), shape(1, 97, 97, 1, 64, 64), shape(3, 63, 40, 3, 16, 59)})
    for (bool share : {false, true}) {
      TestCase c{base, Storage::padded};
      c.sizes.projected = 17;
      c.sizes.max_length = base.seq_k + 5;
      c.sizes.share_heads = share;
      cases.push_back(c);
    }
  return cases;
}

// Finite differences perturb every element: a handful of tokens. Nq > Nk leaves causal rows that
// see no key; ragged cases drop keys per batch.
std::vector<TestCase> softmax_gradient_cases() {
  std::vector<TestCase> cases;
  for (const Sizes& base :
       {shape(1, 1, 1, 1, 1, 1), shape(2, 5, 5, 2, 3, 4), shape(1, 3, 7, 1, 5, 2), shape(2, 7, 3, 1, 4, 4)})
    for (bool causal : {false, true}) {
      TestCase c{base, Storage::padded, true};
      c.sizes.causal = causal;
      cases.push_back(c);
    }
  return cases;
}
std::vector<TestCase> linear_gradient_cases() {
  return {{shape(2, 5, 5, 2, 3, 4), Storage::bnhd, true}, {shape(1, 4, 7, 1, 3, 2), Storage::bhnd, false}};
}
std::vector<TestCase> random_features_gradient_cases() {
  std::vector<TestCase> cases;
  for (bool causal : {false, true}) {
    TestCase c{shape(2, 5, 5, 2, 3, 4), Storage::padded, causal};
    c.sizes.causal = causal;
    c.sizes.features = 8;
    c.sizes.seed = 3;
    cases.push_back(c);
  }
  return cases;
}
std::vector<TestCase> no_cases() { return {}; }
std::vector<TestCase> linformer_gradient_cases() {
  std::vector<TestCase> cases;
  for (bool share : {false, true}) {
    TestCase c{shape(2, 5, 4, 2, 3, 4), Storage::padded, share};
    c.sizes.projected = 3;
    c.sizes.max_length = 6;
    c.sizes.share_heads = share;
    cases.push_back(c);
  }
  return cases;
}

// The decayed rows: self-attention only (Nq = Nk), so the awkward shapes without cross-attention,
// each with chunk 64 and 17 in turn and the three storages; the B = 1 shapes also packed (three
// sequences along N, cu_seqlens).
std::vector<TestCase> decayed_cases() {
  std::vector<TestCase> cases;
  int n = 0;
  for (const Sizes& base : kAwkward) {
    if (base.seq_q != base.seq_k) continue;
    for (int64_t chunk : {64, 17}) {
      TestCase c{base, kStorages[n++ % 3], false, false};
      c.sizes.chunk = chunk;
      cases.push_back(c);
      if (base.batch == 1 && base.seq_q >= 3) {
        c.packed = true;
        cases.push_back(c);
      }
    }
  }
  return cases;
}
// The delta rows: the decayed rows' cases but D = 1, where the l2norm of q and k leaves ±1 whatever
// they are: the true dq and dk are ~1e-6 of the other gradients, and fp32 returns their cancellation.
std::vector<TestCase> delta_cases() {
  std::vector<TestCase> cases = decayed_cases();
  std::erase_if(cases, [](const TestCase& c) { return c.sizes.dim == 1; });
  return cases;
}
// Chunks of 2 and 3 over 5 to 7 tokens: every path (several chunks, a partial last one, packed
// sequences that end inside a chunk) at a size where every element can be perturbed.
std::vector<TestCase> decayed_gradient_cases() {
  TestCase a{shape(2, 5, 5, 2, 3, 4), Storage::bnhd, false, false}, b{shape(1, 7, 7, 2, 3, 2), Storage::padded},
      c{shape(1, 7, 7, 1, 4, 3), Storage::bhnd, false, true};
  a.sizes.chunk = 2, b.sizes.chunk = 3, c.sizes.chunk = 2;
  return {a, b, c};
}

// Mamba-2: the decayed rows' cases with one group (every head reads B and C of group 0) and one per head
// in turn, and a case between (H 4, G 2) with an odd state size and head dim.
std::vector<TestCase> mamba2_cases() {
  std::vector<TestCase> cases = decayed_cases();
  for (size_t i = 0; i < cases.size(); ++i) cases[i].sizes.groups = i % 2 == 0 ? 1 : 0;
  TestCase between{shape(2, 65, 65, 4, 5, 7), Storage::padded};
  between.sizes.groups = 2;
  between.sizes.chunk = 17;
  cases.push_back(between);
  return cases;
}
std::vector<TestCase> mamba2_gradient_cases() {
  std::vector<TestCase> cases = decayed_gradient_cases();
  cases[0].sizes.groups = 1;  // H 2 reading one group
  return cases;
}

constexpr double kBound = 1e-5;

// The decayed family's rows (one chunked engine, decay.hpp) differ only in their name, options and gate.
Operator decayed_row(const char* name, const char* summary, Options (*options)(const Sizes&),
                     int64_t (*gate_dim)(const Sizes&), double (*forward_bytes)(const Sizes&),
                     double (*backward_bytes)(const Sizes&)) {
  return detail::recurrence_row(
      name, summary,
      {gate_dim, options, decayed_forward, decayed_backward, decayed_oracle_forward, decayed_oracle_backward},
      {decayed_forward_flops, decayed_backward_flops, forward_bytes, backward_bytes, decayed_working}, decayed_cases,
      decayed_gradient_cases, kBound);
}

const Operator kOperators[] = {
    {.name = "softmax",
     .summary = "exact softmax attention (tiled, online softmax); causal: bottom-right mask",
     .causality = Causality::optional,
     .has_backward = true,
     .has_lse = true,
     .has_projections = false,
     .carries_state = false,
     .feature_dim = no_features,
     .gate_dim = no_features,
     .options = softmax_options,
     .forward = softmax_forward,
     .backward = softmax_backward,
     .oracle_forward = softmax_oracle_forward,
     .oracle_backward = softmax_oracle_backward,
     .forward_flops = softmax_forward_flops,
     .backward_flops = softmax_backward_flops,
     .forward_bytes = softmax_forward_bytes,
     .backward_bytes = softmax_backward_bytes,
     .working_floats = softmax_working,
     .test_cases = softmax_cases,
     .gradient_cases = softmax_gradient_cases,
     .bound = kBound},
    {.name = "linear",
     .summary = "non-causal linear attention, φ by Sizes::map (elu + 1 by default)",
     .causality = Causality::never,
     .has_backward = true,
     .has_lse = false,
     .has_projections = false,
     .carries_state = false,
     .feature_dim = map_features,
     .gate_dim = no_features,
     .options = linear_options,
     .forward = linear_forward,
     .backward = linear_backward,
     .oracle_forward = linear_oracle_forward,
     .oracle_backward = linear_oracle_backward,
     .forward_flops = linear_forward_flops,
     .backward_flops = linear_backward_flops,
     .forward_bytes = attention_forward_bytes,
     .backward_bytes = attention_backward_bytes,
     .working_floats = linear_working,
     .test_cases = linear_cases,
     .gradient_cases = linear_gradient_cases,
     .bound = kBound},
    {.name = "causal",
     .summary = "causal linear attention, chunked (intra-chunk masked product + inter-chunk state)",
     .causality = Causality::always,
     .has_backward = true,
     .has_lse = false,
     .has_projections = false,
     .carries_state = false,
     .feature_dim = map_features,
     .gate_dim = no_features,
     .options = causal_options,
     .forward = linear_forward,
     .backward = linear_backward,
     .oracle_forward = linear_oracle_forward,
     .oracle_backward = linear_oracle_backward,
     .forward_flops = causal_forward_flops,
     .backward_flops = causal_backward_flops,
     .forward_bytes = attention_forward_bytes,
     .backward_bytes = attention_backward_bytes,
     .working_floats = causal_working,
     .test_cases = causal_cases,
     .gradient_cases = linear_gradient_cases,
     .bound = kBound},
    {.name = "recurrent",
     .summary = "the recurrent step, token by token against a RecurrentState (no backward: it serves generation)",
     .causality = Causality::always,
     .has_backward = false,
     .has_lse = false,
     .has_projections = false,
     .carries_state = true,
     .feature_dim = map_features,
     .gate_dim = no_features,
     .options = recurrent_options,
     .forward = recurrent_forward,
     .backward = nullptr,
     .oracle_forward = recurrent_oracle_forward,
     .oracle_backward = nullptr,
     .forward_flops = recurrent_forward_flops,
     .backward_flops = no_flops,
     .forward_bytes = recurrent_forward_bytes,
     .backward_bytes = no_bytes,
     .working_floats = linear_working,
     .test_cases = recurrent_cases,
     .gradient_cases = no_cases,
     .bound = kBound},
    {.name = "favor",
     .summary = "linear attention with FAVOR+ positive random features (Performer's; alias \"performer\")",
     .causality = Causality::optional,
     .has_backward = true,
     .has_lse = false,
     .has_projections = false,
     .carries_state = false,
     .feature_dim = favor_features,
     .gate_dim = no_features,
     .options = favor_options,
     .forward = linear_forward,
     .backward = linear_backward,
     .oracle_forward = linear_oracle_forward,
     .oracle_backward = linear_oracle_backward,
     .forward_flops = favor_forward_flops,
     .backward_flops = favor_backward_flops,
     .forward_bytes = attention_forward_bytes,
     .backward_bytes = attention_backward_bytes,
     .working_floats = favor_working,
     .test_cases = random_features_cases,
     .gradient_cases = random_features_gradient_cases,
     .bound = kBound},
    {.name = "random_fourier",
     .summary = "unnormalised linear attention with random Fourier features (Gaussian kernel)",
     .causality = Causality::optional,
     .has_backward = true,
     .has_lse = false,
     .has_projections = false,
     .carries_state = false,
     .feature_dim = fourier_features,
     .gate_dim = no_features,
     .options = fourier_options,
     .forward = linear_forward,
     .backward = linear_backward,
     .oracle_forward = linear_oracle_forward,
     .oracle_backward = linear_oracle_backward,
     .forward_flops = fourier_forward_flops,
     .backward_flops = fourier_backward_flops,
     .forward_bytes = attention_forward_bytes,
     .backward_bytes = attention_backward_bytes,
     .working_floats = fourier_working,
     .test_cases = random_features_cases,
     .gradient_cases = random_features_gradient_cases,
     .bound = kBound},
    {.name = "linformer",
     .summary = "Linformer: keys and values projected along the sequence (E, F), then exact softmax",
     .causality = Causality::never,
     .has_backward = true,
     .has_lse = true,
     .has_projections = true,
     .carries_state = false,
     .feature_dim = no_features,
     .gate_dim = no_features,
     .options = linformer_options,
     .forward = linformer_forward,
     .backward = linformer_backward,
     .oracle_forward = linformer_oracle_forward,
     .oracle_backward = linformer_oracle_backward,
     .forward_flops = linformer_forward_flops,
     .backward_flops = linformer_backward_flops,
     .forward_bytes = linformer_forward_bytes,
     .backward_bytes = linformer_backward_bytes,
     .working_floats = linformer_working,
     .test_cases = linformer_cases,
     .gradient_cases = linformer_gradient_cases,
     .bound = kBound},
    decayed_row("retention", "RetNet's retention: a fixed decay per head, γ_h = 1 − 2^(−5−h) (chunked)",
                retention_options, no_features, ungated_forward_bytes, ungated_backward_bytes),
    decayed_row("lightning",
                "lightning attention: a constant log decay per head, g_gamma (ALiBi's slopes here; chunked)",
                lightning_options, no_features, ungated_forward_bytes, ungated_backward_bytes),
    decayed_row("simple_gla",
                "simple GLA (Mamba-2's SSD): a data-dependent log decay per head and token, g [B, N, H, 1] (chunked)",
                simple_gla_options, token_gate, token_gate_forward_bytes, token_gate_backward_bytes),
    decayed_row("gla", "GLA: a data-dependent log decay per head, token and key dim, g [B, N, H, D] (chunked)",
                gla_options, key_gate, key_gate_forward_bytes, key_gate_backward_bytes),
    detail::delta_row(DeltaGate::none, delta_cases, decayed_gradient_cases, kBound),
    detail::delta_row(DeltaGate::token, delta_cases, decayed_gradient_cases, kBound),
    detail::delta_row(DeltaGate::key, delta_cases, decayed_gradient_cases, kBound),
    detail::mamba2_row(mamba2_cases, mamba2_gradient_cases, kBound),
    detail::rwkv7_row(decayed_cases, decayed_gradient_cases, kBound),
};

}  // namespace

namespace detail {
Operator recurrence_row(const char* name, const char* summary, const RecurrenceCalls& calls,
                        const RecurrenceModels& models, std::vector<TestCase> (*test_cases)(),
                        std::vector<TestCase> (*gradient_cases)(), double bound) {
  return {.name = name,
          .summary = summary,
          .causality = Causality::always,
          .has_backward = true,
          .has_lse = false,
          .has_projections = false,
          .carries_state = false,
          .feature_dim = no_features,
          .gate_dim = calls.gate_dim,
          .options = calls.options,
          .forward = calls.forward,
          .backward = calls.backward,
          .oracle_forward = calls.oracle_forward,
          .oracle_backward = calls.oracle_backward,
          .forward_flops = models.forward_flops,
          .backward_flops = models.backward_flops,
          .forward_bytes = models.forward_bytes,
          .backward_bytes = models.backward_bytes,
          .working_floats = models.working_floats,
          .test_cases = test_cases,
          .gradient_cases = gradient_cases,
          .bound = bound};
}

double decayed_forward_count(const Sizes& s) { return decayed_forward_flops(s); }
double decayed_backward_count(const Sizes& s) { return decayed_backward_flops(s); }
double decayed_working_floats(const Sizes& s, bool backward) { return decayed_working(s, backward); }
}  // namespace detail

std::span<const Operator> operators() { return kOperators; }

const Operator& find(std::string_view name) {
  std::string names;
  for (const Operator& op : kOperators) {
    if (op.name == name) return op;
    names += std::string(names.empty() ? "" : ", ") + op.name;
  }
  throw Error("linattn: operator table: name is \"" + std::string(name) + "\", expected one of " + names);
}

int64_t projected_length(const Sizes& s) { return s.projected > 0 ? s.projected : std::min<int64_t>(s.seq_k, 256); }

int64_t projection_floats(const Sizes& s) {
  return (s.share_heads ? 1 : s.heads) * projected_length(s) * (s.max_length > 0 ? s.max_length : s.seq_k);
}

std::vector<int64_t> ragged_key_lengths(const Sizes& s) {
  std::vector<int64_t> lengths;
  for (int64_t b = 0; b < s.batch; ++b)
    lengths.push_back(std::max<int64_t>(std::min<int64_t>(2, s.seq_k), s.seq_k - 1 - 7 * b));
  return lengths;
}

std::vector<int64_t> packed_boundaries(const Sizes& s) {
  std::vector<int64_t> cu{0};
  for (int64_t end : {int64_t(1), s.seq_q / 3, s.seq_q})
    if (end > cu.back()) cu.push_back(end);
  return cu;
}

float log_decay_of_normal(double x) {
  // logsigmoid(x) = −log(1 + e^(−x)), written to stay finite for either sign of x.
  const double logsigmoid = x >= 0 ? -std::log1p(std::exp(-x)) : x - std::log1p(std::exp(x));
  return float(logsigmoid / 16.0);
}

void step_through(TensorView out, ConstTensorView q, ConstTensorView k, ConstTensorView v, RecurrentState& state,
                  const LinearAttentionOptions& options) {
  const auto token = [](auto view, int64_t n) {  // [B, 1, H, ·]: row n of each tensor
    view.data += n * view.stride[1];
    view.extent[1] = 1;
    return view;
  };
  for (int64_t n = 0; n < q.extent[1]; ++n)
    recurrent_step(token(out, n), token(q, n), token(k, n), token(v, n), state, options);
}

// The in-chunk products run in strips of 16 rows, each only as wide (A) or as deep (the output
// product [φ(Q) | A][S; V]) as the triangle reaches, on rows padded to 16 floats. Per chunk of n
// tokens and strip of `rows` rows at r: A 2·rows·M·pad(r + rows), output 2·rows·(Mp + r + rows)·Ep;
// then the state update 2·M·n·Ep, z (n·M), φ(Q)·z (2·n·M), row sums of A (n²), and the 1/den
// scaling of [φ(Q) | A] (n·Mp + n(n + 1)/2).
double causal_forward_flops_executed(const Sizes& s) {
  const auto pad = [](int64_t x) { return double((x + 15) / 16 * 16); };
  const int64_t M_ = map_features(s);
  const double M = double(M_), Mp = pad(M_), Ep = pad(s.value_dim);
  double per_bh = 0;
  for (int64_t t0 = 0; t0 < s.seq_q; t0 += s.chunk) {
    const int64_t n = std::min(s.chunk, s.seq_q - t0);
    for (int64_t r = 0; r < n; r += 16) {
      const int64_t rows = std::min<int64_t>(16, n - r);
      per_bh += 2.0 * double(rows) * M * pad(r + rows) + 2.0 * double(rows) * (Mp + double(r + rows)) * Ep;
    }
    const double c = double(n);
    per_bh += 2.0 * M * c * Ep + c * M + 2.0 * c * M + c * c + c * Mp + c * (c + 1) / 2;
  }
  return bh(s) * per_bh;
}

}  // namespace linattn::table
