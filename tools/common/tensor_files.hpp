#pragma once
// .npy files as attention tensors: rank-4 float32 arrays in [B, N, H, D] or [B, H, N, D] order.
#include <array>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "linattn/view.hpp"

namespace linattn::cli {

enum class Layout { bnhd, bhnd };

// A tensor loaded from, or to be saved to, a .npy file; `view` indexes it as [B, N, H, D].
struct FileTensor {
  std::string name;  // the flag it came from, for messages: "--q"
  std::filesystem::path path;
  Layout layout = Layout::bnhd;
  std::vector<float> data;
  TensorView view;
  std::array<int64_t, 4> extent() const { return view.extent; }
};

// Loads and checks rank 4 and positive extents; throws linattn::Error naming the flag and path.
FileTensor load_tensor(const std::string& name, const std::filesystem::path& path, Layout layout);
// A zero tensor of logical extent [B, N, H, D], saved in `layout` order.
FileTensor make_tensor(const std::string& name, const std::filesystem::path& path, Layout layout,
                       std::array<int64_t, 4> extent);
// The file's shape for a logical extent: [B, N, H, D] or [B, H, N, D].
std::vector<int64_t> file_shape(Layout layout, std::array<int64_t, 4> extent);
// Writes the tensor atomically (linattn::npy::save).
void save_tensor(const FileTensor& t);
// "[2, 5, 3, 16]".
std::string shape_string(const std::vector<int64_t>& shape);

}  // namespace linattn::cli
