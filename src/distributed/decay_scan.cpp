// Distributed decayed linear attention (include/linattn/distributed/scan.hpp): one Exscan of the
// shards' affine maps S ↦ diag(a_r) S + S_r, the reverse Exscan of (a_r, ∂L_r/∂S_in) for the backward.
#include <bit>
#include <cmath>
#include <vector>

#include "distributed/agreement.hpp"
#include "distributed/checks.hpp"
#include "distributed/mpi_calls.hpp"
#include "distributed/scan_ops.hpp"
#include "kernels/gemm.hpp"
#include "kernels/pack.hpp"
#include "linattn/distributed/scan.hpp"

namespace linattn::distributed {

namespace {

using namespace detail;

constexpr int64_t kRows = 128;  // tokens per tile of the local passes (fixed: a fixed order of sums)

struct Shard {
  int64_t B = 0, n = 0, H = 0, K = 0, V = 0;
  float scale = 1;
  int rank = 0, ranks = 1;
  int64_t item() const { return K + K * V; }
  bool last() const { return rank == ranks - 1; }
};

int64_t gate_cols(Decay decay, int64_t K) { return decay == Decay::token ? 1 : decay == Decay::key ? K : 0; }

Shard agree_on(MPI_Comm comm, const char* op, ConstTensorView q, ConstTensorView k, ConstTensorView v,
               ConstTensorView g, const DecayedAttentionOptions& options, const std::function<void()>& more) {
  Signature s;
  run_local_checks(s, [&] {
    check_qkv(op, q, k, v);
    check_gate(op, g, q, gate_cols(options.decay, q.dim()), options.decay == Decay::token,
               decay_name(options.decay) + " has no gate tensor");
    if (options.decay == Decay::head && int64_t(options.g_gamma.size()) != q.heads())
      fail(op, "options.g_gamma has " + std::to_string(options.g_gamma.size()) + " entries, expected " +
                   std::to_string(q.heads()) + " (q's heads)");
    check_scan_options(op, options.cu_seqlens.size(), options.chunk_size, options.scale);
    more();
  });
  int64_t gamma_hash = 0;
  for (float x : options.g_gamma) gamma_hash = gamma_hash * 1000003 + std::bit_cast<int32_t>(x);
  s.shared("decay", static_cast<int64_t>(options.decay));
  s.shared("batch", q.batch());
  s.shared("heads", q.heads());
  s.shared("head dim", q.dim());
  s.shared("value dim", v.dim());
  s.shared("options.scale (bits)", options.scale ? std::bit_cast<int32_t>(*options.scale) : -1);
  s.shared("options.g_gamma (hash)", gamma_hash);
  s.own("shard length", q.seq());
  agree(comm, op, s);
  Shard shard{q.batch(), q.seq(), q.heads(), q.dim(), v.dim()};
  shard.scale = options.scale ? *options.scale : 1.0f / std::sqrt(float(q.dim()));
  shard.rank = comm_rank(comm);
  shard.ranks = comm_size(comm);
  return shard;
}

// The log decay of token t, key row d, head (b, h).
struct LogDecay {
  const DecayedAttentionOptions& options;
  ConstTensorView g;
  float operator()(int64_t b, int64_t t, int64_t h, int64_t d) const {
    switch (options.decay) {
      case Decay::none:
        return 0.0f;
      case Decay::retention:
        return retention_log_decay(h);
      case Decay::head:
        return options.g_gamma[h];
      case Decay::token:
        return g(b, t, h, 0);
      case Decay::key:
        return g(b, t, h, d);
    }
    return 0.0f;
  }
};

// items [B·H] × [a | S]: the shard's map S ↦ diag(a) S + S_r from its own tokens,
//   a = exp(G_n), S_r = Σ_t diag(exp(G_n − G_t)) k_t v_tᵀ, G_t = Σ_{u ≤ t} g_u (fp64 running sums).
std::vector<float> shard_map(const Shard& s, ConstTensorView k, ConstTensorView v, const LogDecay& log_decay) {
  std::vector<float> items(size_t(s.B * s.H * s.item()), 0.0f);
  const int64_t K = s.K, V = s.V;
#pragma omp parallel for schedule(static)
  for (int64_t bh = 0; bh < s.B * s.H; ++bh) {
    const int64_t b = bh / s.H, h = bh % s.H;
    float* a = items.data() + bh * s.item();
    float* S = a + K;
    std::vector<double> total(size_t(K), 0.0), G(size_t(K), 0.0);
    for (int64_t t = 0; t < s.n; ++t)
      for (int64_t d = 0; d < K; ++d) total[d] += log_decay(b, t, h, d);
    std::vector<float> kw(size_t(kRows * K)), vt(size_t(kRows * V));
    for (int64_t t0 = 0; t0 < s.n; t0 += kRows) {
      const int64_t T = std::min(kRows, s.n - t0);
      kernels::pack_rows({vt.data(), V, T, V}, kernels::head_rows(v, b, h), t0, T);
      for (int64_t t = 0; t < T; ++t)
        for (int64_t d = 0; d < K; ++d) {
          G[d] += log_decay(b, t0 + t, h, d);
          kw[t * K + d] = k(b, t0 + t, h, d) * float(std::exp(total[d] - G[d]));
        }
      // S += kwᵀ v: [K, T] · [T, V].
      kernels::gemm({S, V, K, V}, kernels::transposed(kw.data(), K), {vt.data(), V, T, V}, {.accumulate = true});
    }
    for (int64_t d = 0; d < K; ++d) a[d] = float(std::exp(total[d]));
  }
  return items;
}

// items [B·H] × [a | D]: a as in shard_map, D = ∂L_r/∂S_in = Σ_t diag(exp(G_t)) scale·q_t dout_tᵀ.
std::vector<float> shard_gradient_map(const Shard& s, ConstTensorView q, ConstTensorView dout,
                                      const LogDecay& log_decay) {
  std::vector<float> items(size_t(s.B * s.H * s.item()), 0.0f);
  const int64_t K = s.K, V = s.V;
#pragma omp parallel for schedule(static)
  for (int64_t bh = 0; bh < s.B * s.H; ++bh) {
    const int64_t b = bh / s.H, h = bh % s.H;
    float* a = items.data() + bh * s.item();
    float* D = a + K;
    std::vector<double> G(size_t(K), 0.0);
    std::vector<float> qw(size_t(kRows * K)), gt(size_t(kRows * V));
    for (int64_t t0 = 0; t0 < s.n; t0 += kRows) {
      const int64_t T = std::min(kRows, s.n - t0);
      kernels::pack_rows({gt.data(), V, T, V}, kernels::head_rows(dout, b, h), t0, T);
      for (int64_t t = 0; t < T; ++t)
        for (int64_t d = 0; d < K; ++d) {
          G[d] += log_decay(b, t0 + t, h, d);
          qw[t * K + d] = s.scale * q(b, t0 + t, h, d) * float(std::exp(G[d]));
        }
      kernels::gemm({D, V, K, V}, kernels::transposed(qw.data(), K), {gt.data(), V, T, V}, {.accumulate = true});
    }
    for (int64_t d = 0; d < K; ++d) a[d] = float(std::exp(G[d]));
  }
  return items;
}

// The S parts of items, as a state [B, H, K, V].
std::vector<float> states_of(const Shard& s, const std::vector<float>& items) {
  std::vector<float> states(size_t(s.B * s.H * s.K * s.V));
  for (int64_t bh = 0; bh < s.B * s.H; ++bh)
    std::copy_n(items.data() + bh * s.item() + s.K, s.K * s.V, states.data() + bh * s.K * s.V);
  return states;
}

// The state entering this shard (one Exscan of the shard maps; empty on rank 0: the zero state).
std::vector<float> entering_state(MPI_Comm comm, const Shard& s, ConstTensorView k, ConstTensorView v,
                                  const LogDecay& log_decay) {
  std::vector<float> maps;
  {
    ComputeTimer timer;
    // The last rank's map enters no other rank's state: an identity stands in for it.
    maps = s.last() ? std::vector<float>(size_t(s.B * s.H * s.item()), 0.0f) : shard_map(s, k, v, log_decay);
  }
  std::vector<float> entering(maps.size(), 0.0f);
  const ItemType type(ItemType::Kind::diagonal, s.K, s.V);
  exclusive_scan(maps.data(), entering.data(), mpi_count(s.B * s.H, "the heads"), type.type(), diagonal_op(), comm);
  if (s.rank == 0) return {};
  return states_of(s, entering);
}

}  // namespace

void decayed_attention_forward(MPI_Comm comm, TensorView out, ConstTensorView q, ConstTensorView k, ConstTensorView v,
                               ConstTensorView g, const DecayedAttentionOptions& options) {
  const char* op = "decayed_attention_forward";
  ErrorsReturn guard(comm);
  const Shard s = agree_on(comm, op, q, k, v, g, options, [&] {
    check_view(op, "out", out);
    static const char* axes[] = {"q's batch", "q's sequence", "q's heads", "v's head dim"};
    for (int a = 0; a < 4; ++a) check_extent(op, "out", out, a, a < 3 ? q.extent[a] : v.dim(), axes[a]);
  });
  const std::vector<float> initial = entering_state(comm, s, k, v, LogDecay{options, g});
  or_abort(comm, op, [&] {
    if (s.n == 0) return;
    ComputeTimer timer;
    linattn::decayed_attention_forward(out, q, k, v, g, options, initial);
  });
}

void decayed_attention_backward(MPI_Comm comm, TensorView dq, TensorView dk, TensorView dv, TensorView dg,
                                ConstTensorView dout, ConstTensorView q, ConstTensorView k, ConstTensorView v,
                                ConstTensorView g, const DecayedAttentionOptions& options) {
  const char* op = "decayed_attention_backward";
  ErrorsReturn guard(comm);
  const Shard s = agree_on(comm, op, q, k, v, g, options, [&] {
    static const char* axes[] = {"batch", "sequence", "heads", "head dim"};
    for (auto [name, x, like, like_name] : {std::tuple{"dq", ConstTensorView(dq), q, "q's "},
                                            {"dk", ConstTensorView(dk), k, "k's "},
                                            {"dv", ConstTensorView(dv), v, "v's "},
                                            {"dout", dout, v, "v's "}}) {
      check_view(op, name, x);
      for (int a = 0; a < 4; ++a)
        check_extent(op, name, x, a, like.extent[a], (std::string(like_name) + axes[a]).c_str());
    }
    if (g.data != nullptr)
      for (int a = 0; a < 4; ++a) check_extent(op, "dg", dg, a, g.extent[a], (std::string("g's ") + axes[a]).c_str());
  });
  const LogDecay log_decay{options, g};
  const std::vector<float> initial = entering_state(comm, s, k, v, log_decay);
  // The gradient reaching this shard's final state from the later shards: the reverse Exscan of the
  // maps G ↦ diag(a_r) G + ∂L_r/∂S_in (rank 0's is never read: nothing precedes it).
  std::vector<float> maps;
  {
    ComputeTimer timer;
    maps = s.rank == 0 ? std::vector<float>(size_t(s.B * s.H * s.item()), 0.0f)
                       : shard_gradient_map(s, q, dout, log_decay);
  }
  std::vector<float> later(maps.size(), 0.0f);
  const ItemType type(ItemType::Kind::diagonal, s.K, s.V);
  exclusive_scan(maps.data(), later.data(), mpi_count(s.B * s.H, "the heads"), type.type(), diagonal_op(),
                 reversed(comm));
  const std::vector<float> dfinal = s.last() ? std::vector<float>() : states_of(s, later);
  or_abort(comm, op, [&] {
    if (s.n == 0) return;
    ComputeTimer timer;
    linattn::decayed_attention_backward(dq, dk, dv, dg, {}, dout, dfinal, q, k, v, g, options, initial);
  });
}

}  // namespace linattn::distributed
