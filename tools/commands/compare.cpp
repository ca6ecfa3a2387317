// linattn compare: the seed's question on this machine. For each N of a sweep it times exact softmax
// against linear attention (and the others), measures peak memory and the output's distance from
// softmax, fits time ∝ N^k per method, and writes JSON, CSV and a log-log plot.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/command.hpp"
#include "common/flags.hpp"
#include "common/isolate.hpp"
#include "common/measure.hpp"
#include "common/memory.hpp"
#include "common/output.hpp"
#include "common/progress.hpp"
#include "common/table.hpp"
#include "linattn/file_io.hpp"
#include "linattn/limits.hpp"
#include "linattn/threads.hpp"

namespace linattn::cli {
namespace {

struct CompareArgs {
  int64_t batch = 1, heads = 4, dim = 64, value_dim = 0;
  std::vector<int64_t> seqs;
  int64_t min_seq = 256, max_seq = 8192;
  std::vector<Op> methods;
  std::string out = "linattn-compare";
  MeasureOptions measure{0, true, true, 0.2, 2, 50};
  uint64_t seed = 0;
  int64_t features = 0, projected = 0;
  bool plot = true;
  DType dtype = DType::f32;
};

struct Row {
  int64_t seq = 0;
  Op op = Op::softmax;
  Measurement m;
  std::optional<double> error;    // against (causal) softmax; none for softmax itself
  std::optional<double> speedup;  // softmax's fwd+bwd time (fwd with --no-backward) / this method's
};

std::vector<int64_t> sweep(const CompareArgs& a) {
  std::vector<int64_t> seqs = a.seqs;
  if (seqs.empty()) {
    if (a.min_seq > a.max_seq)
      throw UsageError("--min-seq " + std::to_string(a.min_seq) + " is above --max-seq " + std::to_string(a.max_seq));
    // n < max_seq / 2 + 1 ⇔ 2n ≤ max_seq: doubling never overflows (--max-seq 2^63 − 1 looped forever).
    for (int64_t n = a.min_seq; n < a.max_seq; n = n <= a.max_seq / 2 ? 2 * n : a.max_seq) seqs.push_back(n);
    seqs.push_back(a.max_seq);
  }
  std::sort(seqs.begin(), seqs.end());
  seqs.erase(std::unique(seqs.begin(), seqs.end()), seqs.end());
  return seqs;
}

Problem problem(const CompareArgs& a, Op op, int64_t seq) {
  Problem p;
  p.op = op;
  p.batch = a.batch;
  p.heads = a.heads;
  p.seq = seq;
  p.dim = a.dim;
  p.value_dim = a.value_dim > 0 ? a.value_dim : a.dim;
  p.features = a.features;
  p.projected = a.projected;
  p.seed = a.seed;
  p.dtype = a.dtype;
  return p;
}

// max |got − want| / max |want|, the suite's measure.
// compare names the delta rule as issue 41 and the model (--attention) do, deltanet, gated_deltanet and kda,
// where bench and the operator table say delta_rule and gated_delta_rule; --methods takes both spellings.
const char* method_name(Op op) {
  return op == Op::delta_rule ? "deltanet" : op == Op::gated_delta_rule ? "gated_deltanet" : op_name(op);
}
const std::map<std::string, Op>& method_names() {
  static const std::map<std::string, Op> names = [] {
    std::map<std::string, Op> m = op_names();
    for (Op op : {Op::delta_rule, Op::gated_delta_rule}) m[method_name(op)] = op;
    return m;
  }();
  return names;
}

// The default sweep: one method of each family, so the table and the plot show the whole field (issue 41)
// in about a minute on 2 cores: softmax, linear (elu+1), performer, linformer, the decayed gla and the
// delta rule's gated_deltanet.
const std::vector<Op> kDefaultMethods = {Op::softmax,   Op::linear, Op::favor,
                                         Op::linformer, Op::gla,    Op::gated_delta_rule};

double relative_error(std::span<const float> got, std::span<const float> want) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    diff = std::max(diff, std::abs(double(got[i]) - double(want[i])));
    scale = std::max(scale, std::abs(double(want[i])));
  }
  return scale > 0 ? diff / scale : diff;
}

