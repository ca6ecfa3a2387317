// Linformer attention against its fp64 oracle (forward, lse, dq/dk/dv/dE/dF) over awkward shapes, all
// sharing modes, short sequences and key lengths; the oracle's gradients against finite differences;
// k = N with E = F = I against softmax attention; and every boundary check.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "linattn/error.hpp"
#include "linattn/linformer.hpp"
#include "linattn/softmax_attention.hpp"
#include "linattn/threads.hpp"
#include "support/finite_difference.hpp"
#include "support/temp_dir.hpp"
#include "support/tensors.hpp"

namespace linattn {
namespace {

using testing::Layout;
using testing::random_tensor;
using testing::relative_error;

struct Case {
  int64_t B, H, Nq, Nk, D, Ev, P, N_max;
  Layout layout;
  bool share_heads, share_key_value, key_lengths;
};

std::vector<float> random_projection(int64_t n, std::mt19937_64& rng, double scale) {
  std::uniform_real_distribution<float> dist(-float(scale), float(scale));
  std::vector<float> x(static_cast<size_t>(n));
  for (float& e : x) e = dist(rng);
  return x;
}

LinformerOptions options_of(const Case& c, const std::vector<int64_t>& lengths) {
  LinformerOptions o;
  o.projected_length = c.P;
  o.max_length = c.N_max;
  o.share_heads = c.share_heads;
  o.share_key_value = c.share_key_value;
  if (c.key_lengths) o.key_lengths = lengths;
  return o;
}

TEST(LinformerAttention, MatchesOracleForwardAndBackward) {
  const Case cases[] = {
      {1, 1, 1, 1, 1, 1, 1, 1, Layout::bnhd, false, false, false},
      {3, 1, 63, 65, 16, 59, 8, 97, Layout::bnhd, false, false, true},
      {1, 3, 97, 64, 59, 16, 64, 128, Layout::bhnd, true, false, false},
      {3, 3, 65, 97, 64, 128, 16, 97, Layout::padded, false, true, true},
      {2, 3, 2, 1000, 16, 17, 32, 1000, Layout::padded, true, true, true},
      {1, 1, 64, 63, 128, 1, 65, 64, Layout::bhnd, false, false, false},
  };
  std::mt19937_64 rng(1);
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << "B" << c.B << " H" << c.H << " Nq" << c.Nq << " Nk" << c.Nk << " D" << c.D
                                      << " Ev" << c.Ev << " P" << c.P << " Nmax" << c.N_max << " "
                                      << testing::layout_name(c.layout) << " share_heads " << c.share_heads
                                      << " share_kv " << c.share_key_value << " key_lengths " << c.key_lengths);
    std::vector<int64_t> lengths;
    for (int64_t b = 0; b < c.B; ++b) lengths.push_back(b == 1 ? 0 : 1 + int64_t(rng() % uint64_t(c.Nk)));
    const LinformerOptions o = options_of(c, lengths);
    auto q = random_tensor({c.B, c.Nq, c.H, c.D}, c.layout, rng);
    auto k = random_tensor({c.B, c.Nk, c.H, c.D}, c.layout, rng);
    auto v = random_tensor({c.B, c.Nk, c.H, c.Ev}, c.layout, rng);
    auto dout = random_tensor({c.B, c.Nq, c.H, c.Ev}, c.layout, rng);
    const int64_t size = (c.share_heads ? 1 : c.H) * c.P * c.N_max;
    // Entries ~ 1/√Nk keep the projected keys O(1), so the softmax is neither flat nor one-hot.
    const double scale = 2.0 / std::sqrt(double(c.Nk));
    const auto E = random_projection(size, rng, scale);
    const auto F = c.share_key_value ? std::vector<float>{} : random_projection(size, rng, scale);

    auto out = testing::make_tensor({c.B, c.Nq, c.H, c.Ev}, c.layout);
    std::vector<float> lse(size_t(c.B * c.H * c.Nq));
    linformer_attention_forward(out.view, lse, q.view, k.view, v.view, E, F, o);

