#pragma once
// Everything public in linattn.
#include "linattn/boundary.hpp"
#include "linattn/error.hpp"
#include "linattn/favor.hpp"
#include "linattn/feature_map.hpp"
#include "linattn/file_io.hpp"
#include "linattn/limits.hpp"
#include "linattn/linear_attention.hpp"
#include "linattn/linformer.hpp"
#include "linattn/npy.hpp"
#include "linattn/performer.hpp"  // the alias of favor.hpp, kept for existing code
#include "linattn/quality.hpp"
#include "linattn/random.hpp"
#include "linattn/recurrent_state.hpp"
#include "linattn/reference.hpp"
#include "linattn/softmax_attention.hpp"
#include "linattn/threads.hpp"
#include "linattn/view.hpp"
