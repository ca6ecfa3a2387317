// Ring attention's segments, visibility and buffer copies (ring_layout.hpp).
#include "distributed/ring_layout.hpp"

#include <algorithm>

namespace linattn::distributed::detail {

std::vector<std::vector<Segment>> ring_segments(RingLayout layout, std::span<const int64_t> lengths,
                                                std::span<const int64_t> early_lengths) {
  const int64_t ranks = int64_t(lengths.size());
  std::vector<std::vector<Segment>> segments(static_cast<size_t>(ranks));
  // A segment that continues the previous one in both the shard and the sequence extends it (P = 1's
  // two balanced blocks, or blocks beside an empty one), so such a shard costs one operator call.
  auto add = [&](int64_t rank, int64_t local, int64_t global, int64_t length) {
    if (length == 0) return;
    std::vector<Segment>& mine = segments[size_t(rank)];
    if (!mine.empty() && mine.back().local + mine.back().length == local &&
        mine.back().global + mine.back().length == global) {
      mine.back().length += length;
      return;
    }
    mine.push_back({local, global, length});
  };
  if (layout == RingLayout::contiguous) {
    int64_t global = 0;
    for (int64_t r = 0; r < ranks; ++r) {
      add(r, 0, global, lengths[size_t(r)]);
      global += lengths[size_t(r)];
    }
    return segments;
  }
  // Blocks c_0 … c_{2P−1} in sequence order: c_r is rank r's early block, c_{2P−1−r} its late one.
  std::vector<int64_t> block(size_t(2 * ranks));
  for (int64_t r = 0; r < ranks; ++r) {
    block[size_t(r)] = early_lengths[size_t(r)];
    block[size_t(2 * ranks - 1 - r)] = lengths[size_t(r)] - early_lengths[size_t(r)];
  }
  std::vector<int64_t> begin(size_t(2 * ranks), 0);
  for (size_t i = 1; i < block.size(); ++i) begin[i] = begin[i - 1] + block[i - 1];
  for (int64_t r = 0; r < ranks; ++r) {
    const size_t late = size_t(2 * ranks - 1 - r);
    add(r, 0, begin[size_t(r)], block[size_t(r)]);
    add(r, block[size_t(r)], begin[late], block[late]);
  }
  return segments;
}

Visibility visibility(bool causal, const Segment& q, const Segment& k) {
  if (!causal) return Visibility::full;
  if (q.global == k.global) return Visibility::diagonal;  // the same block of positions
  // Segments never overlap, so k lies wholly before q (every query sees every key) or wholly after.
  return k.global < q.global ? Visibility::full : Visibility::none;
}

std::vector<int64_t> segment_key_lengths(std::span<const int64_t> key_lengths, const Segment& k) {
  std::vector<int64_t> part;
  part.reserve(key_lengths.size());
  for (int64_t length : key_lengths) part.push_back(std::clamp(length - k.global, int64_t(0), k.length));
  return part;
}

namespace {
template <class Op>
void each_row(TensorView dst, ConstTensorView src, Op op) {
  for (int64_t b = 0; b < dst.batch(); ++b)
    for (int64_t n = 0; n < dst.seq(); ++n)
      for (int64_t h = 0; h < dst.heads(); ++h) {
        float* y = dst.row(b, n, h);
        const float* x = src.row(b, n, h);
        for (int64_t d = 0; d < dst.dim(); ++d) op(y[d * dst.stride[3]], x[d * src.stride[3]]);
      }
}
}  // namespace

void copy_view(TensorView dst, ConstTensorView src) {
  each_row(dst, src, [](float& y, float x) { y = x; });
}

void add_view(TensorView dst, ConstTensorView src) {
  each_row(dst, src, [](float& y, float x) { y += x; });
}

void fill_view(TensorView dst, float value) {
  each_row(dst, dst, [value](float& y, float) { y = value; });
}

void gather_lse(std::span<float> segment, std::span<const float> shard, int64_t rows, int64_t n, int64_t local,
                int64_t count) {
  for (int64_t r = 0; r < rows; ++r) std::copy_n(shard.data() + r * n + local, count, segment.data() + r * count);
}

void scatter_lse(std::span<float> shard, std::span<const float> segment, int64_t rows, int64_t n, int64_t local,
                 int64_t count) {
  for (int64_t r = 0; r < rows; ++r) std::copy_n(segment.data() + r * count, count, shard.data() + r * n + local);
}

}  // namespace linattn::distributed::detail
