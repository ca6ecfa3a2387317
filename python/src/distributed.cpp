// The _distributed extension module (built with LINATTN_MPI): linattn_mpi's sequence-parallel
// operators on float32 numpy shards, for linattn/distributed.py. A communicator arrives as its
// Fortran handle (mpi4py's Comm.py2f()), which MPI_Comm_f2c turns back into this process's MPI_Comm:
// the one portable conversion, needing neither mpi4py's headers nor its version's C API.
#include <mpi.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <optional>
#include <string>

#include "arrays.hpp"
#include "bindings.hpp"
#include "linattn/distributed/comm.hpp"
#include "linattn/distributed/scan.hpp"

namespace linattn::python {
namespace {

// comm: an mpi4py communicator's Fortran handle. MPI must be running (mpi4py initialises it on
// `from mpi4py import MPI`) and the handle must name a communicator.
MPI_Comm comm_arg(int64_t handle) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized)
    throw py::value_error(std::string("comm: MPI is ") + (finalized ? "finalized" : "not initialized") +
                          ", expected a running MPI (import mpi4py.MPI first)");
  const MPI_Comm comm = MPI_Comm_f2c(static_cast<MPI_Fint>(handle));
  if (comm == MPI_COMM_NULL) throw py::value_error("comm: MPI_COMM_NULL, expected a communicator");
  return comm;
}

struct Shard {
  InputView<float> q, k, v;
};

// q, k: [B, n_r, H, D], v: [B, n_r, H, E] of this rank; n_r may be 0 (the shapes are agreed with the
// other ranks by linattn_mpi, which names a rank whose shard disagrees).
Shard shard_args(const py::object& q, const py::object& k, const py::object& v) {
  return {input_view<float>(q, "q", 4, "[B, n, H, D]"), input_view<float>(k, "k", 4, "[B, n, H, D]"),
          input_view<float>(v, "v", 4, "[B, n, H, E]")};
}

std::array<int64_t, 4> out_shape(const Shard& s) {
  return {s.q.view.extent[0], s.q.view.extent[1], s.q.view.extent[2], s.v.view.extent[3]};
}

py::array linear_forward(int64_t comm, const py::object& q, const py::object& k, const py::object& v,
                         const std::string& feature_map, bool causal, float eps, std::optional<int64_t> n_features,
                         uint64_t seed) {
  const MPI_Comm c = comm_arg(comm);
  const Shard s = shard_args(q, k, v);
  const LinearAttentionOptions options =
      linear_options({}, s.q.view.extent[3], feature_map, causal, eps, n_features, seed);
  OutputArray<float> out = output_array<float>(out_shape(s));
  {
    py::gil_scoped_release nogil;
    distributed::linear_attention_forward(c, out.view, s.q.view, s.k.view, s.v.view, options);
  }
  return out.array;
}

py::tuple linear_backward(int64_t comm, const py::object& q, const py::object& k, const py::object& v,
                          const py::object& dout, const std::string& feature_map, bool causal, float eps,
                          std::optional<int64_t> n_features, uint64_t seed) {
  const MPI_Comm c = comm_arg(comm);
  const Shard s = shard_args(q, k, v);
  const InputView<float> d = input_view<float>(dout, "dout", 4, "[B, n, H, E]");
  const LinearAttentionOptions options =
      linear_options({}, s.q.view.extent[3], feature_map, causal, eps, n_features, seed);
  OutputArray<float> dq = output_array<float>(s.q.view.extent), dk = output_array<float>(s.k.view.extent),
                     dv = output_array<float>(s.v.view.extent);
  {
    py::gil_scoped_release nogil;
    distributed::linear_attention_backward(c, dq.view, dk.view, dv.view, d.view, s.q.view, s.k.view, s.v.view,
                                           options);
  }
  return py::make_tuple(dq.array, dk.array, dv.array);
}

py::dict comm_stats() {
  const distributed::CommStats s = distributed::comm_stats();
  py::dict d;
  d["bytes_sent"] = s.bytes_sent;
  d["calls"] = s.calls;
  d["comm_seconds"] = s.comm_seconds;
  d["compute_seconds"] = s.compute_seconds;
  return d;
}

}  // namespace
}  // namespace linattn::python

PYBIND11_MODULE(_distributed, m) {
  namespace py = pybind11;
  using namespace linattn::python;
  using py::arg;
  m.doc() = "linattn_mpi's sequence-parallel operators on float32 numpy shards (use linattn.distributed).";
  // linattn::Error (std::invalid_argument) becomes ValueError; MpiError (std::runtime_error) RuntimeError.
  m.def("linear_attention", &linear_forward, arg("comm"), arg("q"), arg("k"), arg("v"), py::kw_only(),
        arg("feature_map") = "elu", arg("causal") = false, arg("eps") = 1e-6f, arg("n_features") = py::none(),
        arg("seed") = 0, "This rank's out [B, n, H, E] of linear attention over the shards of comm (a Fortran handle).");
  m.def("linear_attention_backward", &linear_backward, arg("comm"), arg("q"), arg("k"), arg("v"), arg("dout"),
        py::kw_only(), arg("feature_map") = "elu", arg("causal") = false, arg("eps") = 1e-6f,
        arg("n_features") = py::none(), arg("seed") = 0, "This rank's (dq, dk, dv) of linear_attention.");
  m.def("comm_stats", &comm_stats, "This process's CommStats (bytes_sent, calls, comm_seconds, compute_seconds).");
  m.def("reset_comm_stats", &linattn::distributed::reset_comm_stats);
}
