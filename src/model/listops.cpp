// ListOps as the Long Range Arena generates it: nested MAX / MIN / MED / SM expressions over digits,
// the label their value (data.hpp).
#include <algorithm>
#include <numeric>
#include <string>

#include "linattn/error.hpp"
#include "linattn/model/data.hpp"
#include "linattn/random.hpp"

namespace linattn::model {
namespace {

// LRA's VALUE_P: below the depth limit a node is a digit with probability 3/4.
constexpr double kValueProbability = 0.25;
// Tries before giving up on a length window (LRA's lengths take some 12 tries at 2,000 tokens, 35 at 64).
constexpr int kMaxTries = 100000;

// The value of operator op over its arguments' values.
int32_t apply(int32_t op, std::vector<int32_t> args) {
  switch (op) {
    case ListOpsTask::kMax:
      return *std::max_element(args.begin(), args.end());
    case ListOpsTask::kMin:
      return *std::min_element(args.begin(), args.end());
    case ListOpsTask::kMed: {  // numpy's median (the mean of the middle two for an even count), truncated
      std::sort(args.begin(), args.end());
      const size_t n = args.size();
      return n % 2 ? args[n / 2] : (args[n / 2 - 1] + args[n / 2]) / 2;
    }
    default:  // kSumMod
      return std::accumulate(args.begin(), args.end(), 0) % 10;
  }
}

// Appends one node drawn at `depth` (the root is depth 1, as LRA's generate_tree(1)) and returns its
// value; gives up (returns −1) as soon as `out` passes budget tokens, which keeps a rejected draw cheap.
int32_t draw_node(Random& rng, int64_t depth, int64_t budget, std::vector<int32_t>& out) {
  const double r = depth < ListOpsTask::kMaxDepth ? rng.uniform() : 1.0;
  if (r > kValueProbability) {
    const auto digit = int32_t(rng.below(10));
    out.push_back(digit);
    return digit;
  }
  const int64_t arity = 2 + rng.below(ListOpsTask::kMaxArgs - 1);  // 2 … kMaxArgs, as randint(2, MAX_ARGS)
  const auto op = int32_t(ListOpsTask::kMax + rng.below(4));
  out.push_back(op);
  std::vector<int32_t> args;
  for (int64_t i = 0; i < arity; ++i) {
    const int32_t value = draw_node(rng, depth + 1, budget, out);
    if (value < 0 || int64_t(out.size()) >= budget) return -1;  // the closing bracket no longer fits
    args.push_back(value);
  }
  out.push_back(ListOpsTask::kClose);
  return apply(op, std::move(args));
}

}  // namespace

ListOpsTask::ListOpsTask(uint64_t seed) : seed_(seed), tokenizer_("0123456789XNDS].") {}

ListOpsExample ListOpsTask::example(ListOpsSplit split, int64_t i, int64_t max_len) const {
  if (max_len < 4)
    throw Error("linattn::model: listops seq_len is " + std::to_string(max_len) +
                ", expected ≥ 4 (the shortest expressions, \"[MAX 1 2 ]\", are 4 tokens)");
  check_index(split, i, "listops");
  Random rng(example_seed(seed_, split, i));
  ListOpsExample e;
  for (int tries = 0; tries < kMaxTries; ++tries) {
    e.tokens.clear();
    const int32_t value = draw_node(rng, 1, max_len, e.tokens);
    if (value >= 0 && int64_t(e.tokens.size()) >= std::max<int64_t>(max_len / 4, 2)) {
      e.label = value;
      return e;
    }
  }
  throw Error("linattn::model: no listops expression of " + std::to_string(max_len / 4) + " to " +
              std::to_string(max_len) + " tokens in " + std::to_string(kMaxTries) + " draws");
}

std::string ListOpsTask::text(std::span<const int32_t> tokens) {
  static constexpr const char* kWords[] = {"0", "1", "2",    "3",    "4",    "5",   "6", "7",
                                           "8", "9", "[MAX", "[MIN", "[MED", "[SM", "]"};
  std::string s;
  for (int32_t t : tokens) {
    if (t == kPad) continue;
    if (!s.empty()) s += ' ';
    s += t >= 0 && t < kPad ? kWords[t] : "?";
  }
  return s;
}

}  // namespace linattn::model
