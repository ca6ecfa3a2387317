// linattn.RecurrentState: S [B, H, M, E] and z [B, H, M], stepped one token at a time, saved and loaded.
#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>

#include <cmath>
#include <filesystem>
#include <mutex>
#include <optional>
#include <string>

#include "arrays.hpp"
#include "bindings.hpp"
#include "linattn/boundary.hpp"
#include "linattn/half.hpp"
#include "linattn/linear_attention.hpp"
#include "linattn/recurrent_state.hpp"

namespace linattn::python {
namespace {

// The state with the map and eps its steps use. Steps run without the GIL, so a mutex keeps two
// Python threads from stepping (or loading) one state at once.
class State {
 public:
  State(int64_t batch, int64_t heads, int64_t dim, int64_t value_dim, const std::string& feature_map, float eps,
        std::optional<int64_t> n_features, uint64_t seed, const std::string& dtype)
      : dim_(dim) {
    if (dtype != "f32" && dtype != "bf16")
      throw py::value_error("dtype: expected \"f32\" or \"bf16\" (S's storage), got \"" + dtype + "\"");
    if (dim <= 0) throw py::value_error("dim: expected ≥ 1, got " + std::to_string(dim));
    // Refused here, not at the first step: a state that cannot step should not be built.
    if (!std::isfinite(eps) || eps < 0)
      throw py::value_error("eps: expected a finite value ≥ 0, got " + py::repr(py::float_(eps)).cast<std::string>());
    options_.feature_map = feature_map_arg(feature_map, dim, n_features, seed);
    options_.eps = eps;
    state_ = RecurrentState(batch, heads, options_.feature_map->feature_dim(dim), value_dim,
                            options_.feature_map->name(), dtype == "bf16" ? DType::bf16 : DType::f32);
  }

  // q, k: [B, H, D]; v: [B, H, E] -> [B, H, E].
  py::array step(const py::object& q, const py::object& k, const py::object& v) {
    const InputView<float> Q = input_view<float>(q, "q", 3, "[B, H, D]");
    const InputView<float> K = input_view<float>(k, "k", 3, "[B, H, D]");
    const InputView<float> V = input_view<float>(v, "v", 3, "[B, H, E]");
    boundary::check_attention_inputs("RecurrentState::step", Q.view, K.view, V.view);
    OutputArray<float> out = output_array<float>({Q.view.extent[0], 1, Q.view.extent[2], V.view.extent[3]}, false);
    {
      py::gil_scoped_release nogil;
      std::lock_guard lock(mutex_);
      recurrent_step(out.view, Q.view, K.view, V.view, state_, options_);
    }
    return out.array;
  }

  void save(const std::filesystem::path& path) {
    py::gil_scoped_release nogil;
    std::lock_guard lock(mutex_);
    state_.save(path);
  }

  // Replaces the contents with the file's; a file of another shape or map leaves them as they were.
  void load(const std::filesystem::path& path) {
    py::gil_scoped_release nogil;
    RecurrentState loaded = RecurrentState::load(path);
    std::lock_guard lock(mutex_);
    const int64_t seen[] = {loaded.batch(), loaded.heads(), loaded.feature_dim(), loaded.value_dim()};
    const int64_t want[] = {state_.batch(), state_.heads(), state_.feature_dim(), state_.value_dim()};
    const char* names[] = {"batch", "heads", "feature_dim", "value_dim"};
    const std::string file = path.string();
    for (int i = 0; i < 4; ++i)
      if (seen[i] != want[i])
        throw py::value_error(file + ": " + names[i] + " is " + std::to_string(seen[i]) + ", expected " +
                              std::to_string(want[i]) + " (this state's)");
    if (loaded.feature_map() != state_.feature_map())
      throw py::value_error(file + ": feature_map is \"" + loaded.feature_map() + "\", expected \"" +
                            state_.feature_map() + "\" (this state's)");
    state_ = std::move(loaded);
  }