// Every method's forward on the same inputs, against softmax (causal softmax for causal methods).
std::map<Op, double> accuracy(const CompareArgs& a, int64_t seq, const std::vector<Op>& ops) {
  const std::string reply = run_isolated([&] {
    set_num_threads(a.measure.threads);
    std::map<bool, std::vector<float>> reference;  // causal → softmax output
    nlohmann::json j = nlohmann::json::object();
    for (Op op : ops) {
      if (op == Op::softmax) continue;
      if (!reference.count(is_causal(op))) {
        Problem p = problem(a, Op::softmax, seq);
        p.causal = is_causal(op);
        Workload softmax(p);
        softmax.forward();
        reference[p.causal].assign(softmax.out().begin(), softmax.out().end());
      }
      Workload work(problem(a, op, seq));
      work.forward();
      j[method_name(op)] = relative_error(work.out(), reference[is_causal(op)]);
    }
    return j.dump();
  });
  std::map<Op, double> errors;
  const nlohmann::json parsed = nlohmann::json::parse(reply);
  for (const auto& [name, value] : parsed.items()) errors[method_names().at(name)] = value.get<double>();
  return errors;
}

// Least-squares slope of log y against log x: k in y ∝ x^k. None with fewer than 2 points.
std::optional<double> fit_exponent(const std::vector<std::pair<double, double>>& points) {
  if (points.size() < 2) return std::nullopt;
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (const auto& [x, y] : points) {
    sx += std::log(x);
    sy += std::log(y);
    sxx += std::log(x) * std::log(x);
    sxy += std::log(x) * std::log(y);
  }
  const double n = double(points.size()), den = n * sxx - sx * sx;
  if (den <= 0) return std::nullopt;
  return (n * sxy - sx * sy) / den;
}

// Printed under a table with an error above 1, and in --help.
constexpr const char* kErrorAboveOne =
    "An error above 1: the output differs from softmax's by more than softmax's largest entry. Linear attention "
    "(elu+1, causal), the decayed kinds (gla, ...) and the delta rule are other models, not approximations of "
    "softmax, so on N(0, 1) inputs their outputs need not be close; Performer and Linformer approximate softmax and "
    "come closer as --features / --projected grow.";

// What a method's output is compared with.
const char* error_reference(Op op) { return op == Op::softmax ? "" : is_causal(op) ? "causal softmax" : "softmax"; }

std::string cell_seconds(const std::optional<Timing>& t) { return t ? format_seconds(t->median) : "-"; }
std::string cell_bytes(int64_t bytes) { return bytes >= 0 ? format_bytes(double(bytes)) : "?"; }
nlohmann::json json_or_null(const std::optional<double>& x) { return x ? nlohmann::json(*x) : nlohmann::json(nullptr); }

// One result as JSON: the source of both compare.json's rows and compare.csv.
nlohmann::json result_json(const CompareArgs& a, const Row& r) {
  const Problem p = problem(a, r.op, r.seq);
  const double fwd = r.m.forward->median, flops = forward_flops(p);
  nlohmann::json j = {{"seq", r.seq},
                      {"method", method_name(r.op)},
                      {"batch", p.batch},
                      {"heads", p.heads},
                      {"dim", p.dim},
                      {"value_dim", p.value_dim},
                      {"threads", r.m.threads},
                      {"forward_seconds", timing_json(r.m.forward)},
                      {"forward_backward_seconds", timing_json(r.m.forward_backward)},
                      {"forward_flops", flops},
                      {"backward_flops", has_backward(r.op) ? nlohmann::json(backward_flops(p)) : nullptr},
                      {"tokens_per_second", double(p.batch) * double(r.seq) / fwd},
                      {"forward_gflops", flops / fwd * 1e-9},
                      {"forward_backward_gflops", nullptr},
                      {"peak_forward_bytes", r.m.peak_forward_bytes},
                      {"peak_bytes", r.m.peak_total_bytes},
                      {"estimated_bytes", estimated_bytes(p, has_backward(r.op))},
                      {"speedup_vs_softmax", json_or_null(r.speedup)},
                      {"relative_error", json_or_null(r.error)},
                      {"error_reference", error_reference(r.op)}};
  if (r.m.forward_backward)
    j["forward_backward_gflops"] = (flops + backward_flops(p)) / r.m.forward_backward->median * 1e-9;
  return j;
}

// The CSV columns; timings give their median.
// clang-format off
constexpr const char* kCsvColumns[] = {
    "seq", "method", "batch", "heads", "dim", "value_dim", "threads",                       // $1..$7
    "forward_seconds", "forward_backward_seconds", "tokens_per_second", "forward_gflops",   // $8..$11
    "forward_backward_gflops", "peak_forward_bytes", "peak_bytes", "speedup_vs_softmax",  // $12..$15
    "relative_error", "error_reference"};
// clang-format on

