// Measures Performer's and Linformer's output error against exact softmax attention as m or P grows,
// on random and on peaked inputs, and prints the tables of docs/performer-linformer.md:
//   build/tests/favor_quality_slow_test
#include <gtest/gtest.h>

#include <cstdio>

#include "linattn/error.hpp"
#include "linattn/quality.hpp"

namespace linattn {
namespace {

const int64_t kFeatures[] = {16, 64, 256, 1024};
const int64_t kProjected[] = {16, 64, 256, 512};

TEST(Quality, CurvesFallAsTheApproximationGrows) {
  for (QualityInput input : {QualityInput::random, QualityInput::peaked}) {
    for (double qk_std : {1.0, 0.5}) {
      QualityOptions o;
      o.input = input;
      o.qk_std = qk_std;
      const auto orth = favor_error_curve(kFeatures, o, true), iid = favor_error_curve(kFeatures, o, false);
      const auto gauss = linformer_error_curve(kProjected, o, LinformerInit::gaussian);
      const auto pool = linformer_error_curve(kProjected, o, LinformerInit::mean_pooling);
      std::printf("### %s inputs, σ(q, k) = %g (N=%ld, D=E=%ld, H=%ld, mean of %ld trials)\n\n%s\n%s\n",
                  quality_input_name(input), qk_std, o.seq_len, o.dim, o.heads, o.trials,
                  error_table({"FAVOR+ orthogonal", "FAVOR+ i.i.d."}, {orth, iid}, "m").c_str(),
                  error_table({"Linformer JL N(0, 1/P)", "Linformer mean pooling"}, {gauss, pool}, "P").c_str());
      // 64× more features: the error falls (the variance ∝ 1/m).
      EXPECT_LT(orth.back().mean_error, orth.front().mean_error);
      EXPECT_LT(iid.back().mean_error, iid.front().mean_error);
      // Pooling over P = N segments of one position is the identity: exact softmax.
      EXPECT_LT(pool.back().mean_error, 1e-5);
      EXPECT_LT(pool[2].mean_error, pool[0].mean_error);
    }
  }
}

TEST(Quality, TrialsMustBePositive) {
  QualityOptions o;
  o.trials = 0;
  EXPECT_THROW(favor_error_curve(kFeatures, o), Error);
  try {
    linformer_error_curve(kProjected, o);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("options.trials is 0, expected ≥ 1"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace linattn