    const std::vector<double> E64(E.begin(), E.end()), F64(F.begin(), F.end());
    const auto q64 = reference::to_double(q.view), k64 = reference::to_double(k.view),
               v64 = reference::to_double(v.view);
    std::vector<double> lse_ref;
    const auto out_ref = reference::linformer_attention_forward(q64, k64, v64, E64, F64, o, &lse_ref);
    EXPECT_LT(relative_error(out.view, out_ref), 2e-5);
    EXPECT_LT(relative_error(lse, lse_ref), 2e-5);

    auto dq = testing::make_tensor(q.extent(), c.layout), dk = testing::make_tensor(k.extent(), c.layout),
         dv = testing::make_tensor(v.extent(), c.layout);
    std::vector<float> dE(E.size()), dF(F.size());
    linformer_attention_backward(dq.view, dk.view, dv.view, dE, dF, dout.view, q.view, k.view, v.view, E, F, out.view,
                                 lse, o);
    const auto g = reference::linformer_attention_backward(reference::to_double(dout.view), q64, k64, v64, E64, F64, o);
    EXPECT_LT(relative_error(dq.view, g.dq), 1e-4);
    EXPECT_LT(relative_error(dk.view, g.dk), 1e-4);
    EXPECT_LT(relative_error(dv.view, g.dv), 1e-4);
    EXPECT_LT(relative_error(dE, g.dE), 1e-4);
    if (!c.share_key_value) {
      EXPECT_LT(relative_error(dF, g.dF), 1e-4);
    }
    // Keys past a batch's length take no part: zero gradient (and dE's columns for them too).
    if (c.key_lengths) {
      for (int64_t b = 0; b < c.B; ++b)
        for (int64_t j = lengths[b]; j < c.Nk; ++j) EXPECT_EQ(dk.view(b, j, 0, 0), 0.0f);
    }
  }
}

// Keys past key_lengths[b] do not enter the projection: changing them changes nothing.
TEST(LinformerAttention, KeysPastTheirLengthAreIgnored) {
  std::mt19937_64 rng(2);
  const Case c{2, 2, 5, 9, 8, 8, 4, 12, Layout::bnhd, false, false, true};
  const std::vector<int64_t> lengths{6, 9};
  const LinformerOptions o = options_of(c, lengths);
  auto q = random_tensor({2, 5, 2, 8}, c.layout, rng), k = random_tensor({2, 9, 2, 8}, c.layout, rng),
       v = random_tensor({2, 9, 2, 8}, c.layout, rng);
  const auto E = random_projection(2 * 4 * 12, rng, 0.5), F = random_projection(2 * 4 * 12, rng, 0.5);
  std::vector<float> out1(2 * 5 * 2 * 8), out2(out1.size()), lse(2 * 2 * 5);
  linformer_attention_forward(bnhd(out1.data(), 2, 5, 2, 8), lse, q.view, k.view, v.view, E, F, o);
  for (int64_t j = 6; j < 9; ++j) k.view(0, j, 1, 3) = 1e6f, v.view(0, j, 0, 2) = -1e6f;
  linformer_attention_forward(bnhd(out2.data(), 2, 5, 2, 8), lse, q.view, k.view, v.view, E, F, o);
  EXPECT_EQ(out1, out2);
}

