// linattn info: the machine as linattn sees it (CPU features, the Highway targets compiled in and the
// one dispatch chose, the version, threads), so that a user can tell which path their numbers come
// from. The detection is the library's (include/linattn/cpu_info.hpp), shared with the C API's
// linattn_info_json() and Python's linattn.info().
#include <CLI/CLI.hpp>
#include <cstdio>
#include <memory>

#include "common/command.hpp"
#include "common/flags.hpp"
#include "linattn/cpu_info.hpp"

namespace linattn::cli {
namespace {

struct InfoArgs {
  bool json = false;
};

int info(const InfoArgs& args) {
  const CpuInfo machine = cpu_info();
  if (args.json)
    std::printf("%s\n", cpu_info_json(machine).c_str());
  else
    std::printf("%s", cpu_info_text(machine).c_str());
  return kExitOk;
}

const Registrar registrar{
    {"info", "Print the CPU's features, the SIMD targets compiled in and the one dispatch chose", 90,
     [](CLI::App& app) {
       auto args = std::make_shared<InfoArgs>();
       app.add_flag("--json", args->json, "Print one JSON object");
       app.footer(
           "features: the CPUID flags (x86, each with the OS's saved register state) or the HWCAP bits "
           "(aarch64, riscv64) that linattn's kernels can use. targets compiled: Highway's targets built "
           "into liblinattn; runnable: those this CPU supports; dispatch chose: the one every kernel runs "
           "(Highway's choice among the runnable ones). threads: the OpenMP threads the operators use "
           "(OMP_NUM_THREADS).");
       flags::examples(app, {"linattn info", "linattn info --json"});
       return [args] { return info(*args); };
     }}};

}  // namespace
}  // namespace linattn::cli
