// linattn.info(): the machine as linattn sees it, as a dict (include/linattn/cpu_info.hpp).
#include <pybind11/stl.h>

#include "bindings.hpp"
#include "linattn/cpu_info.hpp"

namespace linattn::python {

void bind_info(py::module_& m) {
  m.def(
      "info",
      [] {
        const CpuInfo c = cpu_info();
        py::dict features;
        for (const auto& [name, has] : c.features) features[py::str(name)] = has;
        py::dict d;
        d["version"] = c.version;
        d["architecture"] = c.architecture;
        d["model"] = c.model;
        d["features"] = features;
        d["sve_vector_bytes"] = c.sve_vector_bytes;
        d["compiled_targets"] = c.compiled_targets;
        d["supported_targets"] = c.supported_targets;
        d["dispatched_target"] = c.dispatched_target;
        d["threads"] = c.threads;
        return d;
      },
      "The machine as linattn sees it: {'version', 'architecture', 'model', 'features': {name: bool}, "
      "'sve_vector_bytes', 'compiled_targets', 'supported_targets', 'dispatched_target', 'threads'} "
      "(the same as `linattn info --json`).");
}

}  // namespace linattn::python
