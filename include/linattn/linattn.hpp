#pragma once
// Everything public in linattn.
#include "linattn/error.hpp"
#include "linattn/feature_map.hpp"
#include "linattn/linear_attention.hpp"
#include "linattn/recurrent_state.hpp"
#include "linattn/reference.hpp"
#include "linattn/softmax_attention.hpp"
#include "linattn/threads.hpp"
#include "linattn/view.hpp"
