// linattn explain: the seed's two data flows (its section 4) with real shapes, and the flops and
// memory of every intermediate, so that the N×N scores and the M×E state can be compared.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "common/command.hpp"
#include "common/flags.hpp"
#include "common/memory.hpp"
#include "common/table.hpp"

namespace linattn::cli {
namespace {

struct ExplainArgs {
  int64_t batch = 1, heads = 8, seq = 4096, dim = 64, value_dim = 0, features = 0;
};

// One intermediate of a data flow: what, its shape, how it is computed, its flops and elements.
struct Step {
  std::string name, shape, formula;
  double flops = 0, elements = 0;
};

std::string shape(std::initializer_list<int64_t> extents) {
  std::string s = "[";
  for (int64_t e : extents) s += (s.size() > 1 ? ", " : "") + std::to_string(e);
  return s + "]";
}

std::string count(double x) {
  if (x >= 1e12) return format("%.3g T", x * 1e-12);
  if (x >= 1e9) return format("%.3g G", x * 1e-9);
  if (x >= 1e6) return format("%.3g M", x * 1e-6);
  if (x >= 1e3) return format("%.3g k", x * 1e-3);
  return format("%.0f", x);
}

// Prints the steps and returns {total flops, total bytes}; every step stays alive until the seed's
// function returns (Python holds its locals), so memory adds up.
std::pair<double, double> print_steps(const std::vector<Step>& steps) {
  Table table({"intermediate", "shape", "flops", "", "memory (fp32)"}, "llllr");
  double flops = 0, bytes = 0;
  for (const Step& s : steps) {
    table.add({s.name, s.shape, s.formula, s.flops > 0 ? count(s.flops) : "-", format_bytes(4 * s.elements)});
    flops += s.flops;
    bytes += 4 * s.elements;
  }
  table.add({"total", "", "", count(flops), format_bytes(bytes)});
  std::printf("%s\n", table.render().c_str());
  return {flops, bytes};
}

int explain(const ExplainArgs& a) {
  const int64_t B = a.batch, H = a.heads, N = a.seq, D = a.dim, E = a.value_dim > 0 ? a.value_dim : a.dim,
                M = a.features > 0 ? a.features : a.dim;
  const double b = double(B), h = double(H), n = double(N), d = double(D), e = double(E), m = double(M);
  std::printf("linattn explain: B=%lld H=%lld N=%lld D=%lld E=%lld M=%lld, fp32 (4 bytes per element)\n\n",
              (long long)B, (long long)H, (long long)N, (long long)D, (long long)E, (long long)M);

  std::printf("1. Standard attention, as the seed's standard_attention computes it\n\n");
  std::printf(
      "        Q %s\n         |\n         v\n        Q Kᵀ %s  <---- K %s\n         |\n         v\n"
      "      softmax\n         |\n         v\n      weighted sum with V %s  ->  out %s\n\n",
      shape({B, H, N, D}).c_str(), shape({B, H, N, N}).c_str(), shape({B, H, N, D}).c_str(),
      shape({B, H, N, E}).c_str(), shape({B, H, N, E}).c_str());
  const auto [softmax_flops, softmax_bytes] = print_steps({
      {"Q, K (inputs)", "2 × " + shape({B, H, N, D}), "", 0, 2 * b * h * n * d},
      {"V (input)", shape({B, H, N, E}), "", 0, b * h * n * e},
      {"scores = Q Kᵀ / √D", shape({B, H, N, N}), "2·B·H·N²·D + B·H·N²", 2 * b * h * n * n * d + b * h * n * n,
       b * h * n * n},
      {"attn = softmax(scores)", shape({B, H, N, N}), "5·B·H·N² (max, sub, exp, sum, div)", 5 * b * h * n * n,
       b * h * n * n},
      {"out = attn V", shape({B, H, N, E}), "2·B·H·N²·E", 2 * b * h * n * n * e, b * h * n * e},
  });

  std::printf("2. Linear attention, as the seed's linear_attention computes it (φ = elu + 1)\n\n");
  std::printf(
      "      φ(Q) %s\n         |\n         v\n     φ(K)ᵀ V %s  <--- φ(K) %s, V %s\n         |\n"
      "         v\n     out = φ(Q) × (φ(K)ᵀ V) / (φ(Q)·Σφ(K) + ε)  ->  out %s\n\n",
      shape({B, N, H, M}).c_str(), shape({B, H, M, E}).c_str(), shape({B, N, H, M}).c_str(),
      shape({B, N, H, E}).c_str(), shape({B, N, H, E}).c_str());
  const auto [linear_flops, linear_bytes] = print_steps({
      {"Q, K (inputs)", "2 × " + shape({B, N, H, D}), "", 0, 2 * b * n * h * d},
      {"V (input)", shape({B, N, H, E}), "", 0, b * n * h * e},
      {"Q' = φ(Q) = elu(Q) + 1", shape({B, N, H, M}), "3·B·N·H·M (compare, exp, add)", 3 * b * n * h * m,
       b * n * h * m},
      {"K' = φ(K)", shape({B, N, H, M}), "3·B·N·H·M", 3 * b * n * h * m, b * n * h * m},
      {"KV = einsum(K', V)", shape({B, H, M, E}), "2·B·H·N·M·E", 2 * b * h * n * m * e, b * h * m * e},
      {"K'.sum over N", shape({B, H, M}), "B·H·N·M", b * h * n * m, b * h * m},
      {"Z = 1 / (Q'·ΣK' + ε)", shape({B, N, H}), "2·B·N·H·M + 2·B·N·H", 2 * b * n * h * m + 2 * b * n * h, b * n * h},
      {"out = einsum(Q', KV, Z)", shape({B, N, H, E}), "2·B·N·H·M·E + B·N·H·E", 2 * b * n * h * m * e + b * n * h * e,
       b * n * h * e},
  });

  std::printf("3. The contrast\n\n");
  std::printf(
      "  per (batch, head): the scores hold N×N = %s floats (%s); the state φ(K)ᵀV holds M×E = %s floats (%s)\n",
      count(n * n).c_str(), format_bytes(4 * n * n).c_str(), count(m * e).c_str(), format_bytes(4 * m * e).c_str());
  std::printf("  flops: standard %s, linear %s (%.3g× %s)\n", count(softmax_flops).c_str(), count(linear_flops).c_str(),
              softmax_flops > linear_flops ? softmax_flops / linear_flops : linear_flops / softmax_flops,
              softmax_flops > linear_flops ? "fewer for linear" : "fewer for standard");
  std::printf("  memory of the seed's intermediates: standard %s, linear %s\n", format_bytes(softmax_bytes).c_str(),
              format_bytes(linear_bytes).c_str());
  std::printf(
      "  the matrix products cost the same where 2·N²·(D+E) = 4·N·M·E, i.e. N = 2·M·E/(D+E) = %.0f;\n"
      "  above it, standard attention's cost grows as N² and linear attention's as N\n",
      2 * m * e / (d + e));
  std::printf(
      "  linattn's softmax never stores the N×N matrix either: it is tiled with an online softmax\n"
      "  (FlashAttention-2) and keeps one log-sum-exp per row, %s here, for the backward\n",
      format_bytes(4 * b * h * n).c_str());
  return kExitOk;
}

const Registrar registrar{
    {"explain", "Show the seed's two data flows with real shapes, flops and memory", 20, [](CLI::App& app) {
       auto a = std::make_shared<ExplainArgs>();
       app.add_option("--batch", a->batch, "B")->capture_default_str()->check(flags::positive());
       app.add_option("--heads", a->heads, "H")->capture_default_str()->check(flags::positive());
       app.add_option("--seq", a->seq, "N")->capture_default_str()->check(flags::positive());
       app.add_option("--dim", a->dim, "D")->capture_default_str()->check(flags::positive());
       app.add_option("--value-dim", a->value_dim, "E (default: D)")->check(flags::positive());
       app.add_option("--features", a->features, "M, the feature dim (default: D, as elu+1)")->check(flags::positive());
       flags::examples(app, {"linattn explain", "linattn explain --seq 65536 --dim 128"});
       return [a] { return explain(*a); };
     }}};

}  // namespace
}  // namespace linattn::cli
