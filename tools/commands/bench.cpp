// linattn bench: measures one configuration (docs/cli.md has the flop counts and the memory method).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "commands/bench_ring.hpp"
#include "commands/bench_seq_parallel.hpp"
#include "common/command.hpp"
#include "common/flags.hpp"
#include "common/measure.hpp"
#include "common/memory.hpp"
#include "common/table.hpp"
#include "linattn/limits.hpp"

namespace linattn::cli {
namespace {

struct BenchArgs {
  Problem problem;
  int64_t value_dim = 0;
  MeasureOptions measure;
  bool json = false;
  bool seq_parallel = false;
  ShardSplit shards = ShardSplit::automatic;
};

int bench(BenchArgs& args, const CLI::App& app) {
  Problem& p = args.problem;
  p.value_dim = args.value_dim > 0 ? args.value_dim : p.dim;
  // A size the chosen operator does not have was silently ignored (--op gla --features 64 timed gla).
  if (app.count("--features") > 0 && p.op != Op::favor)
    throw UsageError(std::string("--features applies to --op performer (favor) only: --op ") + op_name(p.op) +
                     " has no random features (drop --features)");
  if (app.count("--projected") > 0 && p.op != Op::linformer)
    throw UsageError(std::string("--projected applies to --op linformer only: --op ") + op_name(p.op) +
                     " projects nothing (drop --projected)");
  if (args.measure.backward && !has_backward(p.op))
    throw UsageError(std::string("--backward: --op ") + op_name(p.op) + " has no backward (it serves generation)");
  if (p.causal && p.op != Op::softmax) throw UsageError("--causal applies to --op softmax only");
  check_dtype(p);
  if (app.count("--groups") > 0 && p.op != Op::mamba2)
    throw UsageError(std::string("--groups applies to --op mamba2 only: --op ") + op_name(p.op) +
                     " has no groups of B and C (drop --groups)");
  if (p.groups > 0 && p.heads % p.groups != 0)
    throw UsageError("--groups is " + std::to_string(p.groups) + ", expected a divisor of --heads = " +
                     std::to_string(p.heads) + " (each group of B and C serves heads / groups heads)");
  args.measure.forward = !args.measure.backward;
  if (args.shards != ShardSplit::automatic && (!args.seq_parallel || p.op == Op::softmax))
    throw UsageError("--shards applies to --seq-parallel with --op causal or linear (softmax's ring balances itself)");
  if (args.seq_parallel)  // softmax: ring attention (bench_ring.cpp); causal, linear: the scans
    return p.op == Op::softmax ? bench_ring(p, args.measure, args.json)
                               : bench_seq_parallel(p, args.measure, args.json, args.shards);
  check_memory(estimated_bytes(p, args.measure.backward), std::string("bench --op ") + op_name(p.op));
  warn_if_busy();  // after the refusal, so that an error stays one line
  const Measurement m = measure(p, args.measure);
  const Timing& t = args.measure.backward ? *m.forward_backward : *m.forward;
  const double flops = forward_flops(p) + (args.measure.backward ? backward_flops(p) : 0);
  const int64_t peak = args.measure.backward ? m.peak_total_bytes : m.peak_forward_bytes;
  const double tokens_per_second = double(p.batch) * double(p.seq) / t.median;
  if (args.json) {
    // mamba2's groups of B and C after their default; null for the ops without them.
    const nlohmann::json groups = p.op == Op::mamba2 ? nlohmann::json(p.groups > 0 ? p.groups : p.heads) : nullptr;
    nlohmann::json j = {{"op", op_name(p.op)},
                        {"batch", p.batch},
                        {"heads", p.heads},
                        {"seq", p.seq},
                        {"dim", p.dim},
                        {"value_dim", p.value_dim},
                        {"groups", groups},
                        {"feature_dim", feature_dim(p)},
                        {"causal", p.causal || is_causal(p.op)},
                        {"threads", m.threads},
                        {"backward", args.measure.backward},
                        {"dtype", dtype_name(p.dtype)},
                        {"seconds", t.median},
                        {"seconds_min", t.min},
                        {"repetitions", t.repetitions},
                        {"flops", flops},
                        {"gflops", flops / t.median * 1e-9},
                        {"tokens_per_second", tokens_per_second},
                        {"peak_bytes", peak >= 0 ? nlohmann::json(peak) : nlohmann::json(nullptr)},
                        {"estimated_bytes", estimated_bytes(p, args.measure.backward)}};
    std::printf("%s\n", j.dump().c_str());
    return kExitOk;
  }
  std::printf("%s%s B=%lld H=%lld N=%lld D=%lld E=%lld, %s, threads=%d, %s\n", op_name(p.op),
              p.causal ? " (causal)" : "", (long long)p.batch, (long long)p.heads, (long long)p.seq, (long long)p.dim,
              (long long)p.value_dim, dtype_name(p.dtype), m.threads,
              args.measure.backward ? "forward+backward" : "forward");
  std::printf("  time       %s median, %s min, %d repetitions\n", format_seconds(t.median).c_str(),
              format_seconds(t.min).c_str(), t.repetitions);
  std::printf("  throughput %.4g GFLOP/s (%.4g GFLOP), %.4g tokens/s\n", flops / t.median * 1e-9, flops * 1e-9,
              tokens_per_second);
  std::printf("  peak       %s resident growth (estimate %s)\n", peak >= 0 ? format_bytes(double(peak)).c_str() : "?",
              format_bytes(estimated_bytes(p, args.measure.backward)).c_str());
  return kExitOk;
}

const Registrar registrar{
    {"bench", "Measure one operator configuration: median time, GFLOP/s, peak memory", 30, [](CLI::App& app) {
       auto args = std::make_shared<BenchArgs>();
       Problem& p = args->problem;
       app.add_option("--op", p.op,
                      "softmax, linear, causal, recurrent, performer (alias favor: FAVOR+), linformer, or the decayed "
                      "family (chunked, causal): retention, lightning (g_gamma), simple_gla (g [B, N, H]) or gla "
                      "(g [B, N, H, D]), or the delta rule (chunked, causal, q and k l2-normalised): delta_rule, "
                      "gated_delta_rule (g [B, N, H]) or kda (g [B, N, H, D]), or mamba2 (Mamba-2's SSD, chunked: "
                      "--dim the state size N, --value-dim the head dim P, --groups G) or rwkv7 (RWKV-7's DPLR delta "
                      "rule, token by token)")
           ->required()
           ->transform(flags::choice(op_names()))
           ->option_text("OP REQUIRED");
       app.add_option("--batch", p.batch, "B")->required()->check(flags::at_least(1));
       app.add_option("--heads", p.heads, "H")->required()->check(flags::at_least(1));
       app.add_option("--seq", p.seq, "N, the sequence length")
           ->required()
           ->check(flags::bounded(1, limits::kMaxSequence));
       app.add_option("--dim", p.dim, "D, the query/key head dim")->required()->check(flags::at_least(1));
       app.add_option("--value-dim", args->value_dim, "E, the value head dim (default: D)")->check(flags::at_least(1));
       app.add_option("--threads", args->measure.threads, "Threads (linattn::set_num_threads); 0: the default")
           ->check(flags::threads());
       app.add_flag("--backward", args->measure.backward, "Time forward+backward");
       app.add_option("--dtype", p.dtype, "Storage of q, k, v, out and the gradients: f32, bf16 or f16 (fp32 products)")
           ->transform(flags::choice(dtype_names()));
       app.add_flag("--causal", p.causal, "Causal mask (softmax)");
       app.add_option("--features", p.features, "Performer: random features M (0: default)")
           ->check(flags::bounded(0, limits::kMaxFeatures));
       app.add_option("--projected", p.projected, "Linformer: projected length k (0: min(N, 256))")
           ->check(flags::at_least(0));
       app.add_option("--groups", p.groups, "mamba2: G, the groups of B and C (default: one per head; divides --heads)")
           ->check(flags::at_least(1));
       app.add_option("--seed", p.seed, "Seed of the N(0,1) inputs and random features")->check(flags::seed());
       app.add_option("--budget", args->measure.budget_seconds,
                      "Seconds of repetitions after the warm-up (at least --min-reps)")
           ->check(flags::finite(0, limits::kMaxBudgetSeconds));
       app.add_option("--min-reps", args->measure.min_reps, "Fewest repetitions")->check(flags::bounded(1, 1000));
       app.add_flag("--json", args->json, "Print one JSON object");
       app.add_flag(
           "--seq-parallel", args->seq_parallel,
           "Under mpirun: split the sequence over the ranks (--op causal, linear or softmax; linattn_mpi); rank 0 "
           "prints per-rank compute and communication time and bytes sent");
       app.add_option("--shards", args->shards,
                      "With --seq-parallel --op causal|linear: how the sequence is cut, auto (balanced for the causal "
                      "forward, else even), even, or balanced (the last rank, which forms no sums, takes more tokens)")
           ->transform(flags::choice(std::map<std::string, ShardSplit>{
               {"auto", ShardSplit::automatic}, {"even", ShardSplit::even}, {"balanced", ShardSplit::balanced}}));
       app.footer(
           "seconds: median over repetitions after one warm-up. gflops: the documented flop "
           "count (docs/cli.md) / seconds. peak_bytes: growth of the resident set's high-water "
           "mark (VmHWM) in a forked child that allocates the inputs and runs the operator. "
           "The decayed ops draw their gate g as logsigmoid(N(0,1))/16 (log decays in about [-0.7, 0]); mamba2 takes "
           "that g as dt before softplus(g + dt_bias), with dt_bias, A and D drawn as Mamba-2 initialises them; rwkv7 "
           "as its log decay w, with a = -k^ and b = k^*sigmoid(N(0,1)) for unit vectors k^. "
           "A configuration whose estimated memory exceeds what this process can allocate (MemAvailable, its memory "
           "cgroup's limit, RLIMIT_AS) exits with code 3.");
       flags::examples(
           app, {"linattn bench --op causal --batch 1 --heads 8 --seq 4096 --dim 64",
                 "linattn bench --op softmax --batch 2 --heads 8 --seq 2048 --dim 64 --backward --json",
                 "linattn bench --op mamba2 --batch 1 --heads 32 --seq 16384 --dim 128 --value-dim 64 --groups 8",
                 "mpirun -np 2 linattn bench --op causal --heads 8 --seq 1048576 --seq-parallel --threads 1 "
                 "--json"});
       return [args, &app] { return bench(*args, app); };
     }}};

}  // namespace
}  // namespace linattn::cli
