#pragma once
// The bounds on every size, count and option a file or a flag can carry, and the one check that
// enforces them before anything is allocated. docs/reliability.md lists where each is checked.
#include <cstdint>
#include <string_view>

namespace linattn {
namespace limits {
// set_num_threads and every --threads: beyond this OpenMP exhausts memory creating threads.
inline constexpr int64_t kMaxThreads = 1024;
// Training: sequences per step, tokens per sequence, tokens per step (the logits are
// [batch × seq_len, vocab] floats), optimizer steps, held-out batches.
inline constexpr int64_t kMaxBatch = int64_t(1) << 16;
inline constexpr int64_t kMaxSeqLen = int64_t(1) << 20;
inline constexpr int64_t kMaxBatchTokens = int64_t(1) << 20;
inline constexpr int64_t kMaxSteps = int64_t(1) << 40;
inline constexpr int64_t kMaxEvalBatches = int64_t(1) << 16;
// Model files: FAVOR+ random features per head (the causal chunk scratch grows as M², so 4096
// features already take 64 MiB per thread) and causal chunk length.
inline constexpr int64_t kMaxFavorFeatures = 4096;
inline constexpr int64_t kMaxChunkSize = 65536;
// Chunk length of the decayed family's and the delta rule's chunked forms (options.chunk_size): their
// scratch holds [C, C] matrices per thread (the decayed family three: the decays, the scores and their
// gradient, 12 MiB at 1024; the delta rule five: its two score triangles, the inverse and two
// gradients, 20 MiB), quadratic where the causal linear chunk's is linear. Longer chunks only add work.
inline constexpr int64_t kMaxDecayChunkSize = 1024;
inline constexpr int64_t kMaxDeltaChunkSize = 1024;
// The DPLR delta rule's (RWKV-7) chunk: five [C, C] matrices too (four score triangles and the inverse).
inline constexpr int64_t kMaxDplrChunkSize = 1024;
// Random features of an operator chosen by a flag (`run --features`, `bench --features`).
inline constexpr int64_t kMaxFeatures = 65536;
// Tokens `generate` samples or times.
inline constexpr int64_t kMaxGenerateTokens = int64_t(1) << 24;
// Seconds of repetitions a timing may take (`bench`, `compare --budget`).
inline constexpr double kMaxBudgetSeconds = 86400;
// A state's position: a step adds at most a sequence to it, so it never reaches INT64_MAX.
inline constexpr int64_t kMaxPosition = int64_t(1) << 62;
// The N of a `compare` or `bench` sweep.
inline constexpr int64_t kMaxSequence = int64_t(1) << 30;
}  // namespace limits

// Throws linattn::Error "<where>: <field> is <value>, expected in [lo, hi]" (+ " (why)") unless
// lo ≤ value ≤ hi. The double form also refuses NaN and infinities.
void check_bounded(std::string_view where, std::string_view field, int64_t value, int64_t lo, int64_t hi,
                   std::string_view why = {});
void check_bounded(std::string_view where, std::string_view field, double value, double lo, double hi,
                   std::string_view why = {});

}  // namespace linattn
