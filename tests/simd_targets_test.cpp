// Every operator under every Highway target compiled into the library that this CPU can run, one target at a time
// (hwy::SetSupportedTargetsForTest), against the fp64 oracle. On an AVX-512 machine the rest of the suite only ever
// runs the AVX3 code; this runs AVX2, SSE4, SSSE3 and SCALAR too. hwy 1.0.3: SetSupportedTargetsForTest(t) stores the
// mock and de-initialises the chosen-target cache, so the next HWY_DYNAMIC_DISPATCH in any translation unit re-reads
// SupportedTargets() (= t).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "simd_targets_test.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace linattn::HWY_NAMESPACE {
// The target this copy was compiled for: dispatching to it names the target dispatch picked.
int64_t CompiledTarget() { return HWY_TARGET; }
// fp32 lanes of a full vector under this target: on SVE the vector length the CPU runs at, not a compile-time one.
int64_t FloatLanes() { return int64_t(hwy::HWY_NAMESPACE::Lanes(hwy::HWY_NAMESPACE::ScalableTag<float>())); }
}  // namespace linattn::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "hwy/targets.h"
#include "linattn/decay.hpp"
#include "linattn/delta.hpp"
#include "linattn/favor.hpp"
#include "linattn/feature_map.hpp"
#include "linattn/half_attention.hpp"
#include "linattn/linear_attention.hpp"
#include "linattn/linformer.hpp"
#include "linattn/recurrent_state.hpp"
#include "linattn/reference.hpp"
#include "linattn/softmax_attention.hpp"
#include "linear_support.hpp"
#include "support/tensors.hpp"

namespace linattn {
HWY_EXPORT(CompiledTarget);
HWY_EXPORT(FloatLanes);
namespace {

using testing::Layout;
using testing::LinearCase;
using testing::relative_error;
using testing::Tensor32;

// The bounds of the per-operator tests: linear_attention_test.cpp, softmax_attention_test.cpp, softmax_decode_test.cpp,
// causal_linear_attention_test.cpp, favor_linear_test.cpp (1e-5) and linformer_attention_test.cpp (2e-5 forward). A
// narrower vector only reorders the same sums.
constexpr double kBound = 1e-5;
constexpr double kLinformerBound = 2e-5;
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr Layout bnhd = Layout::bnhd, bhnd = Layout::bhnd, padded = Layout::padded;

// Dispatch goes to `target` while this lives; the CPU's own choice returns on exit, also when an assertion leaves the
// scope early.
class ForcedTarget {
 public:
  explicit ForcedTarget(int64_t target) { hwy::SetSupportedTargetsForTest(target); }
  ~ForcedTarget() { hwy::SetSupportedTargetsForTest(0); }
  ForcedTarget(const ForcedTarget&) = delete;
  ForcedTarget& operator=(const ForcedTarget&) = delete;
};

// Compiled here with the library's flags (no -march), so HWY_TARGETS is the library's set.
std::vector<int64_t> runnable_targets() {
  hwy::SetSupportedTargetsForTest(0);
  return hwy::SupportedAndGeneratedTargets();  // best first
}

std::string target_names(const std::vector<int64_t>& targets) {
  std::string names;
  for (int64_t t : targets) names.append(names.empty() ? "" : " ").append(hwy::TargetName(t));
  return names;
}

// What the CPU's own dispatch chose, printed in every run. scripts/cross_test.sh runs the suite once per emulated CPU
// and names the target and the fp32 lanes that CPU must give (LINATTN_EXPECT_TARGET, spelt as hwy::TargetName;
// LINATTN_EXPECT_LANES): a qemu option that did not take effect fails here instead of passing as that target's run.
TEST(SimdDispatch, ChosenTargetIsTheExpectedOne) {
  hwy::SetSupportedTargetsForTest(0);
  const std::string chosen = hwy::TargetName(HWY_DYNAMIC_DISPATCH(CompiledTarget)());
  const int64_t lanes = HWY_DYNAMIC_DISPATCH(FloatLanes)();
  std::printf("[ target   ] dispatch chose %s, %lld fp32 lanes\n", chosen.c_str(), static_cast<long long>(lanes));
  RecordProperty("chosen", chosen);
  RecordProperty("lanes", std::to_string(lanes));
  const char* expected = std::getenv("LINATTN_EXPECT_TARGET");
  const char* expected_lanes = std::getenv("LINATTN_EXPECT_LANES");
  if (!expected && !expected_lanes)
    GTEST_SKIP() << "no LINATTN_EXPECT_TARGET or _LANES to compare " << chosen << " with";
  if (expected) {
    EXPECT_EQ(chosen, expected) << "the CPU gave dispatch another target than the run is for";
  }
  if (expected_lanes) {
    EXPECT_EQ(lanes, std::atoll(expected_lanes)) << "the vector length is not the run's";
  }
}

class SimdTargets : public ::testing::Test {
 protected:
  void SetUp() override {
    targets_ = runnable_targets();
    if (targets_.size() < 2)
      GTEST_SKIP() << "only " << target_names(targets_) << " is compiled and runs here: no other target to test";
  }
  void TearDown() override { hwy::SetSupportedTargetsForTest(0); }

