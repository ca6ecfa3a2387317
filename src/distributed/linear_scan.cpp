// Distributed linear attention (include/linattn/distributed/scan.hpp): the causal mode by one
// Exscan of the shards' (S, z) sums, the non-causal mode by one Allreduce of them.
#include <algorithm>
#include <bit>
#include <cmath>
#include <functional>
#include <vector>

#include "core/views.hpp"
#include "distributed/agreement.hpp"
#include "distributed/checks.hpp"
#include "distributed/linear_local.hpp"
#include "distributed/mpi_calls.hpp"
#include "distributed/scan_ops.hpp"
#include "linattn/distributed/scan.hpp"
#include "linattn/recurrent_state.hpp"

namespace linattn::distributed {

namespace {

using namespace detail;
using linattn::detail::seq_slice;

struct Shard {
  int64_t B = 0, nq = 0, nk = 0, H = 0, D = 0, M = 0, E = 0;
  int rank = 0, ranks = 1;
  // The longest shard of the ranks before this one (0 on rank 0).
  int64_t longest_earlier = 0;
  int64_t items() const { return B * H * state_item_floats(M, E); }
  bool last() const { return rank == ranks - 1; }
};

// The local checks of q, k, v and the options; the output views (named) must be shaped like `like`.
// Not boundary::check_attention_inputs: a rank's shard may hold no tokens (extents of 0 are valid here).
void check_inputs(const char* op, ConstTensorView q, ConstTensorView k, ConstTensorView v,
                  const LinearAttentionOptions& options) {
  check_view(op, "q", q);
  check_view(op, "k", k);
  check_view(op, "v", v);
  check_extent(op, "k", k, 0, q.batch(), "q's batch");
  check_extent(op, "k", k, 2, q.heads(), "q's heads");
  check_extent(op, "k", k, 3, q.dim(), "q's head dim");
  check_extent(op, "v", v, 0, q.batch(), "q's batch");
  check_extent(op, "v", v, 1, k.seq(), "k's sequence");
  check_extent(op, "v", v, 2, q.heads(), "q's heads");
  if (options.causal) check_extent(op, "k", k, 1, q.seq(), "q's sequence: the causal mode needs Nq == Nk");
  if (!options.feature_map) fail(op, "options.feature_map is null, expected a feature map");
  if (!options.key_lengths.empty())
    fail(op, "options.key_lengths has " + std::to_string(options.key_lengths.size()) +
                 " entries, expected none (a shard holds whole keys; key lengths are not distributed)");
  if (!options.cu_seqlens.empty())
    fail(op, "options.cu_seqlens is given, expected none (packed sequences are not distributed)");
  if (options.chunk_size < 1)
    fail(op, "options.chunk_size is " + std::to_string(options.chunk_size) + ", expected ≥ 1");
  if (!std::isfinite(options.eps) || options.eps < 0)
    fail(op, "options.eps is " + std::to_string(options.eps) + ", expected finite and ≥ 0");
}

void check_like(const char* op, const char* name, ConstTensorView x, const char* like_name, ConstTensorView like) {
  check_view(op, name, x);
  const std::string want = std::string(like_name) + "'s ";
  static const char* axes[] = {"batch", "sequence", "heads", "head dim"};
  for (int a = 0; a < 4; ++a) check_extent(op, name, x, a, like.extent[a], (want + axes[a]).c_str());
}

// out (or dout): [B, Nq, H, E], q's batch, sequence and heads and v's head dim.
void check_output_shape(const char* op, const char* name, ConstTensorView x, ConstTensorView q, ConstTensorView v) {
  check_view(op, name, x);
  check_extent(op, name, x, 0, q.batch(), "q's batch");
  check_extent(op, name, x, 1, q.seq(), "q's sequence");
  check_extent(op, name, x, 2, q.heads(), "q's heads");
  check_extent(op, name, x, 3, v.dim(), "v's head dim");
}

// The agreement of every call: the checks run by `checks`, and the fields every rank must share.
Shard agree_on(MPI_Comm comm, const char* op, ConstTensorView q, ConstTensorView k, ConstTensorView v,
               const LinearAttentionOptions& options, const std::function<void()>& checks) {
  Signature s;
  run_local_checks(s, [&] {
    check_inputs(op, q, k, v, options);
    checks();
  });
  const bool ok = s.failure().empty();
  s.shared("causal", options.causal ? 1 : 0);
  s.shared("options.normalize", options.normalize ? 1 : 0);
  s.shared("batch", q.batch());
  s.shared("heads", q.heads());
  s.shared("head dim", q.dim());
  s.shared("value dim", v.dim());
  s.shared("feature map (name hash)", ok ? name_hash(options.feature_map->name()) : 0);
  s.shared("feature dim", ok ? options.feature_map->feature_dim(q.dim()) : 0);
  s.shared("options.eps (bits)", std::bit_cast<int32_t>(options.eps));
  const int query_length = s.size();
  s.own("query shard length", q.seq());
  s.own("key shard length", k.seq());
  const Agreement all = agree(comm, op, s);
  Shard shard;
  shard.B = q.batch();
  shard.nq = q.seq();
  shard.nk = k.seq();
  shard.H = q.heads();
  shard.D = q.dim();
  shard.E = v.dim();
  shard.M = options.feature_map->feature_dim(q.dim());
  shard.rank = comm_rank(comm);
  shard.ranks = comm_size(comm);
  for (int r = 0; r < shard.rank; ++r)
    shard.longest_earlier = std::max(shard.longest_earlier, all.value(r, query_length));
  return shard;
}

// This shard's (S, z) sums; zero for an empty shard, and when skip (a contribution nobody reads).
std::vector<float> local_sums(const Shard& s, ConstTensorView k, ConstTensorView v,
                              const LinearAttentionOptions& options, bool skip) {
  std::vector<float> items(size_t(s.items()), 0.0f);
  if (s.nk > 0 && !skip) {
    ComputeTimer timer;
    shard_state_sums(*options.feature_map, k, v, s.M, items.data());
  }
  return items;
}

// The causal state entering this shard: the Exscan of the sums (zero on rank 0). The last rank's
// sums enter no other rank's state, so it skips them.
std::vector<float> entering_state(MPI_Comm comm, const Shard& s, ConstTensorView k, ConstTensorView v,
                                  const LinearAttentionOptions& options) {
  const std::vector<float> sums = local_sums(s, k, v, options, s.last());
  std::vector<float> state(sums.size(), 0.0f);
  exclusive_scan(sums.data(), state.data(), mpi_count(s.items(), "the (S, z) state"), MPI_FLOAT, add_op(), comm);
  if (s.rank == 0) std::fill(state.begin(), state.end(), 0.0f);
  return state;
}

RecurrentState to_state(const Shard& s, const std::vector<float>& items, const LinearAttentionOptions& options) {
  RecurrentState state(s.B, s.H, s.M, s.E, options.feature_map->name());
  const int64_t item = state_item_floats(s.M, s.E);
  for (int64_t bh = 0; bh < s.B * s.H; ++bh) {
    const float* src = items.data() + bh * item;
    std::copy_n(src, s.M * s.E, state.S(bh / s.H, bh % s.H));
    std::copy_n(src + s.M * s.E, s.M, state.z(bh / s.H, bh % s.H));
  }
  return state;
}

std::vector<float> from_state(const Shard& s, const RecurrentState& state) {
  const int64_t item = state_item_floats(s.M, s.E);
  std::vector<float> items(size_t(s.items()));
  for (int64_t bh = 0; bh < s.B * s.H; ++bh) {
    float* dst = items.data() + bh * item;
    std::copy_n(state.S(bh / s.H, bh % s.H), s.M * s.E, dst);
    std::copy_n(state.z(bh / s.H, bh % s.H), s.M, dst + s.M * s.E);
  }
  return items;
}

// The causal forward of the last rank, which no later rank waits for: it runs its first `prefix`
// tokens from the zero state while the earlier ranks form their sums, then takes the entering state
// from the scan, goes on from it over the rest, and finishes the first tokens with it
// (finish_from_state). Deterministic: prefix depends only on the shard lengths.
void last_rank_forward(MPI_Comm comm, const char* op, const Shard& s, int64_t prefix, TensorView out, ConstTensorView q,
                       ConstTensorView k, ConstTensorView v, const LinearAttentionOptions& options) {
  RecurrentState local(s.B, s.H, s.M, s.E, options.feature_map->name());
  or_abort(comm, op, [&] {
    ComputeTimer timer;
    LinearAttentionOptions raw = options;
    raw.normalize = false;
    causal_linear_attention_forward(seq_slice(out, 0, prefix), seq_slice(q, 0, prefix), seq_slice(k, 0, prefix),
                                    seq_slice(v, 0, prefix), raw, nullptr, &local);
  });
  const std::vector<float> items = entering_state(comm, s, k, v, options);
  or_abort(comm, op, [&] {
    ComputeTimer timer;
    if (prefix < s.nq) {
      // S_in + L_m, z_in + Σ φ(k) over the first tokens: both states are [B, H, M, E] and [B, H, M] alike.
      RecurrentState initial = to_state(s, items, options);
      std::transform(initial.S().begin(), initial.S().end(), local.S().begin(), initial.S().begin(), std::plus<>());
      std::transform(initial.z().begin(), initial.z().end(), local.z().begin(), initial.z().begin(), std::plus<>());
      const int64_t rest = s.nq - prefix;
      causal_linear_attention_forward(seq_slice(out, prefix, rest), seq_slice(q, prefix, rest),
                                      seq_slice(k, prefix, rest), seq_slice(v, prefix, rest), options, &initial);
    }
    finish_from_state(*options.feature_map, seq_slice(out, 0, prefix), seq_slice(q, 0, prefix), seq_slice(k, 0, prefix),
                      items.data(), s.M, options.eps, options.normalize);
  });
}

}  // namespace

std::vector<int64_t> causal_shard_lengths(int64_t N, int ranks, double sums_per_pass, double finish_per_pass) {
  const char* op = "causal_shard_lengths";
  if (N < 0) fail(op, "N is " + std::to_string(N) + ", expected ≥ 0 (the sequence's tokens)");
  if (ranks < 1) fail(op, "ranks is " + std::to_string(ranks) + ", expected ≥ 1");
  if (!(sums_per_pass >= 0 && sums_per_pass <= 1))
    fail(op, "sums_per_pass is " + std::to_string(sums_per_pass) + ", expected in [0, 1]");
  if (!(finish_per_pass >= 0 && finish_per_pass <= 1))
    fail(op, "finish_per_pass is " + std::to_string(finish_per_pass) + ", expected in [0, 1]");
  const double s = sums_per_pass, extra = s - finish_per_pass * s;
  const auto n0 = int64_t(double(N) / (double(ranks) + extra));
  std::vector<int64_t> lengths(size_t(ranks), n0);
  lengths.back() = N - n0 * (ranks - 1);
  return lengths;
}

void linear_attention_forward(MPI_Comm comm, TensorView out, ConstTensorView q, ConstTensorView k, ConstTensorView v,
                              const LinearAttentionOptions& options) {
  const char* op = "linear_attention_forward";
  ErrorsReturn guard(comm);
  const Shard s = agree_on(comm, op, q, k, v, options, [&] { check_output_shape(op, "out", out, q, v); });
  if (options.causal) {
    const int64_t prefix =
        s.last() && s.rank > 0 ? std::min(s.nq, int64_t(kCausalSumsPerPass * double(s.longest_earlier))) : 0;
    if (prefix > 0) return last_rank_forward(comm, op, s, prefix, out, q, k, v, options);
    const std::vector<float> items = entering_state(comm, s, k, v, options);
    or_abort(comm, op, [&] {
      if (s.nq == 0) return;
      ComputeTimer timer;
      const RecurrentState initial = to_state(s, items, options);
      causal_linear_attention_forward(out, q, k, v, options, s.rank > 0 ? &initial : nullptr);
    });
    return;
  }
  const std::vector<float> sums = local_sums(s, k, v, options, false);
  std::vector<float> total(sums.size());
  allreduce(sums.data(), total.data(), mpi_count(s.items(), "the (S, z) state"), MPI_FLOAT, add_op(), comm);
  or_abort(comm, op, [&] {
    if (s.nq == 0) return;
    ComputeTimer timer;
    readout_forward(*options.feature_map, out, q, total.data(), s.M, options.eps, options.normalize);
  });
}

void linear_attention_backward(MPI_Comm comm, TensorView dq, TensorView dk, TensorView dv, ConstTensorView dout,
                               ConstTensorView q, ConstTensorView k, ConstTensorView v,
                               const LinearAttentionOptions& options) {
  const char* op = "linear_attention_backward";
  ErrorsReturn guard(comm);
  const Shard s = agree_on(comm, op, q, k, v, options, [&] {
    check_like(op, "dq", dq, "q", q);
    check_like(op, "dk", dk, "k", k);
    check_like(op, "dv", dv, "v", v);
    check_output_shape(op, "dout", dout, q, v);
  });
  const int count = mpi_count(s.items(), "the (S, z) state");
  if (options.causal) {
    // The state entering the shard again (one Exscan), the local backward from it, then the
    // gradient the later shards send back to this one's sums: the reverse Exscan of their ∂L/∂S_in.
    const std::vector<float> items = entering_state(comm, s, k, v, options);
    std::vector<float> dentering(items.size(), 0.0f);
    or_abort(comm, op, [&] {
      if (s.nq == 0) return;
      ComputeTimer timer;
      const RecurrentState initial = to_state(s, items, options);
      RecurrentState dinitial(s.B, s.H, s.M, s.E, options.feature_map->name());
      causal_linear_attention_backward(dq, dk, dv, dout, q, k, v, options, &initial, &dinitial);
      dentering = from_state(s, dinitial);
    });
    // Rank 0's ∂L/∂S_in is never read (nothing precedes it), like the last rank's sums.
    std::vector<float> later(items.size(), 0.0f);
    exclusive_scan(dentering.data(), later.data(), count, MPI_FLOAT, add_op(), reversed(comm));
    or_abort(comm, op, [&] {
      if (s.last() || s.nk == 0) return;
      ComputeTimer timer;
      state_sums_backward(*options.feature_map, dk, dv, k, v, later.data(), s.M, true);
    });
    return;
  }
  const std::vector<float> sums = local_sums(s, k, v, options, false);
  std::vector<float> total(sums.size()), dlocal(sums.size(), 0.0f), dtotal(sums.size());
  allreduce(sums.data(), total.data(), count, MPI_FLOAT, add_op(), comm);
  or_abort(comm, op, [&] {
    if (s.nq == 0) return;
    ComputeTimer timer;
    readout_backward(*options.feature_map, dq, dlocal.data(), dout, q, total.data(), s.M, options.eps,
                     options.normalize);
  });
  allreduce(dlocal.data(), dtotal.data(), count, MPI_FLOAT, add_op(), comm);
  or_abort(comm, op, [&] {
    if (s.nk == 0) return;
    ComputeTimer timer;
    state_sums_backward(*options.feature_map, dk, dv, k, v, dtotal.data(), s.M, false);
  });
}

}  // namespace linattn::distributed