// The oracle's gradients against central differences of the oracle's forward, every sharing mode.
TEST(LinformerAttention, OracleBackwardMatchesFiniteDifferences) {
  std::mt19937_64 rng(3);
  for (int mode = 0; mode < 3; ++mode) {
    const Case c{2, 2, 3, 4, 3, 2, 3, 5, Layout::bnhd, mode == 1, mode == 2, true};
    const std::vector<int64_t> lengths{4, 2};
    const LinformerOptions o = options_of(c, lengths);
    auto q = reference::to_double(random_tensor({2, 3, 2, 3}, c.layout, rng).view);
    auto k = reference::to_double(random_tensor({2, 4, 2, 3}, c.layout, rng).view);
    auto v = reference::to_double(random_tensor({2, 4, 2, 2}, c.layout, rng).view);
    const auto dout = reference::to_double(random_tensor({2, 3, 2, 2}, c.layout, rng).view);
    const int64_t size = (c.share_heads ? 1 : 2) * 3 * 5;
    const auto E32 = random_projection(size, rng, 1.0), F32 = random_projection(mode == 2 ? 0 : size, rng, 1.0);
    std::vector<double> E(E32.begin(), E32.end()), F(F32.begin(), F32.end());
    const auto g = reference::linformer_attention_backward(dout, q, k, v, E, F, o);
    const auto loss = [&] {
      const auto out = reference::linformer_attention_forward(q, k, v, E, F, o);
      double sum = 0;
      for (size_t i = 0; i < out.data.size(); ++i) sum += out.data[i] * dout.data[i];
      return sum;
    };
    const auto check = [&](std::vector<double>& x, const std::vector<double>& grad, const char* name) {
      const auto [err, mag] = testing::finite_difference_error(x, grad, loss);
      EXPECT_GT(mag, 0.0) << name;
      EXPECT_LT(err, 1e-7 * std::max(mag, 1.0)) << name << " mode " << mode;
    };
    check(q.data, g.dq.data, "dq");
    check(k.data, g.dk.data, "dk");
    check(v.data, g.dv.data, "dv");
    check(E, g.dE, "dE");
    if (mode != 2) check(F, g.dF, "dF");
  }
}

// With P = N and E = F = I the projection is the identity: Linformer is softmax attention.
TEST(LinformerAttention, IdentityProjectionEqualsSoftmax) {
  std::mt19937_64 rng(4);
  for (int64_t N : {1, 65}) {
    const int64_t B = 2, H = 3, D = 16, Ev = 24;
    auto q = random_tensor({B, N, H, D}, Layout::bhnd, rng), k = random_tensor({B, N, H, D}, Layout::padded, rng),
         v = random_tensor({B, N, H, Ev}, Layout::bnhd, rng);
    std::vector<float> eye(size_t(N * N), 0.0f);
    for (int64_t i = 0; i < N; ++i) eye[size_t(i * N + i)] = 1.0f;
    LinformerOptions o;
    o.projected_length = o.max_length = N;
    o.share_heads = true;
    std::vector<float> out(size_t(B * N * H * Ev)), want(out.size()), lse(size_t(B * H * N)), lse_want(lse.size());
    linformer_attention_forward(bnhd(out.data(), B, N, H, Ev), lse, q.view, k.view, v.view, eye, eye, o);
    softmax_attention_forward(bnhd(want.data(), B, N, H, Ev), lse_want, q.view, k.view, v.view);
    double err = 0, mag = 0;
    for (size_t i = 0; i < out.size(); ++i) {
      err = std::max(err, double(std::abs(out[i] - want[i])));
      mag = std::max(mag, double(std::abs(want[i])));
    }
    EXPECT_LT(err, 1e-6 * mag) << N;
    for (size_t i = 0; i < lse.size(); ++i) EXPECT_NEAR(lse[i], lse_want[i], 1e-5f);
  }
}

