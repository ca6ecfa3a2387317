// A fixed number of decode steps on one thread, for instruction counts (scripts/insn_count.sh,
// docs/cross-platform.md): speed cannot be measured under qemu, but the instructions a step executes can. The
// counter sees the whole process, so the script runs two step counts and divides the difference by the extra
// steps: setup, the first dispatch and OpenMP's start cancel out.
// Usage: decode_steps recurrent|softmax STEPS [CONTEXT]
//   recurrent: recurrent_step, H = 8, D = E = 64, elu+1 (bench_recurrent's shape): q, k, v [1, 1, 8, 64] a step.
//   softmax:   the KV-cache decode step, one query [1, 1, 8, 64] against CONTEXT keys (default 1024), fixed.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "linattn/linear_attention.hpp"
#include "linattn/random.hpp"
#include "linattn/softmax_attention.hpp"
#include "linattn/threads.hpp"

namespace {

constexpr int64_t kH = 8, kD = 64, kE = 64;

std::vector<float> uniform(size_t n, uint64_t seed) {
  std::vector<float> x(n);
  uint64_t counter = seed << 32;
  for (float& f : x) f = float(linattn::splitmix64(counter++) >> 40) * (2.0f / 16777216.0f) - 1.0f;  // [-1, 1)
  return x;
}

int usage(const char* why) {
  std::fprintf(stderr, "decode_steps: %s\nusage: decode_steps recurrent|softmax STEPS [CONTEXT]\n", why);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3 || argc > 4) return usage("expected 2 or 3 arguments");
  const std::string op = argv[1];
  const long steps = std::strtol(argv[2], nullptr, 10);
  const long context = argc == 4 ? std::strtol(argv[3], nullptr, 10) : 1024;
  if (steps < 0) return usage("STEPS must be >= 0");
  if (context < 1) return usage("CONTEXT must be >= 1");
  linattn::set_num_threads(1);
  const int64_t T = steps > 0 ? steps : 1;
  // Every step reads its own token, [T, H, D] token-major, so no step is a repeat of the one before.
  const auto q = uniform(size_t(T * kH * kD), 1), k = uniform(size_t(T * kH * kD), 2),
             v = uniform(size_t(T * kH * kE), 3);
  std::vector<float> out(size_t(kH * kE));
  double checksum = 0;
  if (op == "recurrent") {
    linattn::RecurrentState state(1, kH, kD, kE, "elu");
    for (int64_t t = 0; t < steps; ++t) {
      linattn::recurrent_step(linattn::bnhd(out.data(), 1, 1, kH, kE),
                              linattn::bnhd(q.data() + t * kH * kD, 1, 1, kH, kD),
                              linattn::bnhd(k.data() + t * kH * kD, 1, 1, kH, kD),
                              linattn::bnhd(v.data() + t * kH * kE, 1, 1, kH, kE), state);
      checksum += out[size_t(t % (kH * kE))];
    }
  } else if (op == "softmax") {
    const auto kc = uniform(size_t(context * kH * kD), 4), vc = uniform(size_t(context * kH * kE), 5);
    std::vector<float> lse(kH);
    linattn::SoftmaxAttentionOptions options;
    for (int64_t t = 0; t < steps; ++t) {
      linattn::softmax_attention_forward(
          linattn::bnhd(out.data(), 1, 1, kH, kE), lse, linattn::bnhd(q.data() + t * kH * kD, 1, 1, kH, kD),
          linattn::bnhd(kc.data(), 1, context, kH, kD), linattn::bnhd(vc.data(), 1, context, kH, kE), options);
      checksum += out[size_t(t % (kH * kE))];
    }
  } else {
    return usage(("unknown op '" + op + "', expected recurrent or softmax").c_str());
  }
  std::printf("%s steps=%ld checksum=%.6g\n", op.c_str(), steps, checksum);
  return 0;
}