  // Runs body() under each target in turn and prints the worst error that expect_within saw there.
  template <class Body>
  void for_each_target(const char* what, Body&& body) {
    for (int64_t target : targets_) {
      SCOPED_TRACE(hwy::TargetName(target));
      ForcedTarget forced(target);
      ASSERT_EQ(HWY_DYNAMIC_DISPATCH(CompiledTarget)(), target) << "dispatch did not follow the forced target";
      worst_ = 0;
      body();
      std::printf("[ target   ] %-6s %-28s worst relative error %.2e\n", hwy::TargetName(target), what, worst_);
      RecordProperty(std::string(hwy::TargetName(target)) + "_worst", std::to_string(worst_));
    }
  }
  void expect_within(double error, double bound, const char* what) {
    worst_ = std::max(worst_, error);
    EXPECT_LE(error, bound) << what;
  }

  std::vector<int64_t> targets_;
  double worst_ = 0;
};

TEST_F(SimdTargets, DispatchFollowsEachTarget) {
  const std::string names = target_names(targets_);
  std::printf("[ target   ] compiled and runnable: %s\n", names.c_str());
  RecordProperty("targets", names);
  for_each_target("dispatch", [] {});  // the dispatch check is in for_each_target
}

// One linear attention problem (forward and backward through the non-causal or the causal entry point) with the
// oracle's results computed once for all targets.
struct LinearProblem {
  testing::LinearInputs in;
  Tensor32 dout;
  std::vector<int64_t> lengths;
  LinearAttentionOptions options;
  Layout layout;
  reference::Tensor out64;
  reference::State final64;
  reference::Gradients grads64;

