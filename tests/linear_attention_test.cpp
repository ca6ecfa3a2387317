// linear_attention_forward/backward (non-causal, and causal through options.causal, including
// cross-attention lengths) against the fp64 oracle over awkward shapes, layouts, maps and key lengths.
#include "linattn/linear_attention.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "linattn/reference.hpp"
#include "linattn/threads.hpp"
#include "linear_support.hpp"
#include "support/tensors.hpp"

namespace linattn {
namespace {

using testing::Layout;
using testing::LinearCase;

// fp32 against fp64: the sums over up to 1000 keys are of non-negative terms (elu, relu) and the
// normaliser divides two such sums, so the forward's relative error is a few fp32 ulps × log N.
constexpr double kForwardBound = 1e-5;
// The backward goes through 1/den and 1/den², and dφ(q) = S dnum + z dden cancels to leading order;
// still measured ≤ 3e-6 over these cases (M ≥ 2), so the same 1e-5 holds.
constexpr double kBackwardBound = 1e-5;

struct OracleCase {
  LinearCase c;
  const char* map;
  bool normalize, causal, key_lengths;
  Layout layout;
};

std::string name_of(const ::testing::TestParamInfo<OracleCase>& info) {
  const OracleCase& o = info.param;
  std::string name = testing::case_name(o.c);
  name.append("_").append(o.map);
  if (!o.normalize) name.append("_unnormalized");
  if (o.causal) name.append("_causal");
  if (o.key_lengths) name.append("_lengths");
  return name.append("_").append(testing::layout_name(o.layout));
}

class LinearOracle : public ::testing::TestWithParam<OracleCase> {};

TEST_P(LinearOracle, ForwardAndBackwardMatchTheOracle) {
  const OracleCase& o = GetParam();
  std::mt19937_64 rng(std::hash<std::string>{}(name_of({o, 0})));
  const bool positive = std::string(o.map) == "identity" && o.normalize;  // keeps den away from 0
  auto in = testing::random_inputs(o.c, o.layout, rng, positive ? 0.05f : -1.0f, 1.0f);
  std::vector<int64_t> lengths;
  if (o.key_lengths) lengths = testing::spread_key_lengths(o.c, rng);
  LinearAttentionOptions options;
  options.feature_map = feature_map_by_name(o.map);
  options.normalize = o.normalize;
  options.causal = o.causal;
  options.key_lengths = lengths;
  options.chunk_size = 16;

  testing::expect_matches_oracle(in, options, o.layout, rng, kForwardBound, kBackwardBound);
}

constexpr Layout bnhd = Layout::bnhd, bhnd = Layout::bhnd, padded = Layout::padded;

// A sparse cover: every N, D, E, B, H value, layout and map appears, with E ≠ D, Nq ≠ Nk both ways,
// key lengths 0..Nk, normalize on and off, non-causal and causal.
const OracleCase kCases[] = {
    {{1, 1, 1, 1, 1, 1}, "elu", false, false, false, bnhd},
    {{1, 1, 1, 1, 1, 1}, "relu", false, true, false, padded},
    {{3, 2, 2, 3, 16, 59}, "relu", true, false, true, bhnd},
    {{3, 2, 2, 3, 16, 59}, "elu", false, true, true, padded},
    {{1, 63, 63, 3, 59, 16}, "elu", true, true, false, bnhd},
    {{3, 64, 64, 1, 64, 128}, "identity", false, false, true, padded},
    {{3, 64, 64, 1, 64, 128}, "identity", true, true, true, bhnd},
    {{1, 65, 65, 3, 128, 64}, "relu", false, true, false, padded},
    {{3, 97, 97, 1, 1, 16}, "elu", false, true, true, bhnd},
    {{1, 97, 63, 3, 16, 1}, "elu", true, false, false, padded},
    {{3, 63, 97, 1, 59, 64}, "relu", true, true, true, bnhd},  // Nk > Nq: a prefix for every row
    {{1, 97, 63, 3, 64, 59}, "elu", true, true, false, bhnd},  // Nq > Nk: the first rows see no key
    {{3, 2, 65, 1, 16, 16}, "identity", false, true, true, padded},
    {{1, 65, 2, 1, 16, 16}, "elu", false, true, false, bnhd},
    {{1, 1000, 1000, 1, 64, 64}, "elu", true, false, false, bnhd},
    {{1, 1000, 1000, 1, 16, 59}, "relu", true, true, true, bhnd},
    {{1, 1000, 97, 1, 59, 16}, "elu", true, true, false, padded},
    {{1, 64, 1000, 1, 16, 64}, "identity", true, false, true, bnhd},
};

INSTANTIATE_TEST_SUITE_P(Shapes, LinearOracle, ::testing::ValuesIn(kCases), name_of);

// With M = 1 the normalised output Σ φ(k_j) v_j / Σ φ(k_j) does not depend on q (but for eps), so
// dq is O(eps) and all cancellation, which fp32 cannot resolve: the D = 1 cases above run without the
// normaliser, and this one checks the normalised forward and dv, which are well conditioned.
TEST(LinearAttention, FeatureDimOneNormalised) {
  std::mt19937_64 rng(3);
  for (bool causal : {false, true}) {
    const LinearCase c{3, 97, 97, 1, 1, 16};
    auto in = testing::random_inputs(c, Layout::padded, rng);
    LinearAttentionOptions options;
    options.causal = causal;
    auto out = testing::make_tensor({c.B, c.Nq, c.H, c.E}, Layout::padded);
    linear_attention_forward(out.view, in.q.view, in.k.view, in.v.view, options);
    const auto q = reference::to_double(in.q.view), k = reference::to_double(in.k.view),
               v = reference::to_double(in.v.view);
    EXPECT_LE(testing::relative_error(out.view, reference::linear_attention_forward(q, k, v, options)), kForwardBound);
    auto dout = testing::random_tensor({c.B, c.Nq, c.H, c.E}, Layout::padded, rng);
    auto dq = testing::make_tensor(in.q.extent(), Layout::padded),
         dk = testing::make_tensor(in.k.extent(), Layout::padded),
         dv = testing::make_tensor(in.v.extent(), Layout::padded);
    linear_attention_backward(dq.view, dk.view, dv.view, dout.view, in.q.view, in.k.view, in.v.view, options);
    const auto grads = reference::linear_attention_backward(reference::to_double(dout.view), q, k, v, options);
    EXPECT_LE(testing::relative_error(dv.view, grads.dv), kBackwardBound);
  }
}

// Every output bit is the same for 1 and 2 threads (fixed tiles, fixed reduction order).
TEST(LinearAttention, BitwiseIdenticalForAnyThreadCount) {
  std::mt19937_64 rng(7);
  const LinearCase c{3, 300, 2500, 3, 16, 24};
  // [B, N, H, D] and [B, H, N, D] take different tile orders (heads in lockstep or one after another).
  for (Layout layout : {Layout::bnhd, Layout::bhnd})
    for (bool causal : {false, true}) {
      auto in = testing::random_inputs(c, layout, rng);
      LinearAttentionOptions options;
      options.causal = causal;
      std::vector<std::vector<float>> results;
      for (int threads : {1, 2}) {
        set_num_threads(threads);
        auto out = testing::make_tensor({c.B, c.Nq, c.H, c.E}, layout);
        auto dout = testing::random_tensor({c.B, c.Nq, c.H, c.E}, layout, rng);
        std::mt19937_64 same(11);
        testing::fill_uniform(dout.view, same, -1, 1);
        auto dq = testing::make_tensor(in.q.extent(), layout), dk = testing::make_tensor(in.k.extent(), layout),
             dv = testing::make_tensor(in.v.extent(), layout);
        linear_attention_forward(out.view, in.q.view, in.k.view, in.v.view, options);
        linear_attention_backward(dq.view, dk.view, dv.view, dout.view, in.q.view, in.k.view, in.v.view, options);
        std::vector<float> all = out.storage;
        for (const auto* t : {&dq, &dk, &dv}) all.insert(all.end(), t->storage.begin(), t->storage.end());
        results.push_back(all);
      }
      set_num_threads(0);
      ASSERT_EQ(results[0].size(), results[1].size());
      EXPECT_EQ(0, std::memcmp(results[0].data(), results[1].data(), results[0].size() * sizeof(float)))
          << (causal ? "causal" : "non-causal") << (layout == Layout::bnhd ? " bnhd" : " bhnd");
    }
}

}  // namespace
}  // namespace linattn