std::string csv(const nlohmann::json& results) {
  std::string text;
  for (const char* column : kCsvColumns) text += std::string(text.empty() ? "" : ",") + column;
  text += "\n";
  // Method-major, N ascending: gnuplot draws each method's points as one line.
  std::vector<nlohmann::json> rows(results.begin(), results.end());
  std::stable_sort(rows.begin(), rows.end(), [](const nlohmann::json& x, const nlohmann::json& y) {
    return method_names().at(x["method"].get<std::string>()) < method_names().at(y["method"].get<std::string>());
  });
  for (const nlohmann::json& row : rows) {
    std::string line;
    for (const char* column : kCsvColumns) {
      nlohmann::json value = row.at(column);
      if (value.is_object()) value = value.at("median");
      const std::string cell = value.is_null()           ? ""
                               : value.is_string()       ? csv_field(value.get<std::string>())
                               : value.is_number_float() ? format("%.9g", value.get<double>())
                                                         : value.dump();
      line += (column == kCsvColumns[0] ? "" : ",") + cell;
    }
    text += line + "\n";
  }
  return text;
}

// The gnuplot script: time and peak memory against N, log-log, one line per method.
std::string plot_script(const CompareArgs& a, const std::vector<Op>& ops, const std::string& csv_name, int threads) {
  std::string methods;
  for (Op op : ops) methods += std::string(methods.empty() ? "" : " ") + method_name(op);
  std::string s;
  s += "# Written by linattn compare; rerun with: gnuplot compare.gp (from this folder)\n";
  s += "set terminal pngcairo size 1400,560 font ',10'\n";
  s += plot_output("compare");
  s += "set datafile separator ','\n";
  s += "methods = '" + methods + "'\n";
  s += format("set multiplot layout 1,2 title 'linattn compare: B=%lld H=%lld D=%lld E=%lld, threads=%d'\n",
              (long long)a.batch, (long long)a.heads, (long long)a.dim,
              (long long)(a.value_dim > 0 ? a.value_dim : a.dim), threads);
  s += "set logscale x 2\nset logscale y 10\nset format y '%g'\nset grid\nset key top left\nset xlabel 'sequence "
       "length N'\n";
  s += "set ylabel 'seconds (solid: forward+backward, dashed: forward)'\n";
  s += "plot for [i=1:words(methods)] '" + csv_name +
       "' skip 1 using 1:(strcol(2) eq word(methods,i) ? $9 : NaN) with linespoints lc i pt 7 title word(methods,i), "
       "\\\n"
       "     for [i=1:words(methods)] '" +
       csv_name +
       "' skip 1 using 1:(strcol(2) eq word(methods,i) ? $8 : NaN) with linespoints lc i dt 2 pt 6 notitle\n";
  s += "set ylabel 'peak memory, MiB (forward+backward)'\n";
  s += "plot for [i=1:words(methods)] '" + csv_name +
       "' skip 1 using 1:(strcol(2) eq word(methods,i) && $14 > 0 ? $14/1048576 : NaN) with linespoints lc i pt 7 "
       "title word(methods,i)\n";
  s += "unset multiplot\n";
  return s;
}

