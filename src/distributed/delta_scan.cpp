// The distributed delta rule (include/linattn/distributed/scan.hpp): one Exscan of the shards'
// affine maps S ↦ A_r S + B_r, the reverse Exscan of (A_rᵀ, ∂L_r/∂S_in) for the backward.
//
// A shard's map comes from one run of the single-process chunked forward on widened values: the
// recurrence acts on each column of the state independently (S_t = (I − β_t k_t k_tᵀ) D_t S_{t−1}
// + β_t k_t v_tᵀ, column by column), so with values [0 | v] (K + V columns) and entering state
// [I | 0], its state after token t is [A_t | B_t] and its output is [scale·A_tᵀ q_t | o_t⁰]: the
// prefix map, the zero-state output, and u_t = scale·A_tᵀ q_t, through which the entering state
// reaches the output: o_t = o_t⁰ + S_inᵀ u_t. Exact (one pass, no identity solve), at the price of
// K extra value columns.
#include <cmath>
#include <vector>

#include "distributed/agreement.hpp"
#include "distributed/checks.hpp"
#include "distributed/mpi_calls.hpp"
#include "distributed/scan_shard.hpp"
#include "kernels/gemm.hpp"
#include "linattn/distributed/scan.hpp"

namespace linattn::distributed {

namespace {

using namespace detail;

constexpr int64_t kRows = 128;

ScanShard agree_on(MPI_Comm comm, const char* op, ConstTensorView q, ConstTensorView k, ConstTensorView v,
                   ConstTensorView beta, ConstTensorView g, const DeltaRuleOptions& options,
                   const std::function<void()>& more) {
  Signature s;
  run_local_checks(s, [&] {
    check_qkv(op, q, k, v);
    check_view(op, "beta", beta);
    static const char* axes[] = {"q's batch", "q's sequence"};
    for (int a = 0; a < 2; ++a) check_extent(op, "beta", beta, a, q.extent[a], axes[a]);
    check_extent(op, "beta", beta, 2, v.heads(), value_heads_name(q, v));
    check_extent(op, "beta", beta, 3, 1, "one β per token");
    const bool per_token = options.gate == DeltaGate::token;
    const int64_t cols = per_token ? 1 : options.gate == DeltaGate::key ? q.dim() : 0;
    check_gate(op, g, q, v, cols, per_token, "DeltaNet has no gate");
    check_scan_options(op, options.cu_seqlens.size(), options.chunk_size, options.scale);
    more();
  });
  s.shared("gate", static_cast<int64_t>(options.gate));
  s.shared("options.qk_l2norm", options.qk_l2norm ? 1 : 0);
  return agree_on_shard(comm, op, s, ItemType::Kind::matrix, q, v, options.scale);
}

// The widened value columns [0 | v] of the local pass.
int64_t wide_cols(const ScanShard& s) { return s.K + s.V; }

// One shard's local pass: its map (items [B·H] × [A | B]) and, on ranks > 0, the widened outputs
// [B, n, H, K + V] = [u | o⁰]. Rank 0 starts from the zero state, so only its B matters (A = I):
// it runs the plain forward, writing its final outputs into out at once.
struct LocalPass {
  std::vector<float> maps;
  std::vector<float> wide;  // [B, n, H, K + V], ranks > 0
};

LocalPass local_pass(const ScanShard& s, TensorView out, ConstTensorView q, ConstTensorView k, ConstTensorView v,
                     ConstTensorView beta, ConstTensorView g, const DeltaRuleOptions& options) {
  ComputeTimer timer;
  const int64_t K = s.K, V = s.V, W = wide_cols(s), BH = s.B * s.H;
  LocalPass pass;
  pass.maps.assign(size_t(BH * s.item()), 0.0f);
  for (int64_t bh = 0; bh < BH; ++bh)
    for (int64_t d = 0; d < K; ++d) pass.maps[bh * s.item() + d * K + d] = 1.0f;
  if (s.n == 0) return pass;
  if (s.rank == 0) {
    std::vector<float> final_state(size_t(BH * K * V));
    linattn::delta_rule_forward(out, q, k, v, beta, g, options, {}, final_state);
    for (int64_t bh = 0; bh < BH; ++bh)
      std::copy_n(final_state.data() + bh * K * V, K * V, pass.maps.data() + bh * s.item() + K * K);
    return pass;
  }
  std::vector<float> values(size_t(s.B * s.n * s.H * W), 0.0f), initial(size_t(BH * K * W), 0.0f),
      final_state(size_t(BH * K * W));
  const TensorView wide_v = bnhd(values.data(), s.B, s.n, s.H, W);
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t t = 0; t < s.n; ++t)
      for (int64_t h = 0; h < s.H; ++h)
        for (int64_t e = 0; e < V; ++e) wide_v(b, t, h, K + e) = v(b, t, h, e);
  for (int64_t bh = 0; bh < BH; ++bh)
    for (int64_t d = 0; d < K; ++d) initial[(bh * K + d) * W + d] = 1.0f;
  pass.wide.resize(values.size());
  linattn::delta_rule_forward(bnhd(pass.wide.data(), s.B, s.n, s.H, W), q, k, wide_v, beta, g, options, initial,
                              final_state);
  // final_state rows [A_r row | B_r row] → items [A | B].
  for (int64_t bh = 0; bh < BH; ++bh) {
    float* A = pass.maps.data() + bh * s.item();
    float* Bm = A + K * K;
    for (int64_t d = 0; d < K; ++d) {
      const float* row = final_state.data() + (bh * K + d) * W;
      std::copy_n(row, K, A + d * K);
      std::copy_n(row + K, V, Bm + d * V);
    }
  }
  return pass;
}

// out_t = o⁰_t + S_inᵀ u_t, from the widened outputs.
void finish_outputs(const ScanShard& s, TensorView out, const std::vector<float>& wide,
                    const std::vector<float>& S_in) {
  const int64_t K = s.K, V = s.V, W = wide_cols(s);
  const ConstTensorView w = bnhd(wide.data(), s.B, s.n, s.H, W);
#pragma omp parallel for schedule(static)
  for (int64_t bh = 0; bh < s.B * s.H; ++bh) {
    const int64_t b = bh / s.H, h = bh % s.H;
    std::vector<float> u(size_t(kRows * K)), o(size_t(kRows * V));
    for (int64_t t0 = 0; t0 < s.n; t0 += kRows) {
      const int64_t T = std::min(kRows, s.n - t0);
      for (int64_t t = 0; t < T; ++t)
        for (int64_t d = 0; d < K; ++d) u[t * K + d] = w(b, t0 + t, h, d);
      // o = u S_in: [T, K] · [K, V].
      kernels::gemm({o.data(), V, T, V}, kernels::plain(u.data(), K), {S_in.data() + bh * K * V, V, K, V});
      for (int64_t t = 0; t < T; ++t)
        for (int64_t e = 0; e < V; ++e) out(b, t0 + t, h, e) = w(b, t0 + t, h, K + e) + o[t * V + e];
    }
  }
}

// items [B·H] × [A_rᵀ | Σ_t u_t dout_tᵀ]: the map G ↦ A_rᵀ G + ∂L_r/∂S_in of the reverse scan.
std::vector<float> gradient_maps(const ScanShard& s, const std::vector<float>& maps, const std::vector<float>& wide,
                                 ConstTensorView dout) {
  const int64_t K = s.K, V = s.V, W = wide_cols(s);
  std::vector<float> items(maps.size(), 0.0f);
  const ConstTensorView w = bnhd(wide.data(), s.B, s.n, s.H, W);
#pragma omp parallel for schedule(static)
  for (int64_t bh = 0; bh < s.B * s.H; ++bh) {
    const int64_t b = bh / s.H, h = bh % s.H;
    const float* A = maps.data() + bh * s.item();
    float* AT = items.data() + bh * s.item();
    float* D = AT + K * K;
    for (int64_t r = 0; r < K; ++r)
      for (int64_t c = 0; c < K; ++c) AT[c * K + r] = A[r * K + c];
    std::vector<float> u(size_t(kRows * K)), gt(size_t(kRows * V));
    for (int64_t t0 = 0; t0 < s.n; t0 += kRows) {
      const int64_t T = std::min(kRows, s.n - t0);
      for (int64_t t = 0; t < T; ++t) {
        for (int64_t d = 0; d < K; ++d) u[t * K + d] = w(b, t0 + t, h, d);
        for (int64_t e = 0; e < V; ++e) gt[t * V + e] = dout(b, t0 + t, h, e);
      }
      // D += uᵀ dout: [K, T] · [T, V].
      kernels::gemm({D, V, K, V}, kernels::transposed(u.data(), K), {gt.data(), V, T, V}, {.accumulate = true});
    }
  }
  return items;
}

void check_like(const char* op, const char* name, ConstTensorView x, const char* like_name, ConstTensorView like) {
  static const char* axes[] = {"batch", "sequence", "heads", "head dim"};
  check_view(op, name, x);
  for (int a = 0; a < 4; ++a)
    check_extent(op, name, x, a, like.extent[a], (std::string(like_name) + "'s " + axes[a]).c_str());
}

}  // namespace

