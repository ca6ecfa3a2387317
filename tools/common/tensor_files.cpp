#include "common/tensor_files.hpp"

#include "linattn/error.hpp"
#include "linattn/npy.hpp"

namespace linattn::cli {

namespace {

TensorView view_of(float* data, Layout layout, std::array<int64_t, 4> e) {
  return layout == Layout::bnhd ? bnhd(data, e[0], e[1], e[2], e[3]) : bhnd(data, e[0], e[2], e[1], e[3]);
}

}  // namespace

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::vector<int64_t> file_shape(Layout layout, std::array<int64_t, 4> e) {
  return layout == Layout::bnhd ? std::vector<int64_t>{e[0], e[1], e[2], e[3]}
                                : std::vector<int64_t>{e[0], e[2], e[1], e[3]};
}

FileTensor load_tensor(const std::string& name, const std::filesystem::path& path, Layout layout) {
  npy::Array array = npy::load(path);
  const char* order = layout == Layout::bnhd ? "[B, N, H, D]" : "[B, H, N, D]";
  if (array.shape.size() != 4)
    throw Error(name + " " + path.string() + ": shape " + shape_string(array.shape) + " has rank " +
                std::to_string(array.shape.size()) + ", expected rank 4 " + order);
  for (int64_t extent : array.shape)
    if (extent <= 0)
      throw Error(name + " " + path.string() + ": shape " + shape_string(array.shape) +
                  " has an empty axis, expected every extent ≥ 1");
  const auto& s = array.shape;
  const std::array<int64_t, 4> extent = layout == Layout::bnhd ? std::array<int64_t, 4>{s[0], s[1], s[2], s[3]}
                                                               : std::array<int64_t, 4>{s[0], s[2], s[1], s[3]};
  FileTensor t{name, path, layout, std::move(array.data), {}};
  t.view = view_of(t.data.data(), layout, extent);
  return t;
}

FileTensor make_tensor(const std::string& name, const std::filesystem::path& path, Layout layout,
                       std::array<int64_t, 4> extent) {
  FileTensor t{name, path, layout, std::vector<float>(size_t(extent[0] * extent[1] * extent[2] * extent[3])), {}};
  t.view = view_of(t.data.data(), layout, extent);
  return t;
}

void save_tensor(const FileTensor& t) {
  const std::vector<int64_t> shape = file_shape(t.layout, t.extent());
  npy::save(t.path, shape, t.data);
}

}  // namespace linattn::cli