int compare(const CompareArgs& a) {
  std::vector<Op> ops = a.methods;
  if (ops.empty()) ops = kDefaultMethods;
  std::sort(ops.begin(), ops.end());
  ops.erase(std::unique(ops.begin(), ops.end()), ops.end());
  const std::vector<int64_t> seqs = sweep(a);
  const bool need_accuracy = std::any_of(ops.begin(), ops.end(), [](Op op) { return op != Op::softmax; });
  // Refuse up front: every configuration, and the accuracy pass, which holds softmax's run and the
  // method's at once.
  for (int64_t seq : seqs)
    for (Op op : ops) {
      const Problem p = problem(a, op, seq);
      const std::string what = std::string(method_name(op)) + " at N=" + std::to_string(seq);
      check_memory(estimated_bytes(p, a.measure.backward && has_backward(op)), what);
      if (op != Op::softmax)
        check_memory(estimated_bytes(problem(a, Op::softmax, seq), false) + estimated_bytes(p, false),
                     "the accuracy check of " + what);
    }
  const std::filesystem::path folder = a.out;
  make_folder(folder);
  warn_if_busy();

  Progress progress(int(seqs.size() * (ops.size() + (need_accuracy ? 1 : 0))));
  std::vector<Row> rows;
  int threads = 0;
  for (int64_t seq : seqs) {
    std::vector<Row> block;
    for (Op op : ops) {
      progress.show(format("N=%lld %s", (long long)seq, method_name(op)));
      Row r{seq, op, measure(problem(a, op, seq), a.measure), std::nullopt, std::nullopt};
      threads = r.m.threads;
      block.push_back(r);
      progress.step("");
    }
    if (need_accuracy) {
      progress.show(format("N=%lld accuracy", (long long)seq));
      const auto errors = accuracy(a, seq, ops);
      for (Row& r : block)
        if (errors.count(r.op)) r.error = errors.at(r.op);
      progress.step("");
    }
    // The seed's question, "how much does it save": speed relative to softmax at this N.
    const auto total = [](const Row& r) { return (r.m.forward_backward ? r.m.forward_backward : r.m.forward)->median; };
    for (const Row& s : block)
      if (s.op == Op::softmax)
        for (Row& r : block)
          if (r.op != Op::softmax && (r.m.forward_backward || !s.m.forward_backward)) r.speedup = total(s) / total(r);
    Table table({"method", "fwd", "fwd+bwd", "tokens/s (fwd)", "GFLOP/s (fwd)", "peak fwd", "peak fwd+bwd",
                 "× faster than softmax", "rel. error vs softmax"});
    for (const Row& r : block) {
      const Problem p = problem(a, r.op, seq);
      const double fwd = r.m.forward->median;
      table.add({method_name(r.op), cell_seconds(r.m.forward), cell_seconds(r.m.forward_backward),
                 format("%.3g", double(p.batch) * double(seq) / fwd), format("%.3g", forward_flops(p) / fwd * 1e-9),
                 cell_bytes(r.m.peak_forward_bytes),
                 r.m.forward_backward ? cell_bytes(r.m.peak_total_bytes) : std::string("-"),
                 r.speedup ? format("%.3g", *r.speedup) : std::string("-"),
                 r.error ? format("%.3g%s", *r.error, is_causal(r.op) ? " (causal)" : "") : std::string("-")});
    }
    rows.insert(rows.end(), block.begin(), block.end());
    progress.clear();
    std::printf("N = %lld  (B=%lld, H=%lld, D=%lld, E=%lld, threads=%d)\n%s\n", (long long)seq, (long long)a.batch,
                (long long)a.heads, (long long)a.dim, (long long)(a.value_dim > 0 ? a.value_dim : a.dim), threads,
                table.render().c_str());
    if (std::any_of(block.begin(), block.end(), [](const Row& r) { return r.error && *r.error > 1; }))
      std::printf("%s\n", kErrorAboveOne);
    std::fflush(stdout);
  }

  nlohmann::json fits = nlohmann::json::object();
  Table fit_table({"method", "k (fwd)", "k (fwd+bwd)", "k (peak memory)"});
  for (Op op : ops) {
    std::vector<std::pair<double, double>> fwd, both, peak;
    for (const Row& r : rows) {
      if (r.op != op) continue;
      if (r.m.forward) fwd.push_back({double(r.seq), r.m.forward->median});
      if (r.m.forward_backward) both.push_back({double(r.seq), r.m.forward_backward->median});
      if (r.m.peak_total_bytes > 0) peak.push_back({double(r.seq), double(r.m.peak_total_bytes)});
    }
    const auto kf = fit_exponent(fwd), kb = fit_exponent(both), km = fit_exponent(peak);
    fits[method_name(op)] = {{"forward", json_or_null(kf)},
                             {"forward_backward", json_or_null(kb)},
                             {"peak_bytes", json_or_null(km)},
                             {"points", fwd.size()}};
    const auto cell = [](const std::optional<double>& k) { return k ? format("%.2f", *k) : std::string("-"); };
    fit_table.add({method_name(op), cell(kf), cell(kb), cell(km)});
  }
  std::printf("Scaling: least-squares fit of log time against log N, time ∝ N^k (N = %lld..%lld, %zu points)\n%s\n",
              (long long)seqs.front(), (long long)seqs.back(), seqs.size(), fit_table.render().c_str());

  nlohmann::json results = nlohmann::json::array();
  for (const Row& r : rows) results.push_back(result_json(a, r));
  std::vector<std::string> names;
  for (Op op : ops) names.push_back(method_name(op));
  const nlohmann::json document = {
      {"config",
       {{"batch", a.batch},
        {"heads", a.heads},
        {"dim", a.dim},
        {"value_dim", a.value_dim > 0 ? a.value_dim : a.dim},
        {"seqs", seqs},
        {"methods", names},
        {"threads", threads},
        {"seed", a.seed},
        {"dtype", dtype_name(a.dtype)},
        {"budget_seconds", a.measure.budget_seconds},
        {"inputs", "q, k, v ~ N(0, 1) in [B, N, H, D] layout"},
        {"peak_memory", "growth of VmHWM in a forked child per configuration, inputs included"}}},
      {"machine", {{"mem_available_bytes", mem_available_bytes()}, {"load_average", load_average()}}},
      {"results", results},
      {"fits", fits}};
  write_file_atomically(folder / "compare.json", document.dump(2) + "\n");
  write_file_atomically(folder / "compare.csv", csv(results));
  std::printf("wrote %s, %s\n", (folder / "compare.json").c_str(), (folder / "compare.csv").c_str());
  if (a.plot) write_plot(folder, "compare", plot_script(a, ops, "compare.csv", threads));
  return kExitOk;
}

