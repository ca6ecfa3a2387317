// The _distributed extension module (built with LINATTN_MPI): linattn_mpi's sequence-parallel
// operators on float32 numpy shards, for linattn/distributed.py. A communicator arrives as its
// Fortran handle (mpi4py's Comm.py2f()), which MPI_Comm_f2c turns back into this process's MPI_Comm:
// the one portable conversion, needing neither mpi4py's headers nor its version's C API.
#include <mpi.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "arrays.hpp"
#include "bindings.hpp"
#include "family_args.hpp"
#include "linattn/decay.hpp"
#include "linattn/delta.hpp"
#include "linattn/distributed/comm.hpp"
#include "linattn/distributed/ring.hpp"
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

// Runs convert(), this rank's conversion of its Python arguments. A failure there (a float64 or 3-d q,
// a scale that is no number) joins `operation`'s agreement as this rank's failed checks, so that
// every rank raises ValueError naming this one: raising here alone would leave the other ranks
// waiting in their agreement for a rank that never comes.
template <class F>
auto converted(MPI_Comm comm, const char* operation, F&& convert) -> decltype(convert()) {
  try {
    return convert();
  } catch (const std::exception& e) {
    const std::string message = e.what();
    py::gil_scoped_release nogil;
    distributed::fail_collective(comm, operation, message);
  }
}