  LinearProblem(const LinearCase& c, const char* map, bool normalize, bool causal, int64_t chunk, bool key_lengths,
                Layout layout_, uint64_t seed)
      : layout(layout_) {
    std::mt19937_64 rng(seed);
    const bool positive = std::string(map) == "identity";  // keeps den away from 0
    in = testing::random_inputs(c, layout, rng, positive ? 0.05f : -1.0f, 1.0f);
    dout = testing::random_tensor({c.B, c.Nq, c.H, c.E}, layout, rng);
    if (key_lengths) lengths = testing::spread_key_lengths(c, rng);
    options.feature_map = feature_map_by_name(map);
    options.normalize = normalize;
    options.causal = causal;
    if (chunk > 0) options.chunk_size = chunk;
    options.key_lengths = lengths;
    const auto q = reference::to_double(in.q.view), k = reference::to_double(in.k.view),
               v = reference::to_double(in.v.view);
    out64 = reference::linear_attention_forward(q, k, v, options, nullptr, &final64);
    grads64 = reference::linear_attention_backward(reference::to_double(dout.view), q, k, v, options);
  }
  LinearProblem(const LinearProblem&) = delete;  // options.key_lengths points into lengths
  LinearProblem& operator=(const LinearProblem&) = delete;
};

class SimdTargetsLinear : public SimdTargets {
 protected:
  // Forward and backward under the current target against the oracle; the causal problems go through
  // causal_linear_attention_* and check the final state too.
  void check(const LinearProblem& p) {
    const auto [B, Nq, H, D] = p.in.q.extent();
    auto out = testing::make_tensor({B, Nq, H, p.in.v.extent()[3]}, p.layout);
    auto dq = testing::make_tensor(p.in.q.extent(), p.layout), dk = testing::make_tensor(p.in.k.extent(), p.layout),
         dv = testing::make_tensor(p.in.v.extent(), p.layout);
    const auto& [q, k, v] = p.in;
    if (p.options.causal) {
      RecurrentState final_state;
      causal_linear_attention_forward(out.view, q.view, k.view, v.view, p.options, nullptr, &final_state);
      causal_linear_attention_backward(dq.view, dk.view, dv.view, p.dout.view, q.view, k.view, v.view, p.options);
      expect_within(testing::state_error(final_state, p.final64), kBound, "final state");
    } else {
      linear_attention_forward(out.view, q.view, k.view, v.view, p.options);
      linear_attention_backward(dq.view, dk.view, dv.view, p.dout.view, q.view, k.view, v.view, p.options);
    }
    expect_within(relative_error(out.view, p.out64), kBound, "out");
    expect_within(relative_error(dq.view, p.grads64.dq), kBound, "dq");
    expect_within(relative_error(dk.view, p.grads64.dk), kBound, "dk");
    expect_within(relative_error(dv.view, p.grads64.dv), kBound, "dv");
  }
  template <size_t n>
  void check_under_each_target(const char* what, const LinearProblem (&problems)[n]) {
    for_each_target(what, [&] {
      for (const LinearProblem& p : problems) check(p);
    });
  }
};

// D = 59, E = 37: neither a multiple of any vector width, so every target runs its tail code. N = 1 runs without the
// normaliser: normalised, one key gives out = v·s/(s + eps), whose dq and dk are O(eps) and pure rounding (see
// favor_linear_test.cpp).
TEST_F(SimdTargetsLinear, NonCausalForwardAndBackward) {
  const LinearProblem problems[] = {
      {{2, 65, 65, 3, 59, 37}, "elu", true, false, 0, false, bnhd, 1},
      {{2, 65, 65, 3, 59, 37}, "relu", true, false, 0, true, bhnd, 2},
      {{2, 65, 65, 3, 59, 37}, "identity", true, false, 0, false, padded, 3},
      {{2, 1, 1, 3, 59, 37}, "elu", false, false, 0, false, padded, 4},
      {{2, 65, 1, 3, 59, 37}, "relu", false, false, 0, false, bnhd, 5},
  };
  check_under_each_target("linear non-causal", problems);
}

// Chunk 7 (many chunks, a ragged last one) and the default chunk, with key lengths on one problem.
TEST_F(SimdTargetsLinear, CausalForwardAndBackward) {
  const LinearProblem problems[] = {
      {{2, 65, 65, 3, 59, 37}, "elu", true, true, 7, true, bnhd, 11},
      {{2, 65, 65, 3, 59, 37}, "relu", true, true, 0, false, padded, 12},
      {{2, 65, 65, 3, 59, 37}, "identity", true, true, 7, false, bhnd, 13},
      {{2, 1, 1, 3, 59, 37}, "elu", false, true, 0, false, bnhd, 14},
  };
  check_under_each_target("linear causal", problems);
}

TensorView token(TensorView x, int64_t n) {
  x.data += n * x.stride[1];
  x.extent[1] = 1;
  return x;
}

// Token by token from the zero state: every output and the final state against the causal oracle.
TEST_F(SimdTargets, RecurrentSteps) {
  const LinearCase c{2, 6, 6, 3, 59, 37};
  std::mt19937_64 rng(21);
  auto in = testing::random_inputs(c, padded, rng);
  LinearAttentionOptions options;
  options.causal = true;
  reference::State final64;
  const auto want =
      reference::linear_attention_forward(reference::to_double(in.q.view), reference::to_double(in.k.view),
                                          reference::to_double(in.v.view), options, nullptr, &final64);
  for_each_target("recurrent_step", [&] {
    auto out = testing::make_tensor({c.B, c.Nq, c.H, c.E}, padded);
    RecurrentState state(c.B, c.H, c.D, c.E, "elu");
    for (int64_t n = 0; n < c.Nq; ++n)
      recurrent_step(token(out.view, n), token(in.q.view, n), token(in.k.view, n), token(in.v.view, n), state, options);
    expect_within(relative_error(out.view, want), kBound, "out");
    expect_within(testing::state_error(state, final64), kBound, "state");
  });
}

// One softmax attention problem; k and v use the next layout, as in softmax_attention_test.cpp.
struct SoftmaxProblem {
  Tensor32 q, k, v, dout;
  std::vector<int64_t> lengths;
  SoftmaxAttentionOptions options;
  Layout layout, other;
  reference::Tensor out64;
  std::vector<double> lse64;
  reference::Gradients grads64;

  SoftmaxProblem(int64_t B, int64_t H, int64_t Nq, int64_t Nk, int64_t D, int64_t E, Layout layout_, bool causal,
                 std::vector<int64_t> key_lengths, uint64_t seed)
      : lengths(std::move(key_lengths)), layout(layout_), other(testing::kAllLayouts[(int(layout_) + 1) % 3]) {
    std::mt19937_64 rng(seed);
    q = testing::random_tensor({B, Nq, H, D}, layout, rng);
    k = testing::random_tensor({B, Nk, H, D}, other, rng);
    v = testing::random_tensor({B, Nk, H, E}, other, rng);
    dout = testing::random_tensor({B, Nq, H, E}, layout, rng);
    options.causal = causal;
    options.key_lengths = lengths;
    const auto q64 = reference::to_double(q.view), k64 = reference::to_double(k.view),
               v64 = reference::to_double(v.view);
    out64 = reference::softmax_attention_forward(q64, k64, v64, options, &lse64);
    grads64 = reference::softmax_attention_backward(reference::to_double(dout.view), q64, k64, v64, options);
  }
  SoftmaxProblem(const SoftmaxProblem&) = delete;  // options.key_lengths points into lengths
  SoftmaxProblem& operator=(const SoftmaxProblem&) = delete;