// Bitwise the same results for 1 and 2 threads, forward and backward, with shared heads (where dE
// sums over heads) and key lengths.
TEST(LinformerAttention, DeterministicAcrossThreadCounts) {
  std::mt19937_64 rng(5);
  const int64_t B = 2, N = 150, H = 3, D = 16, P = 40;
  auto q = random_tensor({B, N, H, D}, Layout::bnhd, rng), k = random_tensor({B, N, H, D}, Layout::bnhd, rng),
       v = random_tensor({B, N, H, D}, Layout::bnhd, rng), dout = random_tensor({B, N, H, D}, Layout::bnhd, rng);
  const auto E = random_projection(P * N, rng, 0.2), F = random_projection(P * N, rng, 0.2);
  const int64_t lengths[] = {150, 77};
  LinformerOptions o;
  o.projected_length = P;
  o.max_length = N;
  o.share_heads = true;
  o.key_lengths = lengths;
  std::vector<float> results[2];
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    std::vector<float> out(size_t(B * N * H * D)), lse(size_t(B * H * N)), dq(out.size()), dk(out.size()),
        dv(out.size()), dE(E.size()), dF(F.size());
    const auto view = [&](std::vector<float>& x) { return bnhd(x.data(), B, N, H, D); };
    linformer_attention_forward(view(out), lse, q.view, k.view, v.view, E, F, o);
    linformer_attention_backward(view(dq), view(dk), view(dv), dE, dF, dout.view, q.view, k.view, v.view, E, F,
                                 view(out), lse, o);
    for (const auto* part : {&out, &lse, &dq, &dk, &dv, &dE, &dF})
      results[threads - 1].insert(results[threads - 1].end(), part->begin(), part->end());
  }
  set_num_threads(0);
  EXPECT_EQ(results[0], results[1]);
}

using testing::error_of;

TEST(LinformerAttention, BadInputThrowsSayingWhy) {
  const int64_t B = 2, N = 6, H = 2, D = 4, P = 3, Nmax = 8;
  std::vector<float> qd(B * N * H * D, 0.5f), kd(qd), vd(qd), od(qd.size()), dq(qd.size()), dk(qd.size()),
      dv(qd.size()), lse(B * H * N);
  const auto q = bnhd<const float>(qd.data(), B, N, H, D), k = q, v = q;
  const auto out = bnhd(od.data(), B, N, H, D);
  std::vector<float> E(H * P * Nmax, 0.1f), F(E), dE(E.size()), dF(E.size());
  LinformerOptions o;
  o.projected_length = P;
  o.max_length = Nmax;
  const auto forward = [&](const LinformerOptions& opt, ConstTensorView kk, std::span<const float> e,
                           std::span<const float> f) {
    return error_of([&] { linformer_attention_forward(out, lse, q, kk, kk, e, f, opt); });
  };
  EXPECT_EQ(forward(o, k, E, F), "<no error>");

  LinformerOptions causal = o;
  causal.causal = true;
  EXPECT_NE(forward(causal, k, E, F).find("causal is true, expected false: Linformer projects keys"),
            std::string::npos);
  LinformerOptions short_max = o;
  short_max.max_length = 4;
  std::vector<float> E4(H * P * 4, 0.1f);
  EXPECT_NE(forward(short_max, k, E4, E4).find("k.extent[1] (sequence) is 6, expected ≤ 4 (options.max_length)"),
            std::string::npos)
      << forward(short_max, k, E4, E4);
  EXPECT_NE(forward(o, k, std::span<const float>(E).first(10), F).find("E has 10 elements, expected 48"),
            std::string::npos);
  EXPECT_NE(forward(o, k, E, std::span<const float>(F).first(47)).find("F has 47 elements, expected 48"),
            std::string::npos);
  LinformerOptions shared = o;
  shared.share_heads = true;
  EXPECT_NE(forward(shared, k, E, F).find("E has 48 elements, expected 24 ([1, projected_length, max_length]"),
            std::string::npos);
  LinformerOptions kv = o;
  kv.share_key_value = true;
  EXPECT_NE(forward(kv, k, E, F).find("F has 48 elements, expected 0 (empty: share_key_value"), std::string::npos);
  EXPECT_EQ(forward(kv, k, E, {}), "<no error>");
  LinformerOptions zero_p = o;
  zero_p.projected_length = 0;
  EXPECT_NE(forward(zero_p, k, {}, {}).find("options.projected_length is 0, expected ≥ 1"), std::string::npos);
  LinformerOptions zero_n = o;
  zero_n.max_length = 0;
  EXPECT_NE(forward(zero_n, k, {}, {}).find("options.max_length is 0, expected ≥ 1"), std::string::npos);
  const int64_t bad_lengths[] = {3, 7};
  LinformerOptions lengths = o;
  lengths.key_lengths = bad_lengths;
  EXPECT_NE(forward(lengths, k, E, F).find("key_lengths[1] is 7"), std::string::npos);
  const auto k3 = bnhd<const float>(kd.data(), B, N, H, 3);
  EXPECT_NE(forward(o, k3, E, F).find("k.extent[3] (dim) is 3, expected 4 (q's head dim)"), std::string::npos);
  EXPECT_NE(error_of([&] {
              linformer_attention_forward(bnhd(qd.data(), B, N, H, D), lse, q, k, v, E, F, o);
            }).find("out overlaps"),
            std::string::npos);

  const auto backward = [&](std::span<float> de, std::span<float> df, TensorView dkv) {
    return error_of([&] {
      linformer_attention_backward(bnhd(dq.data(), B, N, H, D), dkv, bnhd(dv.data(), B, N, H, D), de, df, out, q, k, v,
                                   E, F, out, lse, o);
    });
  };
  linformer_attention_forward(out, lse, q, k, v, E, F, o);
  EXPECT_EQ(backward(dE, dF, bnhd(dk.data(), B, N, H, D)), "<no error>");
  EXPECT_NE(backward(std::span<float>(dE).first(5), dF, bnhd(dk.data(), B, N, H, D)).find("dE has 5 elements"),
            std::string::npos);
  EXPECT_NE(backward(dE, std::span<float>(dF).first(5), bnhd(dk.data(), B, N, H, D)).find("dF has 5 elements"),
            std::string::npos);
  EXPECT_NE(backward(dE, dF, bnhd(dk.data(), B, N - 1, H, D)).find("dk.extent[1] (sequence) is 5, expected 6"),
            std::string::npos);
  EXPECT_NE(backward(dE, dF, bnhd(dv.data(), B, N, H, D)).find("dk overlaps dv"), std::string::npos);
  EXPECT_NE(backward(dE, dF, bnhd(dq.data(), B, N, H, D)).find("dq overlaps dk"), std::string::npos);
}

