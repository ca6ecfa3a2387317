#pragma once
// Local argument checks shared by the distributed operators: each throws linattn::Error in the
// library's words (argument, value seen, value expected), and run_local_checks turns that into
// this rank's failure for the agreement.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "linattn/view.hpp"

namespace linattn::distributed::detail {

// "linattn: distributed <op>: <what>".
[[noreturn]] void fail(const char* op, const std::string& what);

// x.extent[axis] equals want; the message names x, the axis, and what want is ("q's batch").
void check_extent(const char* op, const char* name, ConstTensorView x, int axis, int64_t want, const char* want_name);
// A view holding elements has data, and non-negative strides.
void check_view(const char* op, const char* name, ConstTensorView x);

// k [B, n, H, K] and v [B, n, HV, ·] against q [B, n, H, K], HV a multiple of H (grouped value heads:
// value head j reads q/k head j / (HV / H)), and each view itself (q, k, v).
void check_qkv(const char* op, ConstTensorView q, ConstTensorView k, ConstTensorView v);
// What the value heads' extents are called in a message: "q's heads" where v has q's heads, else "v's heads".
const char* value_heads_name(ConstTensorView q, ConstTensorView v);
// The gate g: with cols = 0 absent (an empty view; `no_gate` says why, "DeltaNet has no gate"), else
// [B, n, HV, cols] (q's batch and sequence, v's heads); per_token: cols is 1, a gate per token (else q's
// head dim).
void check_gate(const char* op, ConstTensorView g, ConstTensorView q, ConstTensorView v, int64_t cols, bool per_token,
                const std::string& no_gate);
// The chunked scans' shared options: no cu_seqlens (a shard is one piece of each batch row), a chunk
// size ≥ 1, a finite scale when one is given.
void check_scan_options(const char* op, size_t cu_seqlens_entries, int64_t chunk_size, std::optional<float> scale);

// A stable 64-bit hash of a name (FNV-1a), for signature fields such as the feature map.
int64_t name_hash(const std::string& name);

}  // namespace linattn::distributed::detail
