// The half ↔ fp32 view conversion layer (half_views.hpp).
#include "kernels/half_views.hpp"

#include <algorithm>
#include <deque>
#include <memory>

namespace linattn::kernels {
namespace {

// Rows of one view: B·N·H of them, D elements each. Threads only pay off for large copies.
constexpr int64_t kParallelElements = int64_t(1) << 18;

template <class T>
int64_t rows_of(View4<T> x) {
  return x.extent[0] * x.extent[1] * x.extent[2];
}

// The fp32 copies of this thread's half calls, kept between calls and lent out again. Why: a copy of
// a long sequence is a fresh mmap each call, and the kernel zeroes and faults in each of its pages on
// first touch; at B=4, H=8, N=16384, D=64 that was 0.43 s of a 0.50 s bf16 linear forward whose fp32
// operator takes 0.07 s. Uninitialised (each copy is written whole before it is read: widen_view
// fills the inputs, the fp32 operator every output). The pool holds what the largest call on this
// thread held at once, and is freed when the thread ends.
class CopyPool {
 public:
  float* lend(size_t n) {
    Buffer* best = nullptr;
    for (Buffer& b : buffers_)
      if (!b.lent && b.size >= n && (!best || b.size < best->size)) best = &b;
    if (!best) {
      // Replace the largest free buffer that is too small (its memory is not enough for anything else
      // this call asks for), or add one.
      for (Buffer& b : buffers_)
        if (!b.lent && (!best || b.size > best->size)) best = &b;
      if (!best) best = &buffers_.emplace_back();
      best->data = std::make_unique_for_overwrite<float[]>(std::max<size_t>(n, 1));
      best->size = n;
    }
    best->lent = true;
    return best->data.get();
  }
  void give_back(const float* p) {
    for (Buffer& b : buffers_)
      if (b.data.get() == p) b.lent = false;
  }

 private:
  struct Buffer {
    std::unique_ptr<float[]> data;
    size_t size = 0;
    bool lent = false;
  };
  std::deque<Buffer> buffers_;  // a deque: lent pointers stay valid while buffers are added
};

CopyPool& copy_pool() {
  thread_local CopyPool pool;
  return pool;
}

}  // namespace

template <HalfType H>
void widen_view(float* dst, View4<const H> x) {
  const int64_t rows = rows_of(x), D = x.dim(), N = x.seq(), Hh = x.heads();
#pragma omp parallel if (rows * D >= kParallelElements)
  {
    std::vector<H> gathered(x.stride[3] == 1 ? 0 : size_t(D));
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const H* src = x.row(r / (N * Hh), r / Hh % N, r % Hh);
      if (x.stride[3] != 1) {
        for (int64_t d = 0; d < D; ++d) gathered[size_t(d)] = src[d * x.stride[3]];
        src = gathered.data();
      }
      convert(std::span<float>(dst + r * D, size_t(D)), std::span<const H>(src, size_t(D)));
    }
  }
}

template <HalfType H>
void narrow_view(View4<H> y, const float* src) {
  const int64_t rows = rows_of(y), D = y.dim(), N = y.seq(), Hh = y.heads();
#pragma omp parallel if (rows * D >= kParallelElements)
  {
    std::vector<H> row(y.stride[3] == 1 ? 0 : size_t(D));
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      H* dst = y.row(r / (N * Hh), r / Hh % N, r % Hh);
      H* target = y.stride[3] == 1 ? dst : row.data();
      convert(std::span<H>(target, size_t(D)), std::span<const float>(src + r * D, size_t(D)));
      if (y.stride[3] != 1)
        for (int64_t d = 0; d < D; ++d) dst[d * y.stride[3]] = row[size_t(d)];
    }
  }
}

template <HalfType H>
void narrow_span(std::span<H> y, std::span<const float> src) {
  convert(y, src);
}

template <HalfType H>
HalfCall<H>::~HalfCall() {
  for (float* p : copies_) copy_pool().give_back(p);
}

template <HalfType H>
float* HalfCall<H>::copy(size_t n) {
  copies_.reserve(copies_.size() + 1);  // so that a lent buffer is always recorded, to be given back
  return copies_.emplace_back(copy_pool().lend(n));
}

template <HalfType H>
ConstTensorView HalfCall<H>::in(const char* name, View4<const H> x) {
  if (!x.data) return {};
  detail::check_view(op_, name, shape_view(x));
  inputs_.push_back(boundary::region(name, x));
  float* copied = copy(size_t(rows_of(x) * x.dim()));
  widen_view(copied, x);
  return bnhd(static_cast<const float*>(copied), x.extent[0], x.extent[1], x.extent[2], x.extent[3]);
}

template <HalfType H>
ConstTensorView HalfCall<H>::in_place(const char* name, View4<const H> x) {
  detail::check_view(op_, name, shape_view(x));
  inputs_.push_back(boundary::region(name, x));
  return {};
}

template <HalfType H>
void HalfCall<H>::out_in_place(const char* name, View4<H> y) {
  detail::check_view(op_, name, shape_view(y));
  outputs_.push_back(boundary::region(name, y));
}

template <HalfType H>
TensorView HalfCall<H>::out(const char* name, View4<H> y) {
  if (!y.data) return {};
  detail::check_view(op_, name, shape_view(y));
  outputs_.push_back(boundary::region(name, y));
  outs_.push_back({y, copies_.size()});
  float* copied = copy(size_t(rows_of(y) * y.dim()));
  return bnhd(copied, y.extent[0], y.extent[1], y.extent[2], y.extent[3]);
}

template <HalfType H>
void HalfCall<H>::store() {
  for (const Output& o : outs_) narrow_view(o.half, copies_[o.copy]);
}

template void widen_view<bf16>(float*, View4<const bf16>);
template void widen_view<f16>(float*, View4<const f16>);
template void narrow_view<bf16>(View4<bf16>, const float*);
template void narrow_view<f16>(View4<f16>, const float*);
template void narrow_span<bf16>(std::span<bf16>, std::span<const float>);
template void narrow_span<f16>(std::span<f16>, std::span<const float>);
template class HalfCall<bf16>;
template class HalfCall<f16>;

}  // namespace linattn::kernels