// Python's own conversions (int(), float(), bool(), str()), named: the arguments arrive as objects so
// that pybind11 refuses none of them before converted() runs. convert(x) is the conversion; any failure
// becomes a TypeError naming the argument, what it expects and what it got.
template <class Convert>
auto python_arg(const py::object& x, const char* name, const char* expected, Convert convert) -> decltype(convert(x)) {
  try {
    return convert(x);
  } catch (const std::exception&) {
    throw py::type_error(std::string(name) + ": expected " + expected + ", got " + type_name(x) + " " +
                         py::repr(x).cast<std::string>());
  }
}
int64_t int_arg(const py::object& x, const char* name) {
  return python_arg(x, name, "an integer", [](const py::object& o) { return py::int_(o).cast<int64_t>(); });
}
uint64_t seed_arg(const py::object& x) {
  return python_arg(x, "seed", "an integer in [0, 2^64)",
                    [](const py::object& o) { return py::int_(o).cast<uint64_t>(); });
}
float float_arg(const py::object& x, const char* name) {
  return python_arg(x, name, "a number", [](const py::object& o) { return py::float_(o).cast<float>(); });
}
std::string string_arg(const py::object& x, const char* name) {
  return python_arg(x, name, "a string", [](const py::object& o) {
    if (!py::isinstance<py::str>(o)) throw py::type_error("not a str");
    return o.cast<std::string>();
  });
}
bool bool_arg(const py::object& x) { return py::bool_(x); }
std::optional<float> optional_float_arg(const py::object& x, const char* name) {
  if (x.is_none()) return std::nullopt;
  return float_arg(x, name);
}
std::optional<int64_t> optional_int_arg(const py::object& x, const char* name) {
  if (x.is_none()) return std::nullopt;
  return int_arg(x, name);
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

// o [B, n, HV, E]: v's heads (q's, but for the recurrences' grouped value heads, HV a multiple of q's H).
std::array<int64_t, 4> out_shape(const Shard& s) {
  return {s.q.view.extent[0], s.q.view.extent[1], s.v.view.extent[2], s.v.view.extent[3]};
}

// Linear attention's options, from linattn.distributed's keywords.
LinearAttentionOptions linear_args(const Shard& s, const py::object& feature_map, const py::object& causal,
                                   const py::object& eps, const py::object& n_features, const py::object& seed) {
  return linear_options({}, s.q.view.extent[3], string_arg(feature_map, "feature_map"), bool_arg(causal),
                        float_arg(eps, "eps"), optional_int_arg(n_features, "n_features"), seed_arg(seed));
}

py::array linear_forward(int64_t comm, const py::object& q, const py::object& k, const py::object& v,
                         const py::object& feature_map, const py::object& causal, const py::object& eps,
                         const py::object& n_features, const py::object& seed) {
  const MPI_Comm c = comm_arg(comm);
  const char* op = "linear_attention_forward";
  auto [s, options, out] = converted(c, op, [&] {
    Shard shard = shard_args(q, k, v);
    LinearAttentionOptions opts = linear_args(shard, feature_map, causal, eps, n_features, seed);
    OutputArray<float> result = output_array<float>(out_shape(shard));
    return std::tuple{std::move(shard), opts, std::move(result)};
  });
  {
    py::gil_scoped_release nogil;
    distributed::linear_attention_forward(c, out.view, s.q.view, s.k.view, s.v.view, options);
  }
  return out.array;
}

py::tuple linear_backward(int64_t comm, const py::object& q, const py::object& k, const py::object& v,
                          const py::object& dout, const py::object& feature_map, const py::object& causal,
                          const py::object& eps, const py::object& n_features, const py::object& seed) {
  const MPI_Comm c = comm_arg(comm);
  const char* op = "linear_attention_backward";
  auto [s, d, options] = converted(c, op, [&] {
    Shard shard = shard_args(q, k, v);
    InputView<float> dout_view = input_view<float>(dout, "dout", 4, "[B, n, H, E]");
    LinearAttentionOptions opts = linear_args(shard, feature_map, causal, eps, n_features, seed);
    return std::tuple{std::move(shard), std::move(dout_view), opts};
  });
  OutputArray<float> dq = output_array<float>(s.q.view.extent), dk = output_array<float>(s.k.view.extent),
                     dv = output_array<float>(s.v.view.extent);
  {
    py::gil_scoped_release nogil;
    distributed::linear_attention_backward(c, dq.view, dk.view, dv.view, d.view, s.q.view, s.k.view, s.v.view, options);
  }
  return py::make_tuple(dq.array, dk.array, dv.array);
}

Decay decay_arg(const py::object& name_object) {
  const std::string name = string_arg(name_object, "decay");
  for (Decay d : {Decay::none, Decay::retention, Decay::head, Decay::token, Decay::key})
    if (decay_name(d) == name) return d;
  throw py::value_error("decay: expected \"linear\", \"retention\", \"lightning\", \"simple_gla\" or \"gla\", got \"" +
                        name + "\"");
}

DeltaGate gate_arg(const py::object& name_object) {
  const std::string name = string_arg(name_object, "gate");
  for (DeltaGate g : {DeltaGate::none, DeltaGate::token, DeltaGate::key})
    if (delta_name(g) == name) return g;
  throw py::value_error("gate: expected \"delta_rule\", \"gated_delta_rule\" or \"kda\", got \"" + name + "\"");
}

constexpr const char* kGate = "[B, n, H] or [B, n, H, 1] (per token), [B, n, H, K] (per key)";

// The decayed family's options of one call and the vector g_gamma's span points into (kept on the
// heap, so that the span survives the struct's moves).
struct DecayArgs {
  std::unique_ptr<std::vector<float>> g_gamma;
  DecayedAttentionOptions options;
};
DecayArgs decay_args(const py::object& decay, const py::object& g_gamma, const py::object& scale,
                     const py::object& chunk_size) {
  DecayArgs a{std::make_unique<std::vector<float>>(vector_arg<float>(g_gamma, "g_gamma", "[H]")), {}};
  a.options.decay = decay_arg(decay);
  a.options.g_gamma = *a.g_gamma;
  a.options.scale = optional_float_arg(scale, "scale");
  a.options.chunk_size = int_arg(chunk_size, "chunk_size");
  return a;
}

DeltaRuleOptions delta_options(const py::object& gate, const py::object& scale, const py::object& qk_l2norm,
                               const py::object& chunk_size) {
  DeltaRuleOptions o;
  o.gate = gate_arg(gate);
  o.scale = optional_float_arg(scale, "scale");
  o.qk_l2norm = bool_arg(qk_l2norm);
  o.chunk_size = int_arg(chunk_size, "chunk_size");
  return o;
}

py::array decayed_forward(int64_t comm, const py::object& q, const py::object& k, const py::object& v,
                          const py::object& g, const py::object& decay, const py::object& g_gamma,
                          const py::object& scale, const py::object& chunk_size) {
  const MPI_Comm c = comm_arg(comm);
  auto [s, gate, a, out] = converted(c, "decayed_attention_forward", [&] {
    Shard shard = shard_args(q, k, v);
    TrailingView<float> gate_view = trailing_arg<float>(g, "g", kGate);
    DecayArgs args = decay_args(decay, g_gamma, scale, chunk_size);
    OutputArray<float> result = output_array<float>(out_shape(shard));
    return std::tuple{std::move(shard), std::move(gate_view), std::move(args), std::move(result)};
  });
  {
    py::gil_scoped_release nogil;
    distributed::decayed_attention_forward(c, out.view, s.q.view, s.k.view, s.v.view, gate.in.view, a.options);
  }
  return out.array;
}

// (dq, dk, dv, dg): dg in g's shape, None without g.
py::tuple decayed_backward(int64_t comm, const py::object& q, const py::object& k, const py::object& v,
                           const py::object& g, const py::object& dout, const py::object& decay,
                           const py::object& g_gamma, const py::object& scale, const py::object& chunk_size) {
  const MPI_Comm c = comm_arg(comm);
  auto [s, gate, d, a] = converted(c, "decayed_attention_backward", [&] {
    Shard shard = shard_args(q, k, v);
    TrailingView<float> gate_view = trailing_arg<float>(g, "g", kGate);
    InputView<float> dout_view = input_view<float>(dout, "dout", 4, "[B, n, H, V]");
    DecayArgs args = decay_args(decay, g_gamma, scale, chunk_size);
    return std::tuple{std::move(shard), std::move(gate_view), std::move(dout_view), std::move(args)};
  });
  OutputArray<float> dq = output_array<float>(s.q.view.extent), dk = output_array<float>(s.k.view.extent),
                     dv = output_array<float>(s.v.view.extent), dg;
  if (gate.given) dg = output_array<float>(gate.in.view.extent);
  {
    py::gil_scoped_release nogil;
    distributed::decayed_attention_backward(c, dq.view, dk.view, dv.view, dg.view, d.view, s.q.view, s.k.view, s.v.view,
                                            gate.in.view, a.options);
  }
  return py::make_tuple(dq.array, dk.array, dv.array, trailing_result(dg.array, gate));
}

// beta of the delta rule: [B, n, H] or [B, n, H, 1], never None.
TrailingView<float> beta_arg(const py::object& beta) {
  if (beta.is_none()) throw py::type_error("beta: expected a float32 array [B, n, H], got None");
  return trailing_arg<float>(beta, "beta", "[B, n, H] or [B, n, H, 1]");
}

py::array delta_forward(int64_t comm, const py::object& q, const py::object& k, const py::object& v,
                        const py::object& beta, const py::object& g, const py::object& gate_name,
                        const py::object& scale, const py::object& use_qk_l2norm, const py::object& chunk_size) {
  const MPI_Comm c = comm_arg(comm);
  auto [s, b, gate, options, out] = converted(c, "delta_rule_forward", [&] {
    Shard shard = shard_args(q, k, v);
    TrailingView<float> beta_view = beta_arg(beta);
    TrailingView<float> gate_view = trailing_arg<float>(g, "g", kGate);
    DeltaRuleOptions opts = delta_options(gate_name, scale, use_qk_l2norm, chunk_size);
    OutputArray<float> result = output_array<float>(out_shape(shard));
    return std::tuple{std::move(shard), std::move(beta_view), std::move(gate_view), opts, std::move(result)};
  });
  {
    py::gil_scoped_release nogil;
    distributed::delta_rule_forward(c, out.view, s.q.view, s.k.view, s.v.view, b.in.view, gate.in.view, options);
  }
  return out.array;
}

// (dq, dk, dv, dbeta, dg): dbeta and dg in their tensors' shapes, dg None without g.
py::tuple delta_backward(int64_t comm, const py::object& q, const py::object& k, const py::object& v,
                         const py::object& beta, const py::object& g, const py::object& dout,
                         const py::object& gate_name, const py::object& scale, const py::object& use_qk_l2norm,
                         const py::object& chunk_size) {
  const MPI_Comm c = comm_arg(comm);
  auto [s, b, gate, d, options] = converted(c, "delta_rule_backward", [&] {
    Shard shard = shard_args(q, k, v);
    TrailingView<float> beta_view = beta_arg(beta);
    TrailingView<float> gate_view = trailing_arg<float>(g, "g", kGate);
    InputView<float> dout_view = input_view<float>(dout, "dout", 4, "[B, n, H, V]");
    DeltaRuleOptions opts = delta_options(gate_name, scale, use_qk_l2norm, chunk_size);
    return std::tuple{std::move(shard), std::move(beta_view), std::move(gate_view), std::move(dout_view), opts};
  });
  OutputArray<float> dq = output_array<float>(s.q.view.extent), dk = output_array<float>(s.k.view.extent),
                     dv = output_array<float>(s.v.view.extent), dbeta = output_array<float>(b.in.view.extent), dg;
  if (gate.given) dg = output_array<float>(gate.in.view.extent);
  {
    py::gil_scoped_release nogil;
    distributed::delta_rule_backward(c, dq.view, dk.view, dv.view, dbeta.view, dg.view, d.view, s.q.view, s.k.view,
                                     s.v.view, b.in.view, gate.in.view, options);
  }
  return py::make_tuple(dq.array, dk.array, dv.array, trailing_result(dbeta.array, b), trailing_result(dg.array, gate));
}

// Ring attention's options; layout "contiguous" or "balanced" (docs/ring-attention.md). key_lengths
// keeps the span's memory (on the heap, so that the span survives the struct's moves).
struct RingArgs {
  std::unique_ptr<std::vector<int64_t>> key_lengths;
  distributed::RingAttentionOptions options;
};
RingArgs ring_args(const py::object& scale, const py::object& causal, const py::object& layout_object,
                   const py::object& early_length, const py::object& key_lengths) {
  RingArgs a;
  a.key_lengths = std::make_unique<std::vector<int64_t>>(key_lengths_arg(key_lengths));
  a.options.scale = optional_float_arg(scale, "scale");
  a.options.causal = bool_arg(causal);
  a.options.early_length = int_arg(early_length, "early_length");
  a.options.key_lengths = *a.key_lengths;
  const std::string layout = string_arg(layout_object, "layout");
  if (layout == "contiguous")
    a.options.layout = distributed::RingLayout::contiguous;
  else if (layout == "balanced")
    a.options.layout = distributed::RingLayout::balanced;
  else
    throw py::value_error("layout: expected \"contiguous\" or \"balanced\", got \"" + layout + "\"");
  return a;
}

// lse [B, H, n] of this rank's shard.
py::array_t<float> lse_array(const Shard& s) {
  return py::array_t<float>(std::vector<py::ssize_t>{s.q.view.extent[0], s.q.view.extent[2], s.q.view.extent[1]});
}

py::tuple ring_forward(int64_t comm, const py::object& q, const py::object& k, const py::object& v,
                       const py::object& scale, const py::object& causal, const py::object& layout,
                       const py::object& early_length, const py::object& key_lengths) {
  const MPI_Comm c = comm_arg(comm);
  auto [s, a, out, lse] = converted(c, "ring_attention_forward", [&] {
    Shard shard = shard_args(q, k, v);
    RingArgs args = ring_args(scale, causal, layout, early_length, key_lengths);
    OutputArray<float> result = output_array<float>(out_shape(shard));
    py::array_t<float> lse_out = lse_array(shard);
    return std::tuple{std::move(shard), std::move(args), std::move(result), std::move(lse_out)};
  });
  const std::span<float> lse_span(lse.mutable_data(), size_t(lse.size()));
  {
    py::gil_scoped_release nogil;
    distributed::ring_attention_forward(c, out.view, lse_span, s.q.view, s.k.view, s.v.view, a.options);
  }
  return py::make_tuple(out.array, lse);
}

py::tuple ring_backward(int64_t comm, const py::object& q, const py::object& k, const py::object& v,
                        const py::object& out, const py::object& lse, const py::object& dout, const py::object& scale,
                        const py::object& causal, const py::object& layout, const py::object& early_length,
                        const py::object& key_lengths) {
  const MPI_Comm c = comm_arg(comm);
  auto [s, a, saved, d] = converted(c, "ring_attention_backward", [&] {
    Shard shard = shard_args(q, k, v);
    RingArgs args = ring_args(scale, causal, layout, early_length, key_lengths);
    SavedInputs saved_in = saved_inputs(out, lse);
    InputView<float> dout_view = input_view<float>(dout, "dout", 4, "[B, n, H, E]");
    return std::tuple{std::move(shard), std::move(args), std::move(saved_in), std::move(dout_view)};
  });
  OutputArray<float> dq = output_array<float>(s.q.view.extent), dk = output_array<float>(s.k.view.extent),
                     dv = output_array<float>(s.v.view.extent);
  {
    py::gil_scoped_release nogil;
    distributed::ring_attention_backward(c, dq.view, dk.view, dv.view, d.view, s.q.view, s.k.view, s.v.view,
                                         saved.out.view, saved.lse_span(), a.options);
  }
  return py::make_tuple(dq.array, dk.array, dv.array);
}

py::tuple balanced_range(int64_t N, int rank, int ranks) {
  const distributed::BalancedRange r = distributed::balanced_range(N, rank, ranks);
  return py::make_tuple(r.early_begin, r.early_length, r.late_begin, r.late_length);
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
        arg("seed") = 0,
        "This rank's out [B, n, H, E] of linear attention over the shards of comm (a Fortran handle).");
  m.def("linear_attention_backward", &linear_backward, arg("comm"), arg("q"), arg("k"), arg("v"), arg("dout"),
        py::kw_only(), arg("feature_map") = "elu", arg("causal") = false, arg("eps") = 1e-6f,
        arg("n_features") = py::none(), arg("seed") = 0, "This rank's (dq, dk, dv) of linear_attention.");
  m.def("decayed_attention", &decayed_forward, arg("comm"), arg("q"), arg("k"), arg("v"), arg("g") = py::none(),
        py::kw_only(), arg("decay"), arg("g_gamma") = py::none(), arg("scale") = py::none(), arg("chunk_size") = 64,
        "This rank's o [B, n, H, V] of decayed attention (linattn.decayed_attention's decays) over comm's shards.");
  m.def("decayed_attention_backward", &decayed_backward, arg("comm"), arg("q"), arg("k"), arg("v"), arg("g"),
        arg("dout"), py::kw_only(), arg("decay"), arg("g_gamma") = py::none(), arg("scale") = py::none(),
        arg("chunk_size") = 64, "This rank's (dq, dk, dv, dg) of decayed_attention.");
  m.def("delta_rule", &delta_forward, arg("comm"), arg("q"), arg("k"), arg("v"), arg("beta"), arg("g") = py::none(),
        py::kw_only(), arg("gate") = "delta_rule", arg("scale") = py::none(), arg("use_qk_l2norm") = false,
        arg("chunk_size") = 64,
        "This rank's o [B, n, H, V] of the delta rule (gate: delta_rule, gated_delta_rule, kda).");
  m.def("delta_rule_backward", &delta_backward, arg("comm"), arg("q"), arg("k"), arg("v"), arg("beta"), arg("g"),
        arg("dout"), py::kw_only(), arg("gate") = "delta_rule", arg("scale") = py::none(), arg("use_qk_l2norm") = false,
        arg("chunk_size") = 64, "This rank's (dq, dk, dv, dbeta, dg) of delta_rule.");
  m.def("ring_attention", &ring_forward, arg("comm"), arg("q"), arg("k"), arg("v"), py::kw_only(),
        arg("scale") = py::none(), arg("causal") = false, arg("layout") = "contiguous", arg("early_length") = -1,
        arg("key_lengths") = py::none(),
        "This rank's (out [B, n, H, E], lse [B, H, n]) of exact softmax attention over comm's shards (the ring).");
  m.def("ring_attention_backward", &ring_backward, arg("comm"), arg("q"), arg("k"), arg("v"), arg("out"), arg("lse"),
        arg("dout"), py::kw_only(), arg("scale") = py::none(), arg("causal") = false, arg("layout") = "contiguous",
        arg("early_length") = -1, arg("key_lengths") = py::none(), "This rank's (dq, dk, dv) of ring_attention.");
  m.def("balanced_range", &balanced_range, arg("N"), arg("rank"), arg("ranks"),
        "(early_begin, early_length, late_begin, late_length): rank's two blocks of the balanced layout.");
  m.def("causal_shard_lengths", &linattn::distributed::causal_shard_lengths, arg("N"), arg("ranks"),
        arg("sums_per_pass") = linattn::distributed::kCausalSumsPerPass,
        arg("finish_per_pass") = linattn::distributed::kCausalFinishPerPass,
        "Shard lengths [ranks] adding up to N that even out the ranks' time in the causal linear forward "
        "(the last rank, which forms no sums, takes more).");
  m.def(
      "fail_collective",
      [](int64_t comm, const std::string& operation, const std::string& message) {
        const MPI_Comm c = comm_arg(comm);
        py::gil_scoped_release nogil;
        linattn::distributed::fail_collective(c, operation, message);
      },
      arg("comm"), arg("operation"), arg("message"),
      "For a rank whose own conversion of its arguments failed before `operation`: joins that call's agreement "
      "as a failed rank, so every rank raises ValueError naming this one. Always raises.");
  m.def("comm_stats", &comm_stats, "This process's CommStats (bytes_sent, calls, comm_seconds, compute_seconds).");
  m.def("reset_comm_stats", &linattn::distributed::reset_comm_stats);
}