// The remaining checks, each tripped once: q, k, v disagreeing, outputs overlapping inputs, sizes
// that overflow.
TEST(LinformerAttention, EveryShapeAndAliasCheckTrips) {
  const int64_t B = 2, N = 6, H = 2, D = 4, P = 3, Nmax = 8;
  std::vector<float> qd(B * N * H * D, 0.5f), kd(qd), vd(qd), od(qd.size()), dq(qd.size()), dk(qd.size()),
      dv(2 * qd.size()), lse(B * H * N), E(H * P * Nmax, 0.1f), F(E), dE(E.size()), dF(E.size());
  const auto q = bnhd<const float>(qd.data(), B, N, H, D), k = bnhd<const float>(kd.data(), B, N, H, D),
             v = bnhd<const float>(vd.data(), B, N, H, D);
  LinformerOptions o;
  o.projected_length = P;
  o.max_length = Nmax;
  const auto forward = [&](TensorView out, ConstTensorView kk, ConstTensorView vv, const LinformerOptions& opt) {
    return error_of([&] { linformer_attention_forward(out, lse, q, kk, vv, E, F, opt); });
  };
  const auto out = bnhd(od.data(), B, N, H, D);
  EXPECT_EQ(forward(out, k, v, o), "<no error>");
  EXPECT_NE(forward(out, bnhd<const float>(kd.data(), 1, N, H, D), v, o).find("k.extent[0] (batch) is 1, expected 2"),
            std::string::npos);
  EXPECT_NE(forward(out, bnhd<const float>(kd.data(), B, N, 1, D), v, o).find("k.extent[2] (heads) is 1, expected 2"),
            std::string::npos);
  EXPECT_NE(forward(out, k, bnhd<const float>(vd.data(), 1, N, H, D), o).find("v.extent[0] (batch) is 1, expected 2"),
            std::string::npos);
  EXPECT_NE(forward(out, k, bnhd<const float>(vd.data(), B, N - 1, H, D), o)
                .find("v.extent[1] (sequence) is 5, expected 6 (k's sequence length)"),
            std::string::npos);
  EXPECT_NE(forward(out, k, bnhd<const float>(vd.data(), B, N, 1, D), o).find("v.extent[2] (heads) is 1, expected 2"),
            std::string::npos);
  EXPECT_NE(forward(bnhd(vd.data(), B, N, H, D), k, v, o).find("out overlaps v"), std::string::npos);
  EXPECT_NE(forward(bnhd(qd.data(), B, N, H, D), k, v, o).find("out overlaps q"), std::string::npos);
  EXPECT_NE(
      forward(bnhd(od.data(), B, N, H, D - 1), k, v, o).find("out.extent[3] (dim) is 3, expected 4 (v's value dim)"),
      std::string::npos);
  EXPECT_NE(error_of([&] {
              linformer_attention_forward(out, std::span<float>(lse).first(3), q, k, v, E, F, o);
            }).find("lse has 3 elements, expected 24 ([B, H, Nq])"),
            std::string::npos);
  LinformerOptions huge = o;
  huge.projected_length = huge.max_length = int64_t(1) << 40;
  EXPECT_NE(forward(out, k, v, huge).find("E's size overflows int64"), std::string::npos);

  linformer_attention_forward(out, lse, q, k, v, E, F, o);
  const auto backward = [&](TensorView dqv, TensorView dkv, TensorView dvv) {
    return error_of([&] { linformer_attention_backward(dqv, dkv, dvv, dE, dF, out, q, k, v, E, F, out, lse, o); });
  };
  const auto dq_view = bnhd(dq.data(), B, N, H, D), dk_view = bnhd(dk.data(), B, N, H, D),
             dv_view = bnhd(dv.data(), B, N, H, D);
  EXPECT_EQ(backward(dq_view, dk_view, dv_view), "<no error>");
  EXPECT_NE(backward(dq_view, dk_view, bnhd(dv.data(), B, N, H, D + 1)).find("dv.extent[3] (dim) is 5, expected 4"),
            std::string::npos);
  EXPECT_NE(backward(dq_view, bnhd(kd.data(), B, N, H, D), dv_view).find("dk overlaps k"), std::string::npos);
  EXPECT_NE(backward(bnhd(qd.data(), B, N, H, D), dk_view, dv_view).find("dq overlaps q"), std::string::npos);
  EXPECT_NE(backward(bnhd(dq.data(), B, N, 1, D), dk_view, dv_view).find("dq.extent[2] (heads) is 1, expected 2"),
            std::string::npos);
  const auto saved = [&](ConstTensorView dout, ConstTensorView o_saved, std::span<const float> l) {
    return error_of(
        [&] { linformer_attention_backward(dq_view, dk_view, dv_view, dE, dF, dout, q, k, v, E, F, o_saved, l, o); });
  };
  EXPECT_NE(saved(bnhd<const float>(od.data(), 1, N, H, D), out, lse).find("dout.extent[0] (batch) is 1, expected 2"),
            std::string::npos);
  EXPECT_NE(saved(out, bnhd<const float>(od.data(), B, N - 1, H, D), lse).find("out.extent[1] (sequence) is 5"),
            std::string::npos);
  EXPECT_NE(saved(out, out, std::span<const float>(lse).first(5)).find("lse has 5 elements, expected 24"),
            std::string::npos);
  EXPECT_NE(backward(dq_view, dk_view, bnhd(vd.data(), B, N, H, D)).find("dv overlaps v"), std::string::npos);
  EXPECT_NE(backward(bnhd(dv.data(), B, N, H, D), dk_view, dv_view).find("dq overlaps dv"), std::string::npos);
}

}  // namespace
}  // namespace linattn
