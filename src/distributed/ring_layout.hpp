#pragma once
// Ring attention's bookkeeping, free of MPI: which global positions each rank's shard holds (its
// segments), which (query segment, key segment) pairs the causal mask lets through, and the strided
// copies that move a shard in and out of the ring's contiguous message buffers.
#include <cstdint>
#include <span>
#include <vector>

#include "core/views.hpp"
#include "linattn/distributed/ring.hpp"
#include "linattn/view.hpp"

namespace linattn::distributed::detail {

// Rows [local, local + length) of a shard are the global positions [global, global + length).
struct Segment {
  int64_t local = 0, global = 0, length = 0;
};

// Every rank's non-empty segments, in shard order, from every rank's shard length and (balanced
// layout) early-block length. Segments of different ranks, or of one rank, never overlap; a rank's
// blocks that are adjacent in the sequence form one segment.
std::vector<std::vector<Segment>> ring_segments(RingLayout layout, std::span<const int64_t> lengths,
                                                std::span<const int64_t> early_lengths);

// What a query segment sees of a key segment: nothing, all of it, or (the same positions) the causal
// lower triangle.
enum class Visibility { none, full, diagonal };
Visibility visibility(bool causal, const Segment& q, const Segment& k);

// The key lengths [B] that global key_lengths leave inside key segment k; empty stays empty.
std::vector<int64_t> segment_key_lengths(std::span<const int64_t> key_lengths, const Segment& k);

// Tokens [begin, begin + count) of a view (core/views.hpp).
using linattn::detail::seq_slice;

// dst = src and dst += src, element by element over equal extents (any strides); dst = value.
void copy_view(TensorView dst, ConstTensorView src);
void add_view(TensorView dst, ConstTensorView src);
void fill_view(TensorView dst, float value);

// lse of shard rows [local, local + count): between a shard's [B, H, n] and a segment's [B, H, count].
void gather_lse(std::span<float> segment, std::span<const float> shard, int64_t rows, int64_t n, int64_t local,
                int64_t count);
void scatter_lse(std::span<float> shard, std::span<const float> segment, int64_t rows, int64_t n, int64_t local,
                 int64_t count);

}  // namespace linattn::distributed::detail
