// CPU feature detection and the Highway dispatch probe behind include/linattn/cpu_info.hpp. It lives
// with the kernels (not src/core) because the probe must be compiled exactly as they are: one copy
// per target of HWY_TARGETS, dispatched by the same HWY_DYNAMIC_DISPATCH, so the target it names is
// the target every kernel runs.
#include <cstdint>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu_info.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
// Must follow foreach_target.h.
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace linattn::simd {
namespace HWY_NAMESPACE {
// The target this copy was compiled for.
int64_t CompiledTarget() { return HWY_TARGET; }
}  // namespace HWY_NAMESPACE
}  // namespace linattn::simd
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <cstdio>
#include <string>

#include "hwy/targets.h"
#include "linattn/cpu_info.hpp"
#include "linattn/threads.hpp"
#include "linattn/version.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#if defined(__linux__) && (defined(__aarch64__) || defined(__riscv))
#include <sys/auxv.h>
#include <sys/prctl.h>
#endif

namespace linattn {
namespace simd {
HWY_EXPORT(CompiledTarget);
// In the namespace of the export: with a single compiled target (static dispatch) the macro names
// the target's namespace relative to this one.
int64_t dispatched_target() { return HWY_DYNAMIC_DISPATCH(CompiledTarget)(); }
}  // namespace simd

namespace {

using Features = std::vector<std::pair<std::string, bool>>;

#if defined(__x86_64__) || defined(__i386__)
bool bit(unsigned value, int i) { return ((value >> i) & 1u) != 0; }

// The CPUID flags, each AND the OS's saved state for its registers (XGETBV): a CPU with AVX-512 under
// an OS that does not save the ZMM registers cannot run AVX-512 code, and Highway does not pick it.
void detect_x86(CpuInfo& info) {
  unsigned a = 0, b = 0, c = 0, d = 0;
  unsigned max_leaf = __get_cpuid_max(0, nullptr);
  unsigned c1 = 0, b7 = 0, c7 = 0, d7 = 0, a71 = 0;
  if (__get_cpuid(1, &a, &b, &c, &d)) c1 = c;
  if (max_leaf >= 7) {
    __cpuid_count(7, 0, a, b, c, d);
    b7 = b, c7 = c, d7 = d;
    const unsigned subleaves = a;
    if (subleaves >= 1) {
      __cpuid_count(7, 1, a, b, c, d);
      a71 = a;
    }
  }
  uint64_t xcr0 = 0;
  if (bit(c1, 27)) {  // OSXSAVE: XGETBV is available
    unsigned lo = 0, hi = 0;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    xcr0 = (uint64_t(hi) << 32) | lo;
  }
  const bool ymm = (xcr0 & 0x6) == 0x6;           // XMM and YMM state
  const bool zmm = ymm && (xcr0 & 0xe0) == 0xe0;  // opmask, ZMM0-15 upper halves, ZMM16-31
  info.features = {
      {"sse4.2", bit(c1, 20)},
      {"avx", ymm && bit(c1, 28)},
      {"avx2", ymm && bit(b7, 5)},
      {"fma", ymm && bit(c1, 12)},
      {"f16c", ymm && bit(c1, 29)},
      {"avx512f", zmm && bit(b7, 16)},
      {"avx512bw", zmm && bit(b7, 30)},
      {"avx512vl", zmm && bit(b7, 31)},
      {"avx512dq", zmm && bit(b7, 17)},
      {"avx512_vnni", zmm && bit(c7, 11)},
      {"avx512_bf16", zmm && bit(a71, 5)},
      {"avx512_fp16", zmm && bit(d7, 23)},
      {"avx_vnni", ymm && bit(a71, 4)},
  };
  // The cast: clang's cpuid.h returns int where gcc's returns unsigned.
  if (static_cast<unsigned>(__get_cpuid_max(0x80000000u, nullptr)) >= 0x80000004u) {
    char brand[49] = {};
    for (unsigned i = 0; i < 3; ++i) {
      __cpuid(0x80000002u + i, a, b, c, d);
      const unsigned words[4] = {a, b, c, d};
      for (int w = 0; w < 4; ++w)
        for (int j = 0; j < 4; ++j) brand[16 * i + 4 * w + j] = char((words[w] >> (8 * j)) & 0xffu);
    }
    std::string s(brand);
    const size_t first = s.find_first_not_of(' '), last = s.find_last_not_of(' ');
    info.model = first == std::string::npos ? "" : s.substr(first, last - first + 1);
  }
}
#endif

#if defined(__linux__) && defined(__aarch64__)
// Bits of AT_HWCAP and AT_HWCAP2 (Linux's arch/arm64/include/uapi/asm/hwcap.h), spelled out so that
// an older libc's headers still compile this.
void detect_aarch64(CpuInfo& info) {
  const unsigned long hw = getauxval(AT_HWCAP), hw2 = getauxval(AT_HWCAP2);
  auto has = [](unsigned long v, int i) { return ((v >> i) & 1ul) != 0; };
  info.features = {
      {"asimd", has(hw, 1)},    {"fphp", has(hw, 9)},      {"asimdhp", has(hw, 10)},
      {"asimddp", has(hw, 20)}, {"sve", has(hw, 22)},      {"sve2", has(hw2, 1)},
      {"bf16", has(hw2, 14)},   {"svebf16", has(hw2, 12)}, {"i8mm", has(hw2, 13)},
  };
#ifdef PR_SVE_GET_VL
  if (has(hw, 22)) {
    const int vl = prctl(PR_SVE_GET_VL);
    if (vl > 0) info.sve_vector_bytes = vl & 0xffff;  // PR_SVE_VL_LEN_MASK
  }
#endif
}
#endif

#if defined(__linux__) && defined(__riscv)
void detect_riscv(CpuInfo& info) {
  const unsigned long hw = getauxval(AT_HWCAP);
  info.features = {{"v", ((hw >> ('V' - 'A')) & 1ul) != 0}};
}
#endif

void append_json_string(std::string& out, const std::string& s) {
  out += '"';
  for (char ch : s) {
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (static_cast<unsigned char>(ch) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", unsigned(static_cast<unsigned char>(ch)));
      out += buf;
    } else {
      out += ch;
    }
  }
  out += '"';
}

void append_json_list(std::string& out, const std::vector<std::string>& items) {
  out += '[';
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) out += ", ";
    append_json_string(out, items[i]);
  }
  out += ']';
}

