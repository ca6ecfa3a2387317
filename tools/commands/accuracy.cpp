// linattn accuracy: how close Performer (FAVOR+) and Linformer come to exact softmax attention as
// their size grows (m random features, P projected positions), on random and peaked inputs: a table,
// and accuracy.csv plus a log-log accuracy.png drawn by gnuplot.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/command.hpp"
#include "common/flags.hpp"
#include "common/memory.hpp"
#include "common/output.hpp"
#include "common/workload.hpp"
#include "linattn/file_io.hpp"
#include "linattn/quality.hpp"

namespace linattn::cli {
namespace {

struct AccuracyArgs {
  QualityOptions quality;
  std::string method = "performer";
  std::vector<int64_t> sizes = {16, 64, 256, 1024};
  std::vector<QualityInput> inputs = {QualityInput::random, QualityInput::peaked};
  std::string out = "out/accuracy";
  bool plot = true;
};

// One measured curve: a method variant on one kind of input.
struct Curve {
  std::string name;
  QualityInput input;
  std::vector<ErrorCurvePoint> points;
};

std::string csv(const std::string& method, const std::vector<Curve>& curves) {
  std::string s = "method,variant,input,size,mean_error,max_error\n";
  char line[160];
  for (const Curve& c : curves)
    for (const ErrorCurvePoint& p : c.points) {
      std::snprintf(line, sizeof line, ",%s,%lld,%.9g,%.9g\n", quality_input_name(c.input), (long long)p.size,
                    p.mean_error, p.max_error);
      s += method + "," + csv_field(c.name) + line;
    }
  return s;
}

// Error against m or P on log-log axes, one line per (variant, input).
std::string plot_script(const std::string& method, const std::vector<Curve>& curves, const QualityOptions& q) {
  std::string s = "# Written by linattn accuracy; rerun with: gnuplot accuracy.gp (from this folder)\n";
  s += "set terminal pngcairo size 900,600 font ',10'\n" + plot_output("accuracy");
  s += "set datafile separator ','\nset logscale xy\nset grid\nset key outside right\nset format y '%g'\n";
  s += "set xlabel '" + std::string(method == "performer" ? "random features m" : "projected positions P") + "'\n";
  s += "set ylabel 'relative error against exact softmax'\n";
  char title[200];
  std::snprintf(title, sizeof title,
                "set title '%s: N=%lld D=%lld, q and k entries with std %.3g, mean over %lld trials' noenhanced\n",
                method.c_str(), (long long)q.seq_len, (long long)q.dim, q.qk_std, (long long)q.trials);
  s += title;
  s += "plot ";
  for (size_t i = 0; i < curves.size(); ++i) {
    const std::string label = curves[i].name + ", " + quality_input_name(curves[i].input) + " inputs";
    s += (i ? ", \\\n     " : "") + std::string("'accuracy.csv' skip 1 using 4:(strcol(2) eq '") + curves[i].name +
         "' && strcol(3) eq '" + quality_input_name(curves[i].input) + "' ? $5 : NaN) with linespoints lw 2 title '" +
         label + "'";
  }
  return s + "\n";
}

int accuracy(const AccuracyArgs& a) {
  const QualityOptions& q = a.quality;
  for (int64_t size : a.sizes)
    if (a.method == "linformer" && size > q.seq_len)
      throw UsageError("--sizes value " + std::to_string(size) + " is above --seq " + std::to_string(q.seq_len) +
                       " (Linformer projects N keys onto P ≤ N positions)");
  // The largest size's run, plus softmax's output to compare with.
  Problem p;
  p.op = a.method == "performer" ? Op::favor : Op::linformer;
  p.batch = q.batch, p.heads = q.heads, p.seq = q.seq_len, p.dim = q.dim, p.value_dim = q.value_dim;
  for (int64_t size : a.sizes) (a.method == "performer" ? p.features : p.projected) = std::max(p.features, size);
  check_memory(2 * estimated_bytes(p, false), "accuracy --method " + a.method);

  // No comma in a name: gnuplot splits accuracy.csv at every ',' even inside CSV quotes ("Gaussian
  // N(0, 1/P)" lost its curves).
  std::vector<std::string> names = a.method == "performer"
                                       ? std::vector<std::string>{"FAVOR+ orthogonal", "FAVOR+ i.i.d."}
                                       : std::vector<std::string>{"mean pooling", "Gaussian N(0; 1/P)"};
  std::vector<Curve> all;
  for (QualityInput input : a.inputs) {
    QualityOptions qi = q;
    qi.input = input;
    std::vector<std::vector<ErrorCurvePoint>> curves;
    if (a.method == "performer")
      curves = {favor_error_curve(a.sizes, qi, true), favor_error_curve(a.sizes, qi, false)};
    else
      curves = {linformer_error_curve(a.sizes, qi, LinformerInit::mean_pooling),
                linformer_error_curve(a.sizes, qi, LinformerInit::gaussian)};
    std::printf(
        "%s against exact softmax: ‖O − O_softmax‖_F / ‖O_softmax‖_F, mean over %lld trials\n"
        "B=%lld H=%lld N=%lld D=%lld E=%lld, %s inputs, q and k entries N(0, %.3g²)\n\n%s\n",
        a.method.c_str(), (long long)q.trials, (long long)q.batch, (long long)q.heads, (long long)q.seq_len,
        (long long)q.dim, (long long)q.value_dim, quality_input_name(input), q.qk_std,
        error_table(names, curves, a.method == "performer" ? "m" : "P").c_str());
    for (size_t i = 0; i < curves.size(); ++i) all.push_back({names[i], input, curves[i]});
  }
  const std::filesystem::path folder = a.out;
  make_folder(folder);
  write_file_atomically(folder / "accuracy.csv", csv(a.method, all));
  std::printf("wrote %s\n", (folder / "accuracy.csv").c_str());
  if (a.plot) write_plot(folder, "accuracy", plot_script(a.method, all, q));
  return kExitOk;
}

const Registrar registrar{
    {"accuracy", "Error of Performer or Linformer against softmax as m or P grows", 25, [](CLI::App& app) {
       auto a = std::make_shared<AccuracyArgs>();
       QualityOptions& q = a->quality;
       app.add_option("--method", a->method,
                      "performer (alias favor: FAVOR+, m random features) or linformer (P projected positions)")
           ->capture_default_str()
           ->transform(flags::choice(std::map<std::string, std::string>{
               {"performer", "performer"}, {"favor", "performer"}, {"linformer", "linformer"}}));
       flags::add_list(app, "--sizes", a->sizes, "The m or P values, comma-separated", flags::at_least(1));
       app.add_option("--batch", q.batch, "B")->capture_default_str()->check(flags::at_least(1));
       app.add_option("--heads", q.heads, "H")->capture_default_str()->check(flags::at_least(1));
       app.add_option("--seq", q.seq_len, "N")->capture_default_str()->check(flags::at_least(1));
       app.add_option("--dim", q.dim, "D")->capture_default_str()->check(flags::at_least(1));
       app.add_option("--value-dim", q.value_dim, "E")->capture_default_str()->check(flags::at_least(1));
       flags::add_list(app, "--input", a->inputs,
                       "Inputs: random (flat attention), peaked (each query near one key), or both",
                       flags::choice(std::map<std::string, QualityInput>{{"random", QualityInput::random},
                                                                         {"peaked", QualityInput::peaked}}))
           ->option_text("random,peaked (default both)");
       app.add_option("--out", a->out, "Output folder for accuracy.csv, accuracy.gp, accuracy.png")
           ->capture_default_str();
       app.add_flag("!--no-plot", a->plot, "Do not run gnuplot");
       app.add_option("--qk-std", q.qk_std, "Standard deviation of the q and k entries")
           ->capture_default_str()
           ->check(flags::positive());
       app.add_option("--trials", q.trials, "Draws averaged per point")
           ->capture_default_str()
           ->check(flags::at_least(1));
       app.add_option("--seed", q.seed, "Seed of the inputs and the draws")->check(flags::seed());
       flags::examples(
           app, {"linattn accuracy --method performer --sizes 16,64,256 --out out/accuracy",
                 "linattn accuracy --method linformer --seq 512 --sizes 32,128 --input peaked --out out/linformer",
                 "gnuplot accuracy.gp   # from the --out folder: redraws accuracy.png"});
       return [a] { return accuracy(*a); };
     }}};

}  // namespace
}  // namespace linattn::cli
