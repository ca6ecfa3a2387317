#pragma once
// The recurrences' decode steps (decayed_step, delta_rule_step) against their whole-sequence forward, one
// token at a time through a RecurrentState that goes to a file and comes back halfway, and the refusal of a
// state of another recurrence.
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "linattn/error.hpp"
#include "linattn/recurrent_state.hpp"
#include "support/temp_dir.hpp"
#include "support/tensors.hpp"

namespace linattn::testing {

// step(out [B, 1, H, V], at, state) decodes token t, at(x) being token t of a [B, T, H, ·] view (an empty
// view stays empty): out within 2e-5 of the forward's `want` [B, T, H, V] at every token; after token 20
// the state is saved to `file` and loaded back; the state ends at position T.
template <class Step>
void expect_steps_match_the_forward(ConstTensorView want, RecurrentState& state, const std::string& file, Step&& step) {
  const auto [B, T, H, V] = want.extent;
  TempDir dir;
  for (int64_t t = 0; t < T; ++t) {
    auto at = [&](ConstTensorView x) {
      ConstTensorView s = x;
      s.data = x.data ? x.data + t * x.stride[1] : nullptr, s.extent[1] = 1;
      return s;
    };
    Tensor32 out = make_tensor({B, 1, H, V}, Layout::bnhd);
    step(out.view, at, state);
    EXPECT_LT(relative_error(out.view, reference::to_double(at(want))), 2e-5) << "token " << t;
    if (t == 20) {  // halfway, the state goes to a file and comes back
      state.save(dir.path() / file);
      state = RecurrentState::load(dir.path() / file);
    }
  }
  EXPECT_EQ(state.position(), T);
}

// call() refuses, with a linattn::Error whose message has `words`; `accepted` says what it must not take.
inline void expect_refused(const std::function<void()>& call, const std::string& words, const std::string& accepted) {
  try {
    call();
    ADD_FAILURE() << accepted << " was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
  }
}

}  // namespace linattn::testing
