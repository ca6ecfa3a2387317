#pragma once
// Strided 4-d views over caller-owned memory. Logical order is always [B, N, H, D]
// (batch, sequence, heads, head dim); any physical layout is expressed through the strides.
#include <array>
#include <cstdint>
#include <type_traits>

namespace linattn {

template <class T>
struct View4 {
  T* data = nullptr;
  std::array<int64_t, 4> extent{};  // [B, N, H, D]
  std::array<int64_t, 4> stride{};  // in elements, may be any non-negative value

  int64_t batch() const { return extent[0]; }
  int64_t seq() const { return extent[1]; }
  int64_t heads() const { return extent[2]; }
  int64_t dim() const { return extent[3]; }

  int64_t offset(int64_t b, int64_t n, int64_t h, int64_t d) const {
    return b * stride[0] + n * stride[1] + h * stride[2] + d * stride[3];
  }
  T& operator()(int64_t b, int64_t n, int64_t h, int64_t d) const { return data[offset(b, n, h, d)]; }
  // Pointer to element (b, n, h, 0): the start of one row of D values.
  T* row(int64_t b, int64_t n, int64_t h) const { return data + offset(b, n, h, 0); }

  // A view of float is also a view of const float.
  template <class U, class = std::enable_if_t<std::is_same_v<const U, T> && !std::is_same_v<U, T>>>
  View4(const View4<U>& other) : data(other.data), extent(other.extent), stride(other.stride) {}
  View4() = default;
  View4(T* data_, std::array<int64_t, 4> extent_, std::array<int64_t, 4> stride_)
      : data(data_), extent(extent_), stride(stride_) {}
};

using TensorView = View4<float>;
using ConstTensorView = View4<const float>;

// Memory laid out as [B, N, H, D], row-major (the default layout).
template <class T>
View4<T> bnhd(T* data, int64_t B, int64_t N, int64_t H, int64_t D) {
  return {data, {B, N, H, D}, {N * H * D, H * D, D, 1}};
}

// Memory laid out as [B, H, N, D], row-major; the view still indexes it as [B, N, H, D].
template <class T>
View4<T> bhnd(T* data, int64_t B, int64_t H, int64_t N, int64_t D) {
  return {data, {B, N, H, D}, {H * N * D, D, N * D, 1}};
}

}  // namespace linattn