  Tensor32 output() const {
    const auto [B, Nq, H, D] = q.extent();
    return testing::make_tensor({B, Nq, H, v.extent()[3]}, layout);
  }
  std::vector<float> lse_buffer() const {
    const auto [B, Nq, H, D] = q.extent();
    return std::vector<float>(size_t(B * H * Nq), kNaN);
  }
};

class SimdTargetsSoftmax : public SimdTargets {
 protected:
  // The forward under the current target, out and lse against the oracle.
  void forward(Tensor32& out, std::vector<float>& lse, const SoftmaxProblem& p) {
    out = p.output();
    lse = p.lse_buffer();
    softmax_attention_forward(out.view, lse, p.q.view, p.k.view, p.v.view, p.options);
    expect_within(relative_error(out.view, p.out64), kBound, "out");
    expect_within(relative_error(lse, p.lse64), kBound, "lse");
  }
};

TEST_F(SimdTargetsSoftmax, ForwardAndBackward) {
  const SoftmaxProblem problems[] = {
      {2, 3, 65, 65, 59, 37, bnhd, false, {}, 31},
      {2, 3, 65, 65, 59, 37, bhnd, true, {}, 32},
      {2, 3, 65, 97, 59, 37, padded, true, {97, 40}, 33},  // cross-attention, key lengths
      {2, 3, 97, 63, 59, 37, bnhd, false, {63, 1}, 34},
  };
  for_each_target("softmax", [&] {
    for (const SoftmaxProblem& p : problems) {
      Tensor32 out;
      std::vector<float> lse;
      forward(out, lse, p);
      auto dq = testing::make_tensor(p.q.extent(), p.layout), dk = testing::make_tensor(p.k.extent(), p.other),
           dv = testing::make_tensor(p.v.extent(), p.other);
      softmax_attention_backward(dq.view, dk.view, dv.view, p.dout.view, p.q.view, p.k.view, p.v.view, out.view, lse,
                                 p.options);
      expect_within(relative_error(dq.view, p.grads64.dq), kBound, "dq");
      expect_within(relative_error(dk.view, p.grads64.dk), kBound, "dk");
      expect_within(relative_error(dv.view, p.grads64.dv), kBound, "dv");
    }
  });
}

// Nq ≤ 16 takes the decode path: a dot product per key (Nq ≤ 2) or the tile product; 2100 keys make two key chunks of
// 2048, the second partial.
TEST_F(SimdTargetsSoftmax, DecodeForward) {
  const SoftmaxProblem problems[] = {
      {2, 3, 1, 300, 59, 37, bnhd, false, {}, 41},
      {2, 3, 2, 2100, 64, 64, padded, true, {2100, 1500}, 42},
      {2, 3, 5, 97, 59, 37, bhnd, true, {}, 43},
      {2, 3, 16, 65, 64, 59, padded, false, {65, 3}, 44},
  };
  for_each_target("softmax decode", [&] {
    for (const SoftmaxProblem& p : problems) {
      Tensor32 out;
      std::vector<float> lse;
      forward(out, lse, p);
    }
  });
}

TEST_F(SimdTargets, FavorNonCausalForward) {
  const LinearCase c{2, 65, 65, 3, 59, 37};
  std::mt19937_64 rng(51);
  auto in = testing::random_inputs(c, bhnd, rng);
  LinearAttentionOptions options;
  options.feature_map = favor_feature_map(c.D, {.seed = 42});
  const auto want = reference::linear_attention_forward(
      reference::to_double(in.q.view), reference::to_double(in.k.view), reference::to_double(in.v.view), options);
  for_each_target("favor+ forward", [&] {
    auto out = testing::make_tensor({c.B, c.Nq, c.H, c.E}, bhnd);
    linear_attention_forward(out.view, in.q.view, in.k.view, in.v.view, options);
    expect_within(relative_error(out.view, want), kBound, "out");
  });
}

TEST_F(SimdTargets, LinformerForward) {
  const int64_t B = 2, H = 3, Nq = 65, Nk = 97, D = 59, Ev = 37, P = 16, N_max = 128;
  std::mt19937_64 rng(61);
  auto q = testing::random_tensor({B, Nq, H, D}, padded, rng), k = testing::random_tensor({B, Nk, H, D}, padded, rng),
       v = testing::random_tensor({B, Nk, H, Ev}, padded, rng);
  // Entries ~ 1/√Nk keep the projected keys O(1), as in linformer_attention_test.cpp.
  const float scale = 2.0f / std::sqrt(float(Nk));
  std::uniform_real_distribution<float> entry(-scale, scale);
  std::vector<float> E(size_t(H * P * N_max)), F(E.size());
  for (float& x : E) x = entry(rng);
  for (float& x : F) x = entry(rng);
  const std::vector<int64_t> lengths{97, 50};
  LinformerOptions options;
  options.projected_length = P;
  options.max_length = N_max;
  options.key_lengths = lengths;
  std::vector<double> lse64;
  const auto want = reference::linformer_attention_forward(
      reference::to_double(q.view), reference::to_double(k.view), reference::to_double(v.view),
      std::vector<double>(E.begin(), E.end()), std::vector<double>(F.begin(), F.end()), options, &lse64);
  for_each_target("linformer forward", [&] {
    auto out = testing::make_tensor({B, Nq, H, Ev}, padded);
    std::vector<float> lse(size_t(B * H * Nq), kNaN);
    linformer_attention_forward(out.view, lse, q.view, k.view, v.view, E, F, options);
    expect_within(relative_error(out.view, want), kLinformerBound, "out");
    expect_within(relative_error(lse, lse64), kLinformerBound, "lse");
  });
}

// As linear_numerics_test.cpp compares them: the same NaN-ness or infinity, else within about 2 ulp of the fp64 value
// (an underflowed e^-90 may be flushed to 0).
bool special_close(float got, double want) {
  if (std::isnan(want)) return std::isnan(got);
  if (std::isinf(want)) return double(got) == want;
  return std::abs(double(got) - want) <= 2.5e-7 * std::abs(want) + 1e-38;
}

// The elementwise maps' own kernels (elu+1's vector exp, relu) on special values, 37 of them so that every target runs
// whole vectors and a tail.
TEST_F(SimdTargets, ElementwiseMapsOnSpecialValues) {
  const float specials[] = {0.0f, 1.0f, -1.0f, -87.3f, -90.0f, kInf, kNaN, -0.0f, -kInf, 88.5f, -20.0f, 1e-30f};
  std::vector<float> x(37), dphi(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = specials[(i * 5) % std::size(specials)];
    dphi[i] = 0.25f + 0.125f * float(i % 7);
  }
  const std::vector<double> x64(x.begin(), x.end()), dphi64(dphi.begin(), dphi.end());
  const int64_t n = int64_t(x.size());
  for (const char* name : {"elu", "relu"}) {
    const FeatureMapPtr map = feature_map_by_name(name);
    std::vector<double> phi64(x.size()), dx64(x.size());
    map->forward_reference(phi64.data(), x64.data(), 1, n, FeatureRole::key);
    map->backward_reference(dx64.data(), dphi64.data(), x64.data(), 1, n, FeatureRole::key);
    for_each_target(name, [&] {
      std::vector<float> phi(x.size()), dx(x.size());
      map->forward(phi.data(), x.data(), 1, n, FeatureRole::key);
      map->backward(dx.data(), dphi.data(), x.data(), 1, n, FeatureRole::key);
      for (size_t i = 0; i < x.size(); ++i) {
        EXPECT_TRUE(special_close(phi[i], phi64[i]))
            << name << " x=" << x[i] << " phi " << phi[i] << " want " << phi64[i];
        EXPECT_TRUE(special_close(dx[i], dx64[i])) << name << " x=" << x[i] << " dx " << dx[i] << " want " << dx64[i];
        for (const auto& [got, want] : {std::pair{phi[i], phi64[i]}, std::pair{dx[i], dx64[i]}})
          if (std::isfinite(want) && std::abs(want) >= std::numeric_limits<float>::min())  // not flushed
            worst_ = std::max(worst_, std::abs(double(got) - want) / std::abs(want));
      }
    });
  }
}

// FNV-1a over the bytes: a short fingerprint of an output's bits for the log.
uint64_t fingerprint(const std::vector<float>& x) {
  uint64_t h = 14695981039346656037ull;
  for (float f : x) {
    uint32_t bits;
    std::memcpy(&bits, &f, sizeof bits);
    for (int byte = 0; byte < 4; ++byte) h = (h ^ ((bits >> (8 * byte)) & 0xffu)) * 1099511628211ull;
  }
  return h;
}

// The forcing is real: lane counts change the order of the sums, so the widest and the narrowest target give different
// bits somewhere (each output still within the bounds above).
TEST_F(SimdTargets, WidestAndNarrowestDifferBitwise) {
  const LinearProblem linear({2, 65, 65, 3, 59, 37}, "elu", true, false, 0, false, bnhd, 71);
  const SoftmaxProblem softmax(2, 3, 65, 65, 59, 37, bnhd, false, {}, 72);
  std::vector<std::vector<std::vector<float>>> runs;  // [target][output]
  for (int64_t target : targets_) {
    ForcedTarget forced(target);
    auto a = testing::make_tensor({2, 65, 3, 37}, bnhd), b = softmax.output();
    auto lse = softmax.lse_buffer();
    linear_attention_forward(a.view, linear.in.q.view, linear.in.k.view, linear.in.v.view, linear.options);
    softmax_attention_forward(b.view, lse, softmax.q.view, softmax.k.view, softmax.v.view, softmax.options);
    runs.push_back({a.storage, b.storage});
    std::printf("[ target   ] %-6s bits: linear %016llx softmax %016llx\n", hwy::TargetName(target),
                static_cast<unsigned long long>(fingerprint(a.storage)),
                static_cast<unsigned long long>(fingerprint(b.storage)));
  }
  const auto &widest = runs.front(), &narrowest = runs.back();
  int differing = 0;
  for (size_t i = 0; i < widest.size(); ++i) {
    ASSERT_EQ(widest[i].size(), narrowest[i].size());
    differing += std::memcmp(widest[i].data(), narrowest[i].data(), widest[i].size() * sizeof(float)) != 0;
  }
  EXPECT_GE(differing, 1) << "no output changed between " << hwy::TargetName(targets_.front()) << " and "
                          << hwy::TargetName(targets_.back()) << ": the target was not really switched";
}

// The half-precision kernels of every target (kernels/half_lanes-inl.h): the arrays against the scalar rounding bit for
// bit (SSE4 and SCALAR take the scalar f16 path, AVX2 and up F16C), and the native bf16/f16 decode and bf16-state step
// against the same calls on the widened values in fp32 (the same sums in the same order: equal to fp32 rounding).
TEST_F(SimdTargets, HalfPrecision) {
  std::vector<float> x;
  for (int i = 0; i < 70; ++i) x.push_back(std::ldexp(float(i * 37 % 101) - 50.5f, i % 30 - 20));
  for (float v : {kInf, -kInf, 65520.0f, 65519.0f, std::ldexp(1.0f, -25), std::ldexp(1.5f, -24), -0.0f}) x.push_back(v);
  std::mt19937_64 rng(5);
  const Tensor32 q = testing::random_tensor({1, 2, 3, 24}, Layout::bnhd, rng),
                 k = testing::random_tensor({1, 300, 3, 24}, Layout::bnhd, rng),
                 v = testing::random_tensor({1, 300, 3, 24}, bhnd, rng);
  for_each_target("half conversions, decode, bf16 step", [&] {
    std::vector<bf16> b(x.size());
    std::vector<f16> h(x.size());
    convert(std::span<bf16>(b), std::span<const float>(x));
    convert(std::span<f16>(h), std::span<const float>(x));
    std::vector<float> wh(x.size());
    convert(std::span<float>(wh), std::span<const f16>(h));
    for (size_t i = 0; i < x.size(); ++i) {
      EXPECT_EQ(b[i].bits, to_bf16(x[i]).bits) << x[i];
      EXPECT_EQ(h[i].bits, to_f16(x[i]).bits) << x[i];
      EXPECT_EQ(std::bit_cast<uint32_t>(wh[i]), std::bit_cast<uint32_t>(to_float(h[i]))) << x[i];
    }
    // Decode: the half call against fp32 on the widened k and v (q and out widened the same way).
    std::vector<bf16> kb(k.storage.size()), vb(v.storage.size()), qb(q.storage.size()), ob(2 * 3 * 24);
    convert(std::span<bf16>(kb), std::span<const float>(k.storage));
    convert(std::span<bf16>(vb), std::span<const float>(v.storage));
    convert(std::span<bf16>(qb), std::span<const float>(q.storage));
    std::vector<float> kw(kb.size()), vw(vb.size()), qw(qb.size()), o32(ob.size()), lse(6), lse16(6), ow(ob.size());
    convert(std::span<float>(kw), std::span<const bf16>(kb));
    convert(std::span<float>(vw), std::span<const bf16>(vb));
    convert(std::span<float>(qw), std::span<const bf16>(qb));
    const auto at = [](auto* data, const Tensor32& t) {
      return View4<std::remove_pointer_t<decltype(data)>>(data, t.view.extent, t.view.stride);
    };
    softmax_attention_forward(linattn::bnhd(o32.data(), 1, 2, 3, 24), lse, at(qw.data(), q), at(kw.data(), k),
                              at(vw.data(), v));
    softmax_attention_forward(linattn::bnhd(ob.data(), 1, 2, 3, 24), lse16, at(qb.data(), q), at(kb.data(), k),
                              at(vb.data(), v));
    convert(std::span<float>(ow), std::span<const bf16>(ob));
    for (size_t i = 0; i < ow.size(); ++i) EXPECT_EQ(ow[i], to_float(to_bf16(o32[i]))) << i;
    // One step on a bf16 state against the fp32 step on the widened state, S rounded after.
    RecurrentState s16(1, 3, 24, 24, "elu", DType::bf16), s32(1, 3, 24, 24);
    for (size_t i = 0; i < s32.S().size(); ++i) s32.S()[i] = to_float(s16.S_bf16()[i] = to_bf16(float(i % 7) * 0.25f));
    std::vector<float> a(3 * 24), c(3 * 24);
    const auto one = [&](int64_t n) { return ConstTensorView(qw.data() + n * 72, {1, 1, 3, 24}, {72, 72, 24, 1}); };
    recurrent_step(linattn::bnhd(a.data(), 1, 1, 3, 24), one(0), one(1), one(0), s16);
    recurrent_step(linattn::bnhd(c.data(), 1, 1, 3, 24), one(0), one(1), one(0), s32);
    for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i], c[i]) << i;
    for (size_t i = 0; i < s32.S().size(); ++i) EXPECT_EQ(s16.S_bf16()[i].bits, to_bf16(s32.S()[i]).bits) << i;
    // The same for the gated delta rule's step (kernels::delta_update_readout on bf16 rows), E = 24:
    // a panel of vectors and, on wide targets, scalar columns.
    DeltaRuleOptions gated;
    gated.gate = DeltaGate::token;
    RecurrentState d16(1, 3, 24, 24, delta_name(gated.gate), DType::bf16), d32(1, 3, 24, 24, delta_name(gated.gate));
    for (size_t i = 0; i < d32.S().size(); ++i) d32.S()[i] = to_float(d16.S_bf16()[i] = to_bf16(float(i % 5) * 0.125f));
    std::vector<float> beta(3, 0.5f), g(3, -0.25f);
    const ConstTensorView b1(beta.data(), {1, 1, 3, 1}, {3, 3, 1, 1}), g1(g.data(), {1, 1, 3, 1}, {3, 3, 1, 1});
    delta_rule_step(linattn::bnhd(a.data(), 1, 1, 3, 24), one(0), one(1), one(0), b1, g1, d16, gated);
    delta_rule_step(linattn::bnhd(c.data(), 1, 1, 3, 24), one(0), one(1), one(0), b1, g1, d32, gated);
    for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i], c[i]) << i;
    for (size_t i = 0; i < d32.S().size(); ++i) EXPECT_EQ(d16.S_bf16()[i].bits, to_bf16(d32.S()[i]).bits) << i;
  });
}