const Registrar registrar{
    {"compare", "Sweep N: softmax vs linear attention time, memory, accuracy, scaling; JSON, CSV, PNG", 10,
     [](CLI::App& app) {
       auto a = std::make_shared<CompareArgs>();
       app.add_option("--batch", a->batch, "B")->capture_default_str()->check(flags::at_least(1));
       app.add_option("--heads", a->heads, "H")->capture_default_str()->check(flags::at_least(1));
       app.add_option("--dim", a->dim, "D, the query/key head dim")->capture_default_str()->check(flags::at_least(1));
       app.add_option("--value-dim", a->value_dim, "E, the value head dim (default: D)")->check(flags::at_least(1));
       app.add_option("--min-seq", a->min_seq, "Smallest N; the sweep doubles N up to --max-seq")
           ->capture_default_str()
           ->check(flags::bounded(1, limits::kMaxSequence));
       app.add_option("--max-seq", a->max_seq, "Largest N")
           ->capture_default_str()
           ->check(flags::bounded(1, limits::kMaxSequence));
       flags::add_list(app, "--seq", a->seqs, "Explicit list of N (comma-separated); overrides --min-seq/--max-seq",
                       flags::bounded(1, limits::kMaxSequence));
       flags::add_list(app, "--methods", a->methods,
                       "Comma-separated subset of softmax,linear,causal,recurrent,performer (alias favor),linformer, "
                       "the decayed retention,lightning,simple_gla,gla and the delta rule's deltanet (alias "
                       "delta_rule),gated_deltanet (alias gated_delta_rule),kda (default: softmax,linear,performer,"
                       "linformer,gla,gated_deltanet: one of each family)",
                       flags::choice(method_names()))
           ->option_text("OP,...");
       app.add_option("--out", a->out, "Output folder for compare.json, compare.csv, compare.gp, compare.png")
           ->capture_default_str();
       app.add_option("--threads", a->measure.threads, "Threads (linattn::set_num_threads); 0: the default")
           ->check(flags::threads());
       app.add_option("--budget", a->measure.budget_seconds, "Seconds of repetitions per timing, after a warm-up")
           ->capture_default_str()
           ->check(flags::finite(0, limits::kMaxBudgetSeconds));
       app.add_option("--min-reps", a->measure.min_reps, "Fewest repetitions per timing")
           ->capture_default_str()
           ->check(flags::bounded(1, 1000));
       app.add_flag("!--no-backward", a->measure.backward, "Time the forward only");
       app.add_flag("!--no-plot", a->plot, "Do not run gnuplot");
       app.add_option("--features", a->features, "Performer: random features M (0: default)")
           ->check(flags::bounded(0, limits::kMaxFeatures));
       app.add_option("--projected", a->projected, "Linformer: projected length k (0: min(N, 256))")
           ->check(flags::at_least(0));
       app.add_option("--seed", a->seed, "Seed of the N(0,1) inputs and random features")->check(flags::seed());
       app.add_option("--dtype", a->dtype,
                      "Storage of q, k, v, out and the gradients: f32, bf16 or f16 (fp32 products)")
           ->transform(flags::choice(dtype_names()));
       app.footer(
           "Each (N, method) runs in a forked child: times are medians after a warm-up; peak memory is the growth "
           "of that child's VmHWM (inputs, outputs, gradients and scratch). The error is max|out - out_softmax| / "
           "max|out_softmax| on the same inputs (causal methods against causal softmax). " +
           std::string(kErrorAboveOne) +
           " Exit 3: the estimated memory of some configuration exceeds what this process can allocate.");
       flags::examples(app, {"linattn compare --max-seq 4096 --out out/compare",
                             "linattn compare --seq 1024,4096 --methods softmax,causal --no-backward --threads 4",
                             "gnuplot compare.gp   # from the --out folder: redraws compare.png"});
       return [a] { return compare(*a); };
     }}};

}  // namespace
}  // namespace linattn::cli
