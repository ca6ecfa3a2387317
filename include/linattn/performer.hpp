#pragma once
// Alias kept for existing code: "performer" is the old name of FAVOR+ (the Performer paper's random
// features); everything lives in linattn/favor.hpp.
#include "linattn/favor.hpp"  // IWYU pragma: export