void delta_rule_forward(MPI_Comm comm, TensorView out, ConstTensorView q, ConstTensorView k, ConstTensorView v,
                        ConstTensorView beta, ConstTensorView g, const DeltaRuleOptions& options) {
  const char* op = "delta_rule_forward";
  ErrorsReturn guard(comm);
  const ScanShard s = agree_on(comm, op, q, k, v, beta, g, options, [&] { check_like(op, "out", out, "v", v); });
  LocalPass pass;
  or_abort(comm, op, [&] { pass = local_pass(s, out, q, k, v, beta, g, options); });
  const std::vector<float> entering = s.exscan(comm, pass.maps);
  if (s.rank == 0 || s.n == 0) return;
  or_abort(comm, op, [&] {
    ComputeTimer timer;
    finish_outputs(s, out, pass.wide, s.states_of(entering));
  });
}

void delta_rule_backward(MPI_Comm comm, TensorView dq, TensorView dk, TensorView dv, TensorView dbeta, TensorView dg,
                         ConstTensorView dout, ConstTensorView q, ConstTensorView k, ConstTensorView v,
                         ConstTensorView beta, ConstTensorView g, const DeltaRuleOptions& options) {
  const char* op = "delta_rule_backward";
  ErrorsReturn guard(comm);
  const ScanShard s = agree_on(comm, op, q, k, v, beta, g, options, [&] {
    check_like(op, "dq", dq, "q", q);
    check_like(op, "dk", dk, "k", k);
    check_like(op, "dv", dv, "v", v);
    check_like(op, "dbeta", dbeta, "beta", beta);
    check_like(op, "dout", dout, "v", v);
    if (g.data != nullptr) check_like(op, "dg", dg, "g", g);
  });
  // Rank 0's forward outputs are not wanted here: a scratch buffer takes them.
  std::vector<float> scratch(s.rank == 0 ? size_t(s.B * s.n * s.H * s.V) : 0);
  const TensorView scratch_out = bnhd(scratch.data(), s.B, s.rank == 0 ? s.n : 0, s.H, s.V);
  LocalPass pass;
  or_abort(comm, op, [&] { pass = local_pass(s, scratch_out, q, k, v, beta, g, options); });
  const std::vector<float> entering = s.exscan(comm, pass.maps);
  std::vector<float> reverse_maps;
  {
    ComputeTimer timer;
    // Rank 0's ∂L/∂S_in is never read (nothing precedes it): the identity stands in.
    reverse_maps = s.rank == 0 || s.n == 0 ? pass.maps : gradient_maps(s, pass.maps, pass.wide, dout);
  }
  const std::vector<float> later = s.exscan(comm, reverse_maps, true);
  const std::vector<float> initial = s.rank == 0 ? std::vector<float>() : s.states_of(entering);
  const std::vector<float> dfinal = s.last() ? std::vector<float>() : s.states_of(later);
  or_abort(comm, op, [&] {
    if (s.n == 0) return;
    ComputeTimer timer;
    linattn::delta_rule_backward(dq, dk, dv, dbeta, dg, {}, dout, dfinal, q, k, v, beta, g, options, initial);
  });
}

}  // namespace linattn::distributed
