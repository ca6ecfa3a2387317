// Distributed decayed linear attention (include/linattn/distributed/scan.hpp): one Exscan of the
// shards' affine maps S ↦ diag(a_r) S + S_r, the reverse Exscan of (a_r, ∂L_r/∂S_in) for the backward.
#include <bit>
#include <cmath>
#include <optional>
#include <vector>

#include "distributed/agreement.hpp"
#include "distributed/checks.hpp"
#include "distributed/mpi_calls.hpp"
#include "distributed/scan_shard.hpp"
#include "kernels/gemm.hpp"
#include "kernels/pack.hpp"
#include "linattn/distributed/scan.hpp"

namespace linattn::distributed {

namespace {

using namespace detail;

constexpr int64_t kRows = 128;  // tokens per tile of the local passes (fixed: a fixed order of sums)

int64_t gate_cols(Decay decay, int64_t K) { return decay == Decay::token ? 1 : decay == Decay::key ? K : 0; }

ScanShard agree_on(MPI_Comm comm, const char* op, ConstTensorView q, ConstTensorView k, ConstTensorView v,
                   ConstTensorView g, const DecayedAttentionOptions& options, const std::function<void()>& more) {
  Signature s;
  run_local_checks(s, [&] {
    check_qkv(op, q, k, v);
    check_gate(op, g, q, v, gate_cols(options.decay, q.dim()), options.decay == Decay::token,
               decay_name(options.decay) + " has no gate tensor");
    if (options.decay == Decay::head && int64_t(options.g_gamma.size()) != v.heads())
      fail(op, "options.g_gamma has " + std::to_string(options.g_gamma.size()) + " entries, expected " +
                   std::to_string(v.heads()) + " (" + value_heads_name(q, v) + ")");
    check_scan_options(op, options.cu_seqlens.size(), options.chunk_size, options.scale);
    more();
  });
  // Unsigned: the hash wraps (a signed product overflowed, undefined, from four entries on).
  uint64_t gamma_hash = 0;
  for (float x : options.g_gamma) gamma_hash = gamma_hash * 1000003u + std::bit_cast<uint32_t>(x);
  s.shared("decay", static_cast<int64_t>(options.decay));
  s.shared("options.g_gamma (hash)", std::bit_cast<int64_t>(gamma_hash));
  return agree_on_shard(comm, op, s, ItemType::Kind::diagonal, q, v, options.scale);
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

// items [B·H] × [a | Σ_t diag(w_t) x_t y_tᵀ], a = exp(G_n), G_t = Σ_{u ≤ t} g_u (fp64 running sums), one
// per value head h, whose x rows are those of q/k head h / group (grouped value heads):
//   forward (scale none): x = k, y = v, w_t = exp(G_n − G_t), the shard's map S ↦ diag(a) S + S_r;
//   backward: x = q, y = dout, w_t = scale·exp(G_t), D = ∂L_r/∂S_in of the map G ↦ diag(a) G + D.
std::vector<float> shard_sums(const ScanShard& s, ConstTensorView x, ConstTensorView y, const LogDecay& log_decay,
                              std::optional<float> scale) {
  std::vector<float> items(size_t(s.items_floats()), 0.0f);
  const int64_t K = s.K, V = s.V;
  const float factor = scale.value_or(1.0f);
#pragma omp parallel for schedule(static)
  for (int64_t bh = 0; bh < s.B * s.H; ++bh) {
    const int64_t b = bh / s.H, h = bh % s.H;
    float* a = items.data() + bh * s.item();
    float* S = a + K;
    std::vector<double> total(size_t(K), 0.0), G(size_t(K), 0.0);
    for (int64_t t = 0; t < s.n; ++t)
      for (int64_t d = 0; d < K; ++d) total[d] += log_decay(b, t, h, d);
    std::vector<float> xw(size_t(kRows * K)), yt(size_t(kRows * V));
    for (int64_t t0 = 0; t0 < s.n; t0 += kRows) {
      const int64_t T = std::min(kRows, s.n - t0);
      kernels::pack_rows({yt.data(), V, T, V}, kernels::head_rows(y, b, h), t0, T);
      for (int64_t t = 0; t < T; ++t)
        for (int64_t d = 0; d < K; ++d) {
          G[d] += log_decay(b, t0 + t, h, d);
          xw[t * K + d] = factor * x(b, t0 + t, h / s.group, d) * float(std::exp(scale ? G[d] : total[d] - G[d]));
        }
      // S += xwᵀ y: [K, T] · [T, V].
      kernels::gemm({S, V, K, V}, kernels::transposed(xw.data(), K), {yt.data(), V, T, V}, {.accumulate = true});
    }
    for (int64_t d = 0; d < K; ++d) a[d] = float(std::exp(total[d]));
  }
  return items;
}

// The state entering this shard (one Exscan of the shard maps; empty on rank 0: the zero state).
std::vector<float> entering_state(MPI_Comm comm, const ScanShard& s, ConstTensorView k, ConstTensorView v,
                                  const LogDecay& log_decay) {
  std::vector<float> maps;
  {
    ComputeTimer timer;
    // The last rank's map enters no other rank's state: an identity stands in for it.
    maps = s.last() ? std::vector<float>(size_t(s.items_floats()), 0.0f) : shard_sums(s, k, v, log_decay, {});
  }
  const std::vector<float> entering = s.exscan(comm, maps);
  if (s.rank == 0) return {};
  return s.states_of(entering);
}

}  // namespace

void decayed_attention_forward(MPI_Comm comm, TensorView out, ConstTensorView q, ConstTensorView k, ConstTensorView v,
                               ConstTensorView g, const DecayedAttentionOptions& options) {
  const char* op = "decayed_attention_forward";
  ErrorsReturn guard(comm);
  const ScanShard s = agree_on(comm, op, q, k, v, g, options, [&] {
    check_view(op, "out", out);
    const char* axes[] = {"q's batch", "q's sequence", value_heads_name(q, v), "v's head dim"};
    for (int a = 0; a < 4; ++a) check_extent(op, "out", out, a, v.extent[a], axes[a]);
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
  const ScanShard s = agree_on(comm, op, q, k, v, g, options, [&] {
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
    const float scale = options.scale ? *options.scale : 1.0f / std::sqrt(float(s.K));
    maps = s.rank == 0 ? std::vector<float>(size_t(s.items_floats()), 0.0f) : shard_sums(s, q, dout, log_decay, scale);
  }
  const std::vector<float> later = s.exscan(comm, maps, true);
  const std::vector<float> dfinal = s.last() ? std::vector<float>() : s.states_of(later);
  or_abort(comm, op, [&] {
    if (s.n == 0) return;
    ComputeTimer timer;
    linattn::decayed_attention_backward(dq, dk, dv, dg, {}, dout, dfinal, q, k, v, g, options, initial);
  });
}

}  // namespace linattn::distributed
