#pragma once
// Local argument checks shared by the distributed operators: each throws linattn::Error in the
// library's words (argument, value seen, value expected), and run_local_checks turns that into
// this rank's failure for the agreement.
#include <cstdint>
#include <string>

#include "linattn/view.hpp"

namespace linattn::distributed::detail {

// "linattn: distributed <op>: <what>".
[[noreturn]] void fail(const char* op, const std::string& what);

// x.extent[axis] equals want; the message names x, the axis, and what want is ("q's batch").
void check_extent(const char* op, const char* name, ConstTensorView x, int axis, int64_t want, const char* want_name);
// A view holding elements has data, and non-negative strides.
void check_view(const char* op, const char* name, ConstTensorView x);

// A stable 64-bit hash of a name (FNV-1a), for signature fields such as the feature map.
int64_t name_hash(const std::string& name);

}  // namespace linattn::distributed::detail
