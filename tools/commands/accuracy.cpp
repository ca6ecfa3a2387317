// linattn accuracy: how close Performer (FAVOR+) and Linformer come to exact softmax attention as
// their size grows (m random features, P projected positions), on random or peaked inputs.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/command.hpp"
#include "common/memory.hpp"
#include "common/workload.hpp"
#include "linattn/quality.hpp"

namespace linattn::cli {
namespace {

struct AccuracyArgs {
  QualityOptions quality;
  std::string method = "performer";
  std::vector<int64_t> sizes = {16, 64, 256, 1024};
};

int accuracy(const AccuracyArgs& a) {
  const QualityOptions& q = a.quality;
  for (int64_t size : a.sizes)
    if (a.method == "linformer" && size > q.seq_len)
      throw UsageError("--sizes value " + std::to_string(size) + " is above --seq " + std::to_string(q.seq_len) +
                       " (Linformer projects N keys onto P ≤ N positions)");
  // The largest size's run, plus softmax's output to compare with.
  Problem p;
  p.op = a.method == "performer" ? Op::performer : Op::linformer;
  p.batch = q.batch, p.heads = q.heads, p.seq = q.seq_len, p.dim = q.dim, p.value_dim = q.value_dim;
  for (int64_t size : a.sizes) (a.method == "performer" ? p.features : p.projected) = std::max(p.features, size);
  check_memory(2 * estimated_bytes(p, false), "accuracy --method " + a.method);

  std::vector<std::string> names;
  std::vector<std::vector<ErrorCurvePoint>> curves;
  if (a.method == "performer") {
    names = {"FAVOR+ orthogonal", "FAVOR+ i.i.d."};
    curves = {favor_error_curve(a.sizes, q, true), favor_error_curve(a.sizes, q, false)};
  } else {
    names = {"mean pooling", "Gaussian N(0, 1/P)"};
    curves = {linformer_error_curve(a.sizes, q, LinformerInit::mean_pooling),
              linformer_error_curve(a.sizes, q, LinformerInit::gaussian)};
  }
  std::printf(
      "%s against exact softmax: ‖O − O_softmax‖_F / ‖O_softmax‖_F, mean over %lld trials\n"
      "B=%lld H=%lld N=%lld D=%lld E=%lld, %s inputs, q and k entries N(0, %.3g²)\n\n%s\n",
      a.method.c_str(), (long long)q.trials, (long long)q.batch, (long long)q.heads, (long long)q.seq_len,
      (long long)q.dim, (long long)q.value_dim, quality_input_name(q.input), q.qk_std,
      error_table(names, curves, a.method == "performer" ? "m" : "P").c_str());
  return kExitOk;
}

const Registrar registrar{
    {"accuracy", "Error of Performer or Linformer against softmax as m or P grows", 25, [](CLI::App& app) {
       auto a = std::make_shared<AccuracyArgs>();
       QualityOptions& q = a->quality;
       app.add_option("--method", a->method, "performer (m random features) or linformer (P projected positions)")
           ->capture_default_str()
           ->check(CLI::IsMember({"performer", "linformer"}));
       app.add_option("--sizes", a->sizes, "The m or P values, comma-separated")
           ->delimiter(',')
           ->check(CLI::PositiveNumber);
       app.add_option("--batch", q.batch, "B")->capture_default_str()->check(CLI::PositiveNumber);
       app.add_option("--heads", q.heads, "H")->capture_default_str()->check(CLI::PositiveNumber);
       app.add_option("--seq", q.seq_len, "N")->capture_default_str()->check(CLI::PositiveNumber);
       app.add_option("--dim", q.dim, "D")->capture_default_str()->check(CLI::PositiveNumber);
       app.add_option("--value-dim", q.value_dim, "E")->capture_default_str()->check(CLI::PositiveNumber);
       app.add_option("--input", q.input, "random (flat attention) or peaked (each query near one key)")
           ->transform(CLI::CheckedTransformer(
               std::map<std::string, QualityInput>{{"random", QualityInput::random}, {"peaked", QualityInput::peaked}},
               CLI::ignore_case))
           ->option_text("random|peaked");
       app.add_option("--qk-std", q.qk_std, "Standard deviation of the q and k entries")
           ->capture_default_str()
           ->check(CLI::PositiveNumber);
       app.add_option("--trials", q.trials, "Draws averaged per point")
           ->capture_default_str()
           ->check(CLI::PositiveNumber);
       app.add_option("--seed", q.seed, "Seed of the inputs and the draws");
       return [a] { return accuracy(*a); };
     }}};

}  // namespace
}  // namespace linattn::cli