// The decayed family's token-by-token forward over blocks of tokens (kernels/decay_scan.cpp) under every target,
// against the oracle: K = 9 gives tiles of 4 key rows and one; V = 85 gives each target tiles of 4 vectors, fewer and
// a padded lane tail; 70 tokens with gates down to −12 cut some blocks short. Each decay, from a non-zero state.
TEST_F(SimdTargets, DecayedRecurrentForward) {
  const int64_t B = 2, T = 70, H = 3, K = 9, V = 85;
  std::mt19937_64 rng(31);
  const Tensor32 q = testing::random_tensor({B, T, H, K}, bnhd, rng),
                 k = testing::random_tensor({B, T, H, K}, bnhd, rng),
                 v = testing::random_tensor({B, T, H, V}, padded, rng),
                 g_key = testing::random_tensor({B, T, H, K}, bnhd, rng, -12.0f, 0.0f),
                 g_token = testing::random_tensor({B, T, H, 1}, bnhd, rng, -3.0f, 0.0f),
                 q2 = testing::random_tensor({B, T, 2 * H, K}, bnhd, rng);  // query groups: 2 query heads a head
  std::vector<float> initial(size_t(B * H * K * V));
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (float& x : initial) x = u(rng);
  const std::vector<double> initial64(initial.begin(), initial.end());
  for (Decay decay : {Decay::none, Decay::retention, Decay::token, Decay::key}) {
    DecayedAttentionOptions options;
    options.decay = decay;
    const ConstTensorView g = decay == Decay::key     ? ConstTensorView(g_key.view)
                              : decay == Decay::token ? ConstTensorView(g_token.view)
                                                      : ConstTensorView{};
    reference::Tensor g64;
    if (g.data) g64 = reference::to_double(g);
    const reference::DecayedOutput want = reference::decayed_attention_forward(
        reference::to_double(q.view), reference::to_double(k.view), reference::to_double(v.view),
        g.data ? &g64 : nullptr, options, &initial64);
    const reference::DecayedOutput want2 = reference::decayed_attention_forward(
        reference::to_double(q2.view), reference::to_double(k.view), reference::to_double(v.view),
        g.data ? &g64 : nullptr, options, &initial64);
    for_each_target(("decayed_recurrent_forward " + decay_name(decay)).c_str(), [&] {
      auto out = testing::make_tensor({B, T, H, V}, padded), out2 = testing::make_tensor({B, T, 2 * H, V}, padded);
      std::vector<float> state = initial, state2 = initial;
      decayed_recurrent_forward(out.view, q.view, k.view, v.view, g, state, options);
      expect_within(relative_error(out.view, want.out), kBound, "out");
      expect_within(relative_error(state, want.final_state), kBound, "state");
      decayed_recurrent_forward(out2.view, q2.view, k.view, v.view, g, state2, options);
      expect_within(relative_error(out2.view, want2.out), kBound, "out of query groups");
      EXPECT_EQ(state2, state);  // the state advances once, as without them
    });
  }
}

