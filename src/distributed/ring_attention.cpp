// Ring attention over MPI, forward and backward (include/linattn/distributed/ring.hpp). Each ring
// step is a handful of calls to the single-process softmax operator, one per visible pair of
// (query segment, key segment), merged with softmax_attention_merge; the communication is one
// MPI_Sendrecv per step of the contiguous k/v buffer (and, in the backward, of the dk/dv buffer).
//
// Rank r's step s works on the k/v shard of origin o = (r − s) mod P: at step 0 its own, then each
// step it sends the shard it holds to r + 1 and receives o − 1's from r − 1. Every order of
// summation is fixed by (r, s) alone, so the results are bitwise reproducible.
#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <functional>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/validate.hpp"
#include "distributed/agreement.hpp"
#include "distributed/mpi_calls.hpp"
#include "distributed/ring_layout.hpp"
#include "linattn/distributed/ring.hpp"
#include "linattn/softmax_attention.hpp"

namespace linattn::distributed {
namespace {

using detail::Segment;
using detail::Visibility;
constexpr int kTagKeys = 1601, kTagGradients = 1602;
constexpr float kInf = std::numeric_limits<float>::infinity();

// A valid view of [B, n, H, d], or, with n = 0, one whose other extents are positive (its data unused).
void check_shard(const char* op, const char* name, ConstTensorView x, std::array<int64_t, 4> want,
                 const char* because) {
  const char* axes[4] = {"batch", "sequence", "heads", "dim"};
  for (int axis = 0; axis < 4; ++axis)
    if (x.extent[size_t(axis)] != want[size_t(axis)])
      linattn::detail::fail_with(op, name, "'s ", axes[axis], " is ", x.extent[size_t(axis)], ", expected ",
                                 want[size_t(axis)], " (", because, ")");
  if (want[1] > 0) linattn::detail::check_view(op, name, x);
}

// The local checks of both directions: q, k, v agree, the options are sound, lse has B·H·n_r.
void check_inputs(const char* op, ConstTensorView q, ConstTensorView k, ConstTensorView v, size_t lse_size,
                  const RingAttentionOptions& options) {
  const int64_t B = q.batch(), n = q.seq(), H = q.heads(), D = q.dim(), E = v.dim();
  if (B < 1 || n < 0 || H < 1 || D < 1)
    linattn::detail::fail_with(op, "q's extents are [", B, ", ", n, ", ", H, ", ", D,
                               "], expected positive batch, heads and dim and a sequence length ≥ 0");
  if (E < 1) linattn::detail::fail_with(op, "v's dim is ", E, ", expected at least 1");
  check_shard(op, "q", q, {B, n, H, D}, "q's own extents");
  check_shard(op, "k", k, {B, n, H, D}, "q's: a rank's k and q cover the same positions");
  check_shard(op, "v", v, {B, n, H, E}, "k's");
  linattn::detail::check_scale(op, options.scale);
  linattn::detail::check_size(op, "lse", int64_t(lse_size), B * H * n, "[B, H, n_r]");
  if (!options.key_lengths.empty() && int64_t(options.key_lengths.size()) != B)
    linattn::detail::fail_with(op, "options.key_lengths has ", options.key_lengths.size(), " values, expected ", B,
                               " (q's batch)");
  for (size_t b = 0; b < options.key_lengths.size(); ++b)
    if (options.key_lengths[b] < 0)
      linattn::detail::fail_with(op, "options.key_lengths[", b, "] is ", options.key_lengths[b], ", expected ≥ 0");
  if (options.layout == RingLayout::balanced && (options.early_length < -1 || options.early_length > n))
    linattn::detail::fail_with(op, "options.early_length is ", options.early_length, ", expected −1 or in [0, ", n,
                               "] (this rank's shard length)");
}

// FNV-1a over the key lengths: one shared signature field stands for the whole vector.
int64_t key_lengths_hash(std::span<const int64_t> key_lengths) {
  uint64_t h = 1469598103934665603ull;
  for (int64_t x : key_lengths) {
    h ^= uint64_t(x);
    h *= 1099511628211ull;
  }
  return int64_t(h);
}

// Everything a ring pass needs once every rank has agreed.
struct Ring {
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0, ranks = 1;
  int64_t B = 0, H = 0, D = 0, E = 0;
  std::vector<int64_t> lengths;                // every rank's n_r
  std::vector<std::vector<Segment>> segments;  // every rank's segments
  RingAttentionOptions options;

