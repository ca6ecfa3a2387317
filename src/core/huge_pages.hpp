#pragma once
// Scratch of many MiB that a kernel sweeps again and again (softmax's key packs: 8 MiB a head at
// N = 16384; the backward's dk and dv of a head beside them) is read through the TLB a 4 KiB page
// at a time; past a couple of thousand pages, each tile's first touch waits on a page walk. Backed
// by 2 MiB pages, it needs a few TLB entries instead.
#include <cstddef>
#include <cstdlib>
#include <memory>

namespace linattn::detail {

struct FreeScratch {
  void operator()(float* data) const { std::free(data); }
};
using Scratch = std::unique_ptr<float[], FreeScratch>;

// `floats` zeroed floats, 64-byte aligned; from 2 MiB on, aligned to 2 MiB and backed by
// transparent huge pages where the system gives them (Linux with THP "always" or "madvise"; else
// ordinary pages, which are correct too). Throws std::bad_alloc when memory runs out.
Scratch zeroed_scratch(size_t floats);

}  // namespace linattn::detail
