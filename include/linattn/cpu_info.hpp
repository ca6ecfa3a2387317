#pragma once
// The machine as linattn sees it: the CPU's SIMD features, the Highway targets compiled into the
// library, the one its runtime dispatch chose, the version and the operator threads. One source for
// `linattn info`, the C API's linattn_info_json() and Python's linattn.info().
#include <string>
#include <utility>
#include <vector>

namespace linattn {

struct CpuInfo {
  // "x86_64", "aarch64", "riscv64" or "other".
  std::string architecture;
  // x86: the CPUID brand string; elsewhere empty.
  std::string model;
  // The features relevant to linattn's kernels, in a fixed order per architecture, each with whether
  // this CPU (and, on x86, the OS's saved register state) provides it. x86: sse4.2, avx, avx2, fma,
  // f16c, avx512f, avx512bw, avx512vl, avx512dq, avx512_vnni, avx512_bf16, avx512_fp16, avx_vnni.
  // aarch64 (getauxval HWCAP/HWCAP2): asimd, fphp, asimdhp, asimddp, sve, sve2, bf16, svebf16, i8mm.
  // riscv64: v.
  std::vector<std::pair<std::string, bool>> features;
  // aarch64 with SVE: the vector length in bytes (prctl PR_SVE_GET_VL); 0 otherwise.
  int sve_vector_bytes = 0;
  // Highway targets compiled into liblinattn (HWY_TARGETS), in its bit order (lower bits are the targets
  // it prefers), e.g. "AVX3", "AVX2", "SSE4".
  std::vector<std::string> compiled_targets;
  // Those of compiled_targets this CPU can run.
  std::vector<std::string> supported_targets;
  // The target every kernel of liblinattn runs (HWY_DYNAMIC_DISPATCH's choice).
  std::string dispatched_target;
  std::string version;
  // linattn::num_threads(): the OpenMP threads the operators use.
  int threads = 0;
};

// Detects once per call (cheap: a few CPUID instructions, no files read).
CpuInfo cpu_info();
// One JSON object with the fields above ("features" an object of booleans).
std::string cpu_info_json(const CpuInfo& info);
// The same for a person, several lines.
std::string cpu_info_text(const CpuInfo& info);

}  // namespace linattn