  int origin(int step) const { return (rank - step + ranks) % ranks; }
  int next() const { return (rank + 1) % ranks; }
  int previous() const { return (rank - 1 + ranks) % ranks; }
  int64_t key_floats(int o) const { return B * lengths[size_t(o)] * H * D; }
  int64_t shard_floats(int o) const { return B * lengths[size_t(o)] * H * (D + E); }
  int64_t max_shard_floats() const {
    int64_t m = 0;
    for (int o = 0; o < ranks; ++o) m = std::max(m, shard_floats(o));
    return m;
  }
  // k and v of origin o inside a ring buffer: [B, n_o, H, D] then [B, n_o, H, E], contiguous.
  TensorView keys(float* buffer, int o) const { return bnhd(buffer, B, lengths[size_t(o)], H, D); }
  TensorView values(float* buffer, int o) const { return bnhd(buffer + key_floats(o), B, lengths[size_t(o)], H, E); }
  // The single-process operator's options for query segment q against key segment k.
  SoftmaxAttentionOptions block_options(Visibility seen, std::vector<int64_t>& lengths_buffer, const Segment& k) const {
    SoftmaxAttentionOptions o;
    o.scale = options.scale ? *options.scale : float(1.0 / std::sqrt(double(D)));
    o.causal = seen == Visibility::diagonal;  // same positions, Nq = Nk: the plain causal triangle
    if (!options.key_lengths.empty()) {
      lengths_buffer = detail::segment_key_lengths(options.key_lengths, k);
      o.key_lengths = lengths_buffer;
    }
    return o;
  }
  // Sends the first send_floats of `send` to the next rank and receives recv_floats from the previous.
  void pass(const float* send, int64_t send_floats, float* recv, int64_t recv_floats, int tag) const {
    detail::sendrecv(send, detail::mpi_count(send_floats, "a ring message"), next(), recv,
                     detail::mpi_count(recv_floats, "a ring message"), previous(), MPI_FLOAT, tag, comm);
  }
  // The same exchange for k/v, left in flight: the shard step computes on (`held`) goes on to the next
  // rank, and the next step's arrives in `arriving`, while the step's blocks run (they only read it).
  // Nothing after the last step.
  void start_keys_pass(std::optional<detail::Transfer>& transfer, int step, const float* held, float* arriving) const {
    if (step + 1 >= ranks) return;
    transfer.emplace(held, detail::mpi_count(shard_floats(origin(step)), "a ring message"), next(), arriving,
                     detail::mpi_count(shard_floats(origin(step + 1)), "a ring message"), previous(), MPI_FLOAT,
                     kTagKeys, comm);
  }
  // This rank's k and v into the ring buffer `held`, where the first step reads them.
  void hold_own(float* held, ConstTensorView k, ConstTensorView v) const {
    if (k.seq() == 0) return;  // an empty shard: its views may hold no data
    detail::copy_view(keys(held, rank), k);
    detail::copy_view(values(held, rank), v);
  }
  // block(i, qs, ks, options) for each of this rank's query segments i (qs) and each key segment ks of
  // origin o that it sees, with the single-process options of the pair; the transfer in flight (if
  // any) progresses between blocks.
  template <class Block>
  void for_each_block(int o, std::optional<detail::Transfer>& transfer, std::vector<int64_t>& lengths_buffer,
                      Block&& block) const {
    const std::vector<Segment>& mine = segments[size_t(rank)];
    for (size_t i = 0; i < mine.size(); ++i)
      for (const Segment& ks : segments[size_t(o)]) {
        const Visibility seen = detail::visibility(options.causal, mine[i], ks);
        if (seen == Visibility::none) continue;
        if (transfer) transfer->progress();
        block(i, mine[i], ks, block_options(seen, lengths_buffer, ks));
      }
  }
};

// The agreement (one Allgather) and the ring it describes; throws on every rank alike.
Ring agree_on_ring(const char* op, MPI_Comm comm, ConstTensorView q, ConstTensorView k, ConstTensorView v,
                   size_t lse_size, const RingAttentionOptions& options, const std::function<void()>& more_checks) {
  detail::Signature s;
  s.shared("batch", q.batch());
  s.shared("heads", q.heads());
  s.shared("q/k head dim", q.dim());
  s.shared("value dim", v.dim());
  s.shared("options.causal", options.causal ? 1 : 0);
  s.shared("options.layout", int64_t(options.layout));
  s.shared("options.scale (its bits; −1: default)",
           options.scale ? int64_t(std::bit_cast<uint32_t>(*options.scale)) : -1);
  s.shared("options.key_lengths' size", int64_t(options.key_lengths.size()));
  s.shared("options.key_lengths' hash", key_lengths_hash(options.key_lengths));
  s.own("shard length", q.seq());
  const int64_t early = options.early_length < 0 ? (q.seq() + 1) / 2 : options.early_length;
  s.own("early length", early);
  detail::run_local_checks(s, [&] {
    check_inputs(op, q, k, v, lse_size, options);
    more_checks();
  });
  const detail::Agreement table = detail::agree(comm, op, s);

  Ring ring;
  ring.comm = comm;
  ring.rank = detail::comm_rank(comm);
  ring.ranks = table.ranks();
  ring.B = q.batch(), ring.H = q.heads(), ring.D = q.dim(), ring.E = v.dim();
  ring.options = options;
  std::vector<int64_t> early_lengths;
  int64_t total = 0;
  for (int r = 0; r < ring.ranks; ++r) {
    ring.lengths.push_back(table.value(r, 9));
    early_lengths.push_back(table.value(r, 10));
    total += ring.lengths.back();
  }
  // The same values on every rank (agreed above), so every rank reaches this verdict alike.
  for (size_t b = 0; b < options.key_lengths.size(); ++b)
    if (options.key_lengths[b] > total)
      linattn::detail::fail_with(op, "options.key_lengths[", b, "] is ", options.key_lengths[b], ", expected at most ",
                                 total, " (the sequence length summed over ranks)");
  // One ring message is a whole k/v shard: checked here, where every rank sees every shard's size.
  for (int r = 0; r < ring.ranks; ++r) detail::mpi_count(ring.shard_floats(r), "a k/v shard (B·n_r·H·(D + E))");
  ring.segments = detail::ring_segments(options.layout, ring.lengths, early_lengths);
  return ring;
}

}  // namespace

void ring_attention_forward(MPI_Comm comm, TensorView out, std::span<float> lse, ConstTensorView q, ConstTensorView k,
                            ConstTensorView v, const RingAttentionOptions& options) {
  const char* op = "ring_attention_forward";
  detail::ErrorsReturn errors_return(comm);
  const Ring ring = agree_on_ring(op, comm, q, k, v, lse.size(), options, [&] {
    check_shard(op, "out", out, {q.batch(), q.seq(), q.heads(), v.dim()}, "q's batch, sequence and heads, v's dim");
    if (q.seq() > 0) {
      using linattn::detail::region;
      linattn::detail::check_outputs(op, {region("out", out), region("lse", lse)},
                                     {region("q", q), region("k", k), region("v", v)});
    }
  });
  const int64_t n = q.seq(), rows = ring.B * ring.H;
  const std::vector<Segment>& mine = ring.segments[size_t(ring.rank)];

  // Per query segment: its lse [B, H, length] and whether a block has written it yet; the scratch
  // block result that is merged in.
  std::vector<std::vector<float>> seg_lse(mine.size());
  std::vector<bool> written(mine.size(), false);
  int64_t longest = 0;
  for (size_t i = 0; i < mine.size(); ++i) {
    seg_lse[i].resize(size_t(rows * mine[i].length));
    longest = std::max(longest, mine[i].length);
  }
  std::vector<float> block_out(size_t(rows * longest * ring.E)), block_lse(size_t(rows * longest));
  std::vector<float> current(size_t(ring.max_shard_floats())), incoming(current.size());
  std::vector<int64_t> lengths_buffer;

  float* held = current.data();
  float* arriving = incoming.data();
  ring.hold_own(held, k, v);
  for (int step = 0; step < ring.ranks; ++step) {
    const int o = ring.origin(step);
    // The next step's shard arrives while this step's blocks run.
    std::optional<detail::Transfer> transfer;
    ring.start_keys_pass(transfer, step, held, arriving);
    {
      detail::ComputeTimer timer;
      detail::or_abort(comm, op, [&] {
        const TensorView ko = ring.keys(held, o), vo = ring.values(held, o);
        ring.for_each_block(
            o, transfer, lengths_buffer,
            [&](size_t i, const Segment& qs, const Segment& ks, const SoftmaxAttentionOptions& block) {
              const TensorView out_rows = detail::seq_slice(out, qs.local, qs.length);
              const ConstTensorView q_rows = detail::seq_slice(q, qs.local, qs.length),
                                    k_rows = detail::seq_slice(ConstTensorView(ko), ks.local, ks.length),
                                    v_rows = detail::seq_slice(ConstTensorView(vo), ks.local, ks.length);
              if (!written[i]) {  // the first block writes the result directly
                softmax_attention_forward(out_rows, seg_lse[i], q_rows, k_rows, v_rows, block);
                written[i] = true;
                return;
              }
              const TensorView partial = bnhd(block_out.data(), ring.B, qs.length, ring.H, ring.E);
              const std::span<float> partial_lse(block_lse.data(), size_t(rows * qs.length));
              softmax_attention_forward(partial, partial_lse, q_rows, k_rows, v_rows, block);
              softmax_attention_merge(out_rows, seg_lse[i], partial, partial_lse);
            });
      });
    }
    if (transfer) {
      transfer->wait();
      std::swap(held, arriving);
    }
  }
  // Every non-empty query segment sees at least its own block, so all are written; the fill keeps
  // the operator's convention (0, −∞) should a segment see nothing.
  for (size_t i = 0; i < mine.size(); ++i) {
    if (!written[i]) {
      detail::fill_view(detail::seq_slice(out, mine[i].local, mine[i].length), 0.0f);
      std::fill(seg_lse[i].begin(), seg_lse[i].end(), -kInf);
    }
    detail::scatter_lse(lse, seg_lse[i], rows, n, mine[i].local, mine[i].length);
  }
}

void ring_attention_backward(MPI_Comm comm, TensorView dq, TensorView dk, TensorView dv, ConstTensorView dout,
                             ConstTensorView q, ConstTensorView k, ConstTensorView v, ConstTensorView out,
                             std::span<const float> lse, const RingAttentionOptions& options) {
  const char* op = "ring_attention_backward";
  detail::ErrorsReturn errors_return(comm);
  const Ring ring = agree_on_ring(op, comm, q, k, v, lse.size(), options, [&] {
    const int64_t B = q.batch(), n = q.seq(), H = q.heads();
    check_shard(op, "out", out, {B, n, H, v.dim()}, "q's batch, sequence and heads, v's dim");
    check_shard(op, "dout", dout, {B, n, H, v.dim()}, "q's batch, sequence and heads, v's dim");
    check_shard(op, "dq", dq, q.extent, "q's");
    check_shard(op, "dk", dk, k.extent, "k's");
    check_shard(op, "dv", dv, v.extent, "v's");
    if (n > 0) {
      using linattn::detail::region;
      linattn::detail::check_outputs(op, {region("dq", dq), region("dk", dk), region("dv", dv)},
                                     {region("q", q), region("k", k), region("v", v), region("out", out),
                                      region("dout", dout), region("lse", lse)});
    }
  });
  const int64_t n = q.seq(), rows = ring.B * ring.H;
  const std::vector<Segment>& mine = ring.segments[size_t(ring.rank)];

  std::vector<std::vector<float>> seg_lse(mine.size());
  std::vector<bool> written(mine.size(), false);
  int64_t longest = 0, longest_key = 0;
  for (size_t i = 0; i < mine.size(); ++i) {
    seg_lse[i].resize(size_t(rows * mine[i].length));
    detail::gather_lse(seg_lse[i], lse, rows, n, mine[i].local, mine[i].length);
    longest = std::max(longest, mine[i].length);
  }
  for (const auto& segments : ring.segments)
    for (const Segment& s : segments) longest_key = std::max(longest_key, s.length);
  // Scratch gradients of one block: dq of a query segment, dk and dv of a key segment.
  std::vector<float> block_dq(size_t(rows * longest * ring.D)), block_dk(size_t(rows * longest_key * ring.D)),
      block_dv(size_t(rows * longest_key * ring.E));
  // k/v and their dk/dv accumulators travel together; the accumulators start at zero at their owner.
  std::vector<float> kv_a(size_t(ring.max_shard_floats())), kv_b(kv_a.size()), grad_a(kv_a.size(), 0.0f),
      grad_b(kv_a.size());
  std::vector<int64_t> lengths_buffer;
  float *held = kv_a.data(), *arriving = kv_b.data(), *grads = grad_a.data(), *grads_arriving = grad_b.data();
  ring.hold_own(held, k, v);
  for (int step = 0; step < ring.ranks; ++step) {
    const int o = ring.origin(step);
    // k/v go on while the blocks run; their accumulators only after (the blocks write them).
    std::optional<detail::Transfer> transfer;
    ring.start_keys_pass(transfer, step, held, arriving);
    {
      detail::ComputeTimer timer;
      detail::or_abort(comm, op, [&] {
        const TensorView ko = ring.keys(held, o), vo = ring.values(held, o);
        const TensorView dko = ring.keys(grads, o), dvo = ring.values(grads, o);
        ring.for_each_block(o, transfer, lengths_buffer,
                            [&](size_t i, const Segment& qs, const Segment& ks, const SoftmaxAttentionOptions& block) {
                              const TensorView dq_rows = detail::seq_slice(dq, qs.local, qs.length);
                              const TensorView dq_block =
                                  written[i] ? bnhd(block_dq.data(), ring.B, qs.length, ring.H, ring.D) : dq_rows;
                              const TensorView dk_block = bnhd(block_dk.data(), ring.B, ks.length, ring.H, ring.D);
                              const TensorView dv_block = bnhd(block_dv.data(), ring.B, ks.length, ring.H, ring.E);
                              // With the whole row's lse and out, each block's p = exp(s − lse) and ds = p ∘ (dp −
                              // rowsum(dO ∘ O)) are the full softmax's, so the block's gradients are exact parts of the
                              // total.
                              softmax_attention_backward(
                                  dq_block, dk_block, dv_block, detail::seq_slice(dout, qs.local, qs.length),
                                  detail::seq_slice(q, qs.local, qs.length),
                                  detail::seq_slice(ConstTensorView(ko), ks.local, ks.length),
                                  detail::seq_slice(ConstTensorView(vo), ks.local, ks.length),
                                  detail::seq_slice(out, qs.local, qs.length), seg_lse[i], block);
                              if (written[i]) detail::add_view(dq_rows, dq_block);
                              written[i] = true;
                              detail::add_view(detail::seq_slice(dko, ks.local, ks.length), dk_block);
                              detail::add_view(detail::seq_slice(dvo, ks.local, ks.length), dv_block);
                            });
      });
    }
    if (ring.ranks == 1) break;
    if (transfer) {
      transfer->wait();
      std::swap(held, arriving);
    }
    // The accumulators move on every step, the last one included: after P passes each is home.
    ring.pass(grads, ring.shard_floats(o), grads_arriving, ring.shard_floats(ring.origin(step + 1)), kTagGradients);
    std::swap(grads, grads_arriving);
  }
  for (size_t i = 0; i < mine.size(); ++i) {
    if (!written[i]) detail::fill_view(detail::seq_slice(dq, mine[i].local, mine[i].length), 0.0f);
  }
  if (n > 0) {
    detail::copy_view(dk, ring.keys(grads, ring.rank));
    detail::copy_view(dv, ring.values(grads, ring.rank));
  }
}

}  // namespace linattn::distributed
