// RecurrentState::save/load: the state file of docs/state-format.md, read as untrusted input.
#include "io/state_file.hpp"

#include <algorithm>
#include <bit>
#include <cstring>
#include <sstream>

#include "core/validate.hpp"
#include "io/bytes.hpp"
#include "io/input_file.hpp"
#include "linattn/file_io.hpp"
#include "linattn/limits.hpp"

namespace linattn {
namespace io {
namespace {

const char* const kSizeNames[4] = {"batch", "heads", "feature_dim", "value_dim"};

// Feature map names are short printable ASCII without spaces ("elu", "favor(d=64,m=267,seed=0,orthogonal)").
bool valid_name(std::string_view name) {
  if (name.empty() || name.size() > kMaxFeatureMapName) return false;
  for (char c : name)
    if (c <= ' ' || c > '~') return false;
  return true;
}

}  // namespace

std::string serialize_state(const RecurrentState& state) {
  const char* op = "RecurrentState::save";
  if (state.batch() <= 0) detail::fail(op, "state is empty (batch 0), expected a constructed state");
  if (const std::string why = state_feature_map_name_error(state.feature_map()); !why.empty()) detail::fail(op, why);
  check_bounded("linattn::RecurrentState::save", "position", state.position(), 0, limits::kMaxPosition);
  const bool bf16_state = state.dtype() == DType::bf16;
  std::string out(kStateMagic, sizeof kStateMagic);
  put_u32(out, bf16_state ? 2 : 1);  // the oldest version that holds the state
  for (int64_t v : {state.batch(), state.heads(), state.feature_dim(), state.value_dim(), state.position()})
    put_i64(out, v);
  put_u32(out, uint32_t(state.feature_map().size()));
  out += state.feature_map();
  if (bf16_state) put_u32(out, kStateDtypeBf16);
  put_u32(out, crc32(out));
  out.reserve(out.size() + 4 * (state.S().size() + state.z().size()) + 2 * state.S_bf16().size() + 4);
  put_f32s(out, state.S());
  for (bf16 x : state.S_bf16()) put_le(out, x.bits, 2);
  put_f32s(out, state.z());
  put_u32(out, crc32(out));
  return out;
}

namespace {

// Where decode_state reads from, in order: a whole file's bytes, or an open file.
struct BytesSource {
  std::string_view bytes;
  size_t read_some(char* dst, size_t n) {
    n = std::min(n, bytes.size());
    if (n > 0) std::memcpy(dst, bytes.data(), n);
    bytes.remove_prefix(n);
    return n;
  }
};

// Reads and checks a state file of `file_size` bytes from `source`, front to back: the header is
// checked in full before S and z are allocated, and S and z are read straight into the state.
template <class Source>
RecurrentState decode_state(Source& source, int64_t file_size, const std::string& path) {
  const char* op = "RecurrentState::load";
  auto fail = [&](const std::string& what) { detail::fail(op, path + ": " + what); };
  auto truncated = [&](int64_t needed, const char* what) {
    std::ostringstream m;
    m << "truncated: file is " << file_size << " bytes, expected at least " << needed << " (" << what << ")";
    fail(m.str());
  };
  // Only after a size check against file_size: a short read then means the file shrank meanwhile.
  auto read = [&](char* dst, int64_t n) {
    if (source.read_some(dst, size_t(n)) != size_t(n)) fail("truncated while reading (the file shrank)");
  };
  std::string head(size_t(std::min(file_size, kStateFixedHeader)), '\0');
  read(head.data(), int64_t(head.size()));
  // Magic and version come first, so that a file of another kind or version says so.
  if (file_size < int64_t(sizeof kStateMagic)) truncated(sizeof kStateMagic, "the magic");
  if (std::memcmp(head.data(), kStateMagic, sizeof kStateMagic) != 0)
    fail("not a linattn state file (magic is not \"LNATSTAT\")");
  if (file_size < 12) truncated(12, "the format version");
  const uint32_t version = get_u32(head.data() + 8);
  if (version > kStateVersion)
    fail("written by a newer linattn (version " + std::to_string(version) + "), this build reads up to " +
         std::to_string(kStateVersion));
  if (version == 0) fail("format version is 0, expected 1.." + std::to_string(kStateVersion));
  if (file_size < kStateFixedHeader) truncated(kStateFixedHeader, "the header");
  const uint32_t name_length = get_u32(head.data() + kStateFixedHeader - 4);
  if (name_length > kMaxFeatureMapName)
    fail("feature map name length is " + std::to_string(name_length) + ", expected ≤ " +
         std::to_string(kMaxFeatureMapName) + " (corrupt header)");
  // Version 2: S's element type follows the name.
  const int64_t header_end = kStateFixedHeader + int64_t(name_length) + (version >= 2 ? 4 : 0);
  if (header_end + 4 > file_size) truncated(header_end + 4, "the header and its checksum");
  head.resize(size_t(header_end + 4));
  read(head.data() + kStateFixedHeader, header_end + 4 - kStateFixedHeader);
  // The header checksum guards every size field before any of them is believed.
  const std::string_view header(head.data(), size_t(header_end));
  if (crc32(header) != get_u32(head.data() + header_end)) fail("header checksum mismatch (corrupt header)");
  const std::string_view map_name = header.substr(size_t(kStateFixedHeader), name_length);
  DType dtype = DType::f32;
  if (version >= 2) {
    const uint32_t code = get_u32(head.data() + kStateFixedHeader + name_length);
    if (code != kStateDtypeF32 && code != kStateDtypeBf16)
      fail("S's element type is " + std::to_string(code) + ", expected 0 (f32) or 1 (bf16)");
    if (code == kStateDtypeBf16) dtype = DType::bf16;
  }
  const int64_t s_bytes = dtype == DType::bf16 ? 2 : 4;
  if (!valid_name(map_name)) fail("feature map name is not printable ASCII without spaces");

  int64_t sizes[4];
  for (int i = 0; i < 4; ++i) {
    sizes[i] = get_i64(head.data() + 12 + 8 * i);
    if (sizes[i] <= 0) fail(std::string(kSizeNames[i]) + " is " + std::to_string(sizes[i]) + ", expected ≥ 1");
  }
  const int64_t position = get_i64(head.data() + 12 + 8 * 4);
  if (position < 0 || position > limits::kMaxPosition)
    fail("position is " + std::to_string(position) + ", expected in [0, " + std::to_string(limits::kMaxPosition) + "]");
  // Element counts, then the exact file size they imply, all checked for int64 overflow.
  const std::string what = path + ": S's size";
  const int64_t bhm =
      detail::checked_mul(op, what.c_str(), detail::checked_mul(op, what.c_str(), sizes[0], sizes[1]), sizes[2]);
  const int64_t s_count = detail::checked_mul(op, what.c_str(), bhm, sizes[3]);
  int64_t expected = 0;
  int64_t s_total = 0, z_total = 0;
  if (__builtin_mul_overflow(s_count, s_bytes, &s_total) || __builtin_mul_overflow(bhm, int64_t(4), &z_total) ||
      __builtin_add_overflow(s_total, z_total, &expected) ||
      __builtin_add_overflow(expected, header_end + 8, &expected))
    fail("the sizes in the header overflow int64 (corrupt header)");
  if (file_size != expected) {
    std::ostringstream m;
    m << (file_size < expected ? "truncated" : "trailing bytes") << ": file is " << file_size << " bytes, expected "
      << expected << " (header: batch " << sizes[0] << ", heads " << sizes[1] << ", feature_dim " << sizes[2]
      << ", value_dim " << sizes[3] << ")";
    fail(m.str());
  }

  RecurrentState state(sizes[0], sizes[1], sizes[2], sizes[3], std::string(map_name), dtype);
  uint32_t crc = crc32(head);
  auto read_raw = [&](void* dst, size_t bytes) {
    if (bytes == 0) return;  // the absent one of S's two arrays; zlib's crc32 of a null buffer restarts
    char* raw = static_cast<char*>(dst);
    read(raw, int64_t(bytes));
    crc = crc32(std::string_view(raw, bytes), crc);
  };
  read_raw(state.S().data(), 4 * state.S().size());
  read_raw(state.S_bf16().data(), 2 * state.S_bf16().size());
  read_raw(state.z().data(), 4 * state.z().size());
  char stored[4];
  read(stored, 4);
  if (crc != get_u32(stored)) fail("checksum mismatch (corrupt data)");
  to_host_order(state.S(), false);
  if constexpr (std::endian::native == std::endian::big)
    for (bf16& x : state.S_bf16()) x.bits = uint16_t(get_uint(reinterpret_cast<const char*>(&x.bits), 2));
  to_host_order(state.z(), false);
  state.set_position(position);
  return state;
}

}  // namespace

RecurrentState parse_state(std::string_view bytes, std::string_view name) {
  BytesSource source{bytes};
  return decode_state(source, int64_t(bytes.size()), std::string(name));
}

}  // namespace io

std::string state_feature_map_name_error(std::string_view name) {
  if (io::valid_name(name)) return "";
  return "feature map name '" + std::string(name) + "' is not 1.." + std::to_string(io::kMaxFeatureMapName) +
         " printable ASCII characters without spaces";
}

void RecurrentState::save(const std::filesystem::path& path) const {
  write_file_atomically(path, io::serialize_state(*this));
}

RecurrentState RecurrentState::load(const std::filesystem::path& path) {
  io::InputFile file(path, "RecurrentState::load");
  return io::decode_state(file, file.size(), path.string());
}

}  // namespace linattn