  void reset() {
    std::lock_guard lock(mutex_);
    state_.reset();
  }

  // Copies: a view would dangle once load() replaces the buffers.
  py::array S() {
    std::lock_guard lock(mutex_);
    const std::vector<py::ssize_t> shape{state_.batch(), state_.heads(), state_.feature_dim(), state_.value_dim()};
    if (state_.dtype() == DType::bf16) {  // a loaded bf16 state (docs/half-precision.md): S widened
      py::array_t<float> a(shape);
      convert(std::span<float>(a.mutable_data(), size_t(a.size())), std::span<const bf16>(state_.S_bf16()));
      return a;
    }
    return copy(state_.S(), shape);
  }
  py::array z() {
    std::lock_guard lock(mutex_);
    return copy(state_.z(), {state_.batch(), state_.heads(), state_.feature_dim()});
  }

  const RecurrentState& state() const { return state_; }
  int64_t dim() const { return dim_; }
  float eps() const { return options_.eps; }

 private:
  static py::array copy(std::span<const float> data, std::vector<py::ssize_t> shape) {
    py::array_t<float> a(shape);
    std::copy(data.begin(), data.end(), a.mutable_data());
    return a;
  }

  int64_t dim_;
  LinearAttentionOptions options_;
  RecurrentState state_;
  std::mutex mutex_;
};

}  // namespace

void bind_state(py::module_& m) {
  using py::arg;
  py::class_<State>(m, "RecurrentState",
                    "Linear attention's state S [B, H, M, E] = Σ φ(k) vᵀ and z [B, H, M] = Σ φ(k), stepped one "
                    "token at a time. Stepping through a sequence equals linear_attention(..., causal=True).")
      .def(py::init<int64_t, int64_t, int64_t, int64_t, const std::string&, float, std::optional<int64_t>, uint64_t,
                    const std::string&>(),
           arg("batch"), arg("heads"), arg("dim"), arg("value_dim"), arg("feature_map") = "elu", py::kw_only(),
           arg("eps") = 1e-6f, arg("n_features") = py::none(), arg("seed") = 0, arg("dtype") = "f32")
      .def("step", &State::step, arg("q"), arg("k"), arg("v"),
           "Consumes one token: q, k [B, H, D], v [B, H, E] -> out [B, H, E] (the token sees itself).")
      .def("save", &State::save, arg("path"), "Writes the state file atomically (format: docs/state-format.md).")
      .def("load", &State::load, arg("path"),
           "Replaces the contents with the file's; ValueError for a corrupt file or another shape or map.")
      .def("reset", &State::reset, "Back to zero state at position 0.")
      .def_property_readonly("S", &State::S, "Copy of S [B, H, M, E].")
      .def_property_readonly("z", &State::z, "Copy of z [B, H, M].")
      .def_property_readonly("position", [](const State& s) { return s.state().position(); })
      .def_property_readonly("batch", [](const State& s) { return s.state().batch(); })
      .def_property_readonly("heads", [](const State& s) { return s.state().heads(); })
      .def_property_readonly("dim", &State::dim)
      .def_property_readonly("feature_dim", [](const State& s) { return s.state().feature_dim(); })
      .def_property_readonly("value_dim", [](const State& s) { return s.state().value_dim(); })
      .def_property_readonly("feature_map", [](const State& s) { return s.state().feature_map(); })
      .def_property_readonly("eps", &State::eps)
      .def_property_readonly("dtype", [](const State& s) { return std::string(dtype_name(s.state().dtype())); })
      .def("__repr__", [](const State& s) {
        const RecurrentState& r = s.state();
        return "RecurrentState(batch=" + std::to_string(r.batch()) + ", heads=" + std::to_string(r.heads()) +
               ", dim=" + std::to_string(s.dim()) + ", value_dim=" + std::to_string(r.value_dim()) +
               ", feature_map=\"" + r.feature_map() + "\", position=" + std::to_string(r.position()) + ")";
      });
}

}  // namespace linattn::python
