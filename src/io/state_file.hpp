#pragma once
// The recurrent-state file format (docs/state-format.md) as bytes, for save/load and the fuzz tests.
#include <cstdint>
#include <string>
#include <string_view>

#include "linattn/recurrent_state.hpp"

namespace linattn::io {

inline constexpr char kStateMagic[8] = {'L', 'N', 'A', 'T', 'S', 'T', 'A', 'T'};
// The newest version this build reads and writes. Version 2 adds S's element type (a u32 after the
// name: 0 f32, 1 bf16); an f32 state is still written as version 1, which every build reads.
inline constexpr uint32_t kStateVersion = 2;
inline constexpr uint32_t kStateDtypeF32 = 0, kStateDtypeBf16 = 1;
inline constexpr uint32_t kMaxFeatureMapName = 256;
// magic, version, batch, heads, feature_dim, value_dim, position, name length.
inline constexpr int64_t kStateFixedHeader = 8 + 4 + 5 * 8 + 4;

// The bytes RecurrentState::save writes.
std::string serialize_state(const RecurrentState& state);
// Checks and decodes a state file's bytes; `name` (the path) is used in error messages.
RecurrentState parse_state(std::string_view bytes, std::string_view name);

}  // namespace linattn::io
