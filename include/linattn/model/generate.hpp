#pragma once
// Generation from a trained model. Linear and favor attention carry a RecurrentState per layer
// (memory and time per token independent of the context), and so do retnet and gla (a decaying
// state, RecurrentState(1, H, hd, hd, decay_name(decay)), stepped by decayed_step for every token,
// a prompt's too), and the delta kinds (RecurrentState(1, H, hd, hd, delta_name(gate)), stepped by
// delta_rule_step for every token); softmax keeps a KV cache per layer and
// attends a single query to all cached keys (a prompt block goes through the causal operator,
// bottom-right aligned against the cache).
#include <cstdint>
#include <span>
#include <vector>

#include "linattn/model/transformer.hpp"
#include "linattn/recurrent_state.hpp"

namespace linattn::model {

class Generator {
 public:
  // Keeps a reference to model: it must outlive the generator.
  explicit Generator(const Transformer<float>& model);

  // Feeds tokens at positions position() .. position() + n − 1 and returns their logits [n, V].
  // One token steps the state (recurrent_step, or one query against the KV cache); a block of
  // several (a prompt) runs the parallel causal operators from the current state, chunk by chunk.
  std::span<const float> feed(std::span<const int32_t> tokens);
  int64_t position() const { return position_; }
  // Forgets the context.
  void reset();
  // Bytes of context state held: grows with position for softmax, constant for the others.
  int64_t state_bytes() const;

 private:
  const Transformer<float>& model_;
  int64_t position_ = 0;
  std::vector<RecurrentState> states_;             // per layer (all but softmax)
  std::vector<std::vector<float>> keys_, values_;  // per layer [H, capacity_, hd] (softmax)
  int64_t capacity_ = 0;                           // cached positions room is allocated for
  std::vector<float> buffers_, logits_;

  void feed_block(const int32_t* tokens, int64_t n);
  // Makes room for `keys` cached positions (doubling), keeping the first position_ of each head.
  void grow_cache(int64_t keys);
};

// A token drawn from softmax(logits / temperature) with the uniform number u ∈ [0, 1);
// temperature 0 takes the argmax (the lowest index among ties).
int32_t sample_token(std::span<const float> logits, double temperature, double u);

}  // namespace linattn::model