std::string joined(const std::vector<std::string>& items) {
  std::string s;
  for (const std::string& item : items) s += (s.empty() ? "" : " ") + item;
  return s.empty() ? "(none)" : s;
}

}  // namespace

CpuInfo cpu_info() {
  CpuInfo info;
#if defined(__x86_64__)
  info.architecture = "x86_64";
  detect_x86(info);
#elif defined(__aarch64__)
  info.architecture = "aarch64";
#if defined(__linux__)
  detect_aarch64(info);
#endif
#elif defined(__riscv) && __riscv_xlen == 64
  info.architecture = "riscv64";
#if defined(__linux__)
  detect_riscv(info);
#endif
#else
  info.architecture = "other";
#endif
  const int64_t supported = hwy::SupportedTargets();
  // HWY_TARGETS' bits, lowest first (Highway numbers the targets it prefers lower).
  for (int64_t targets = HWY_TARGETS; targets != 0; targets &= targets - 1) {
    const int64_t target = targets & -targets;
    info.compiled_targets.push_back(hwy::TargetName(target));
    if (supported & target) info.supported_targets.push_back(hwy::TargetName(target));
  }
  info.dispatched_target = hwy::TargetName(simd::dispatched_target());
  info.version = kVersion;
  info.threads = num_threads();
  return info;
}

std::string cpu_info_json(const CpuInfo& info) {
  std::string out = "{\"version\": ";
  append_json_string(out, info.version);
  out += ", \"architecture\": ";
  append_json_string(out, info.architecture);
  out += ", \"model\": ";
  append_json_string(out, info.model);
  out += ", \"features\": {";
  for (size_t i = 0; i < info.features.size(); ++i) {
    if (i) out += ", ";
    append_json_string(out, info.features[i].first);
    out += info.features[i].second ? ": true" : ": false";
  }
  out += "}, \"sve_vector_bytes\": " + std::to_string(info.sve_vector_bytes);
  out += ", \"compiled_targets\": ";
  append_json_list(out, info.compiled_targets);
  out += ", \"supported_targets\": ";
  append_json_list(out, info.supported_targets);
  out += ", \"dispatched_target\": ";
  append_json_string(out, info.dispatched_target);
  out += ", \"threads\": " + std::to_string(info.threads) + "}";
  return out;
}

std::string cpu_info_text(const CpuInfo& info) {
  std::vector<std::string> present, absent;
  for (const auto& [name, has] : info.features) (has ? present : absent).push_back(name);
  std::string s;
  s += "linattn " + info.version + "\n";
  s += "cpu:               " + info.architecture + (info.model.empty() ? "" : ", " + info.model) + "\n";
  s += "features present:  " + joined(present) + "\n";
  s += "features absent:   " + joined(absent) + "\n";
  if (info.sve_vector_bytes > 0) s += "sve vector length: " + std::to_string(8 * info.sve_vector_bytes) + " bits\n";
  s += "targets compiled:  " + joined(info.compiled_targets) + "\n";
  s += "targets runnable:  " + joined(info.supported_targets) + "\n";
  s += "dispatch chose:    " + info.dispatched_target + "\n";
  s += "threads (OpenMP):  " + std::to_string(info.threads) + "\n";
  return s;
}

}  // namespace linattn
#endif  // HWY_ONCE
