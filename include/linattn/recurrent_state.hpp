#pragma once
// The state that linear attention carries between chunks, steps and processes.
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "linattn/half.hpp"

namespace linattn {

// "" when name can be a state's feature map name in its file (1..256 printable ASCII characters without
// spaces), else why it cannot: what RecurrentState::save checks, and the C API's linattn_state_create
// before it makes a state that could never be saved.
std::string state_feature_map_name_error(std::string_view name);

// S: [B, H, M, E] = Σ_j φ(k_j) v_jᵀ and z: [B, H, M] = Σ_j φ(k_j), over the keys consumed so far.
class RecurrentState {
 public:
  RecurrentState() = default;
  // Zero state. feature_map names the map whose features it sums (checked when it is used).
  // dtype: S's element type, f32 (the default) or bf16 (half the decode memory; only the linear
  // recurrent_step takes it, every other operator refuses it); z is fp32 either way.
  RecurrentState(int64_t batch, int64_t heads, int64_t feature_dim, int64_t value_dim, std::string feature_map = "elu",
                 DType dtype = DType::f32);

  int64_t batch() const { return batch_; }
  int64_t heads() const { return heads_; }
  int64_t feature_dim() const { return feature_dim_; }
  int64_t value_dim() const { return value_dim_; }
  const std::string& feature_map() const { return feature_map_; }
  // Number of tokens consumed so far.
  int64_t position() const { return position_; }
  void set_position(int64_t position) { position_ = position; }

  DType dtype() const { return dtype_; }

  // S of an f32 state (empty for a bf16 one), and of a bf16 state (empty for an f32 one).
  std::span<float> S() { return S_; }
  std::span<const float> S() const { return S_; }
  std::span<bf16> S_bf16() { return S16_; }
  std::span<const bf16> S_bf16() const { return S16_; }
  bf16* S_bf16(int64_t b, int64_t h) { return S16_.data() + (b * heads_ + h) * feature_dim_ * value_dim_; }
  std::span<float> z() { return z_; }
  std::span<const float> z() const { return z_; }
  // Row (b, h) of S: [M, E] contiguous, and of z: [M].
  float* S(int64_t b, int64_t h) { return S_.data() + (b * heads_ + h) * feature_dim_ * value_dim_; }
  const float* S(int64_t b, int64_t h) const { return S_.data() + (b * heads_ + h) * feature_dim_ * value_dim_; }
  float* z(int64_t b, int64_t h) { return z_.data() + (b * heads_ + h) * feature_dim_; }
  const float* z(int64_t b, int64_t h) const { return z_.data() + (b * heads_ + h) * feature_dim_; }

  void reset();

  // Binary file, format in docs/state-format.md: magic, version, little-endian, CRC-32.
  // Written to a temporary file and renamed, so a failed save leaves no half-written file.
  void save(const std::filesystem::path& path) const;
  // Throws linattn::Error for a missing, truncated, corrupt or unknown-version file.
  static RecurrentState load(const std::filesystem::path& path);

 private:
  int64_t batch_ = 0, heads_ = 0, feature_dim_ = 0, value_dim_ = 0, position_ = 0;
  std::string feature_map_ = "elu";
  DType dtype_ = DType::f32;
  std::vector<float> S_, z_;
  std::vector<bf16> S16_;
};

}  // namespace linattn
