// The _linattn extension module; linattn/__init__.py re-exports it.
#include <pybind11/pybind11.h>

#include "bindings.hpp"
#include "linattn/threads.hpp"
#include "linattn/version.hpp"

PYBIND11_MODULE(_linattn, m) {
  namespace py = pybind11;
  using namespace linattn::python;
  m.doc() = "linattn: exact softmax attention and linear attention over long sequences, on float32 numpy arrays.";
  // linattn::Error is a std::invalid_argument, which pybind11 raises as ValueError.
  bind_attention(m);
  bind_reference(m);
  bind_state(m);
  bind_linformer(m);
  bind_half(m);
  bind_decay(m);  // after bind_reference and bind_half: it adds to m.reference and m.half
  bind_delta(m);  // likewise
  bind_dplr(m);   // after bind_reference
  bind_info(m);
  m.def("set_num_threads", &linattn::set_num_threads, py::arg("threads"),
        "Threads used by the operators (0: the OpenMP default); results are identical for any count.");
  m.def("num_threads", &linattn::num_threads);
  m.attr("has_favor") = has_favor();
  // The C++ library's version (CMakeLists.txt's project VERSION); the wheel's metadata reads the same line.
  m.attr("__version__") = linattn::kVersion;
}