// The three decode steps on a bf16 state's split rows (even and odd columns: kernels/half_lanes-inl.h's pairs), with a
// decay per key (GLA, KDA) and none, under every target: E = 85 gives each target panels of 4 vectors, single vectors
// and scalar columns. S holds a NaN, ±∞, subnormals and ties that round to even; each output and each rounded row is
// the fp32 step's on the widened state, bit for bit.
TEST_F(SimdTargets, Bf16StateSplitRows) {
  for_each_target("bf16 state, split rows", [&] {
    const int64_t K = 7, E = 85;
    std::vector<float> qk(2 * 3 * K), vals(3 * E), gates(3 * K), beta(3, 0.75f), o16(3 * E), o32(3 * E);
    for (size_t i = 0; i < qk.size(); ++i) qk[i] = 0.25f * float(int(i * 5 % 11) - 5);
    for (size_t i = 0; i < vals.size(); ++i) vals[i] = 0.125f * float(int(i * 7 % 13) - 6);
    for (size_t i = 0; i < gates.size(); ++i) gates[i] = -0.1f * float(i % 4);
    const ConstTensorView qv(qk.data(), {1, 1, 3, K}, {3 * K, 3 * K, K, 1}),
        kv(qk.data() + 3 * K, qv.extent, qv.stride), vv(vals.data(), {1, 1, 3, E}, {3 * E, 3 * E, E, 1}),
        gk(gates.data(), qv.extent, qv.stride), b1(beta.data(), {1, 1, 3, 1}, {3, 3, 1, 1});
    const float special[] = {std::nanf(""),
                             kInf,
                             -kInf,
                             std::ldexp(1.0f, -130),
                             -std::ldexp(3.0f, -133),
                             1.0f + std::ldexp(1.0f, -8),
                             1.0f + std::ldexp(3.0f, -8)};
    const auto fill = [&](RecurrentState& half, RecurrentState& full) {
      for (size_t i = 0; i < full.S().size(); ++i) {
        const float x = i % 29 < 7 ? special[i % 29] : 0.5f * float(int(i % 19) - 9);
        full.S()[i] = to_float(half.S_bf16()[i] = to_bf16(x));
      }
    };
    // Bit for bit, but a NaN's sign and payload: which of two NaN operands an operation passes on is left open by
    // IEEE 754, and compilers commute additions (seen on SSE4, whose MulAdd is a product and a sum).
    const auto same_bits = [](float x, float y) {
      return std::isnan(x) ? std::isnan(y) : std::bit_cast<uint32_t>(x) == std::bit_cast<uint32_t>(y);
    };
    const auto same = [&](const RecurrentState& half, const RecurrentState& full, const char* what) {
      for (size_t i = 0; i < o32.size(); ++i) EXPECT_PRED2(same_bits, o16[i], o32[i]) << what << " out " << i;
      for (size_t i = 0; i < full.S().size(); ++i)
        EXPECT_PRED2(same_bits, to_float(half.S_bf16()[i]), to_float(to_bf16(full.S()[i]))) << what << " S " << i;
    };
    const TensorView out16 = linattn::bnhd(o16.data(), 1, 1, 3, E), out32 = linattn::bnhd(o32.data(), 1, 1, 3, E);
    {
      RecurrentState s16(1, 3, K, E, "elu", DType::bf16), s32(1, 3, K, E);
      fill(s16, s32);
      recurrent_step(out16, qv, kv, vv, s16);
      recurrent_step(out32, qv, kv, vv, s32);
      same(s16, s32, "recurrent_step");
    }
    DecayedAttentionOptions gla;
    gla.decay = Decay::key;
    RecurrentState g16(1, 3, K, E, decay_name(gla.decay), DType::bf16), g32(1, 3, K, E, decay_name(gla.decay));
    fill(g16, g32);
    decayed_step(out16, qv, kv, vv, gk, g16, gla);
    decayed_step(out32, qv, kv, vv, gk, g32, gla);
    same(g16, g32, "decayed_step (gla)");
    DeltaRuleOptions kda;
    kda.gate = DeltaGate::key;
    RecurrentState k16(1, 3, K, E, delta_name(kda.gate), DType::bf16), k32(1, 3, K, E, delta_name(kda.gate));
    fill(k16, k32);
    delta_rule_step(out16, qv, kv, vv, b1, gk, k16, kda);
    delta_rule_step(out32, qv, kv, vv, b1, gk, k32, kda);
    same(k16, k32, "delta_rule_step (kda)");
  });
}

}  // namespace
}  // namespace linattn
#endif  // HWY_ONCE
