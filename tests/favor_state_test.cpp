// A random-feature map's name() identifies its draw (kind, D, m, seed, orthogonal), and a recurrent
// state carries that name through its file: a state summed under one draw is refused by a map with
// another, and accepted (continuing bitwise as if never saved) by the same draw.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "linattn/linear_attention.hpp"
#include "linattn/favor.hpp"
#include "support/temp_dir.hpp"
#include "support/tensors.hpp"

namespace linattn {
namespace {

using testing::error_of;
using testing::Layout;
using testing::random_tensor;
using testing::Tensor32;

constexpr int64_t B = 2, H = 3, N = 12, E = 5;

LinearAttentionOptions favor(int64_t dim, int64_t m, uint64_t seed, bool orthogonal = true) {
  LinearAttentionOptions o;
  o.feature_map = favor_feature_map(dim, {.n_features = m, .seed = seed, .orthogonal = orthogonal});
  return o;
}

// Token t of a [B, N, H, X] view, as [B, 1, H, X].
template <class View>
View token(View view, int64_t t) {
  view.data += view.offset(0, t, 0, 0);
  view.extent[1] = 1;
  return view;
}

struct Inputs {
  Tensor32 q, k, v, out;
  explicit Inputs(int64_t dim) {
    std::mt19937_64 rng{uint64_t(dim)};
    q = random_tensor({B, N, H, dim}, Layout::bnhd, rng);
    k = random_tensor({B, N, H, dim}, Layout::bnhd, rng);
    v = random_tensor({B, N, H, E}, Layout::bnhd, rng);
    out = random_tensor({B, N, H, E}, Layout::bnhd, rng);
  }
  // Steps tokens [t0, t1) through recurrent_step against `state`.
  void steps(RecurrentState& state, const LinearAttentionOptions& o, int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t)
      recurrent_step(token(out.view, t), token(ConstTensorView(q.view), t), token(ConstTensorView(k.view), t),
                     token(ConstTensorView(v.view), t), state, o);
  }
  // The first `tokens` tokens summed under o's map, saved to `path` and loaded back.
  RecurrentState saved(const LinearAttentionOptions& o, int64_t tokens, const std::filesystem::path& path) {
    const int64_t dim = q.view.extent[3];
    RecurrentState state(B, H, o.feature_map->feature_dim(dim), E, o.feature_map->name());
    steps(state, o, 0, tokens);
    state.save(path);
    return RecurrentState::load(path);
  }
};

TEST(FavorState, NameIdentifiesTheDraw) {
  EXPECT_EQ(favor_feature_map(16, {.n_features = 40, .seed = 1})->name(), "favor(d=16,m=40,seed=1,orthogonal)");
  EXPECT_EQ(favor_feature_map(16, {.n_features = 40, .seed = 1, .orthogonal = false})->name(),
            "favor(d=16,m=40,seed=1,iid)");
  EXPECT_EQ(favor_feature_map(64)->name(), "favor(d=64,m=267,seed=0,orthogonal)");  // the default m resolved
  EXPECT_EQ(random_fourier_feature_map(9, 20, 3)->name(), "random_fourier(d=9,m=20,seed=3)");
  // The redraw's name follows its seed; the kind stays.
  const auto owner = favor_feature_map(16, {.n_features = 40, .seed = 1});
  const auto& map = as_random_feature_map(*owner);
  EXPECT_EQ(map.kind(), "favor");
  EXPECT_EQ(map.redraw(7)->name(), "favor(d=16,m=40,seed=7,orthogonal)");
  // Errors name the map by its kind, as the function that makes it.
  EXPECT_NE(error_of([&] { map.feature_dim(32); }).find("linattn::favor_feature_map: head dim is 32, expected 16"),
            std::string::npos);
  const auto fourier = random_fourier_feature_map(9, 20, 3);
  EXPECT_EQ(as_random_feature_map(*fourier).kind(), "random_fourier");
  // The largest seed still makes a name the state file accepts (≤ 256 printable bytes, no space).
  const uint64_t top = std::numeric_limits<uint64_t>::max();
  const auto big = favor_feature_map(3, {.n_features = 2, .seed = top});
  EXPECT_EQ(big->name(), "favor(d=3,m=2,seed=18446744073709551615,orthogonal)");
  const testing::TempDir dir;
  RecurrentState(1, 1, 2, 1, big->name()).save(dir / "big.state");
  EXPECT_EQ(RecurrentState::load(dir / "big.state").feature_map(), big->name());
}

TEST(FavorState, SameDrawContinuesBitwise) {
  const int64_t D = 16;
  const testing::TempDir dir;
  Inputs in(D);
  const auto o = favor(D, 40, 1);
  RecurrentState whole(B, H, 40, E, o.feature_map->name());
  in.steps(whole, o, 0, N);
  const std::vector<float> want(in.out.storage);
  // A fresh map object with the same draw accepts the loaded state and continues where it stopped.
  RecurrentState loaded = in.saved(o, 5, dir / "s.state");
  in.steps(loaded, favor(D, 40, 1), 5, N);
  EXPECT_EQ(in.out.storage, want);
  EXPECT_EQ(loaded.position(), N);
  EXPECT_EQ(std::vector<float>(loaded.S().begin(), loaded.S().end()),
            std::vector<float>(whole.S().begin(), whole.S().end()));
  // The causal driver accepts it as its initial state too.
  auto causal = favor(D, 40, 1);
  causal.causal = true;
  const RecurrentState initial = in.saved(o, 5, dir / "t.state");
  EXPECT_EQ(error_of([&] {
              causal_linear_attention_forward(in.out.view, in.q.view, in.k.view, in.v.view, causal, &initial);
            }),
            "<no error>");
}

TEST(FavorState, AnotherDrawIsRefused) {
  const int64_t D = 16;
  const testing::TempDir dir;
  Inputs in(D);
  const RecurrentState made = in.saved(favor(D, 40, 1), 4, dir / "s.state");
  const auto step_with = [&](const LinearAttentionOptions& o) {
    RecurrentState state = made;
    return error_of([&] { in.steps(state, o, 4, 5); });
  };
  EXPECT_EQ(step_with(favor(D, 40, 1)), "<no error>");
  EXPECT_EQ(step_with(favor(D, 40, 2)),
            "linattn::recurrent_step: state.feature_map() is \"favor(d=16,m=40,seed=1,orthogonal)\", expected "
            "\"favor(d=16,m=40,seed=2,orthogonal)\" (options.feature_map's name)");
  EXPECT_NE(step_with(favor(D, 40, 1, false)).find("expected \"favor(d=16,m=40,seed=1,iid)\""), std::string::npos);
  // Another m changes the state's size, which is checked first.
  EXPECT_NE(step_with(favor(D, 41, 1)).find("state.feature_dim() is 40, expected 41"), std::string::npos);
  // Another random map with the same m is refused by its name.
  LinearAttentionOptions fourier;
  fourier.feature_map = random_fourier_feature_map(D, 40, 1);
  fourier.normalize = false;
  EXPECT_NE(step_with(fourier).find("expected \"random_fourier(d=16,m=40,seed=1)\""), std::string::npos);
  // The causal driver's initial state is checked the same way.
  auto causal = favor(D, 40, 2);
  causal.causal = true;
  EXPECT_NE(
      error_of([&] { causal_linear_attention_forward(in.out.view, in.q.view, in.k.view, in.v.view, causal, &made); })
          .find("initial.feature_map() is \"favor(d=16,m=40,seed=1,orthogonal)\", expected "
                "\"favor(d=16,m=40,seed=2,orthogonal)\""),
      std::string::npos);
}

// The same m and seed drawn for another head dim are other draws: the state's sizes agree (M = m, E),
// so only the name tells them apart.
TEST(FavorState, AnotherHeadDimIsRefused) {
  const testing::TempDir dir;
  Inputs small(16), large(32);
  const RecurrentState made = small.saved(favor(16, 40, 1), 4, dir / "s.state");
  RecurrentState state = made;
  EXPECT_NE(error_of([&] { large.steps(state, favor(32, 40, 1), 4, 5); })
                .find("state.feature_map() is \"favor(d=16,m=40,seed=1,orthogonal)\", expected "
                      "\"favor(d=32,m=40,seed=1,orthogonal)\""),
            std::string::npos);
}

TEST(FavorState, RandomFourierSeedIsRefused) {
  const int64_t D = 8;
  const testing::TempDir dir;
  Inputs in(D);
  LinearAttentionOptions a, b;
  a.feature_map = random_fourier_feature_map(D, 10, 1);
  b.feature_map = random_fourier_feature_map(D, 10, 2);
  a.normalize = b.normalize = false;
  RecurrentState state = in.saved(a, 3, dir / "s.state");
  RecurrentState same = state;
  EXPECT_EQ(error_of([&] { in.steps(same, a, 3, 4); }), "<no error>");
  EXPECT_NE(error_of([&] { in.steps(state, b, 3, 4); })
                .find("state.feature_map() is \"random_fourier(d=8,m=10,seed=1)\", expected "
                      "\"random_fourier(d=8,m=10,seed=2)\""),
            std::string::npos);
}

}  // namespace
}  // namespace linattn
