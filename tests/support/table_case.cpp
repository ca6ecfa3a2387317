#include "support/table_case.hpp"

namespace linattn::testing {
namespace {

Layout layout_of(table::Storage storage) {
  switch (storage) {
    case table::Storage::bnhd:
      return Layout::bnhd;
    case table::Storage::bhnd:
      return Layout::bhnd;
    case table::Storage::padded:
      return Layout::padded;
  }
  return Layout::bnhd;
}

std::vector<double> widen(const std::vector<float>& x) { return {x.begin(), x.end()}; }

// The log decays of a gate tensor: logsigmoid(N(0, 1)) / 16 at every addressed element.
void fill_log_decays(TensorView view, std::mt19937_64& rng) {
  std::normal_distribution<double> normal;
  for (int64_t b = 0; b < view.extent[0]; ++b)
    for (int64_t n = 0; n < view.extent[1]; ++n)
      for (int64_t h = 0; h < view.extent[2]; ++h)
        for (int64_t d = 0; d < view.extent[3]; ++d) view(b, n, h, d) = table::log_decay_of_normal(normal(rng));
}

}  // namespace

table::Operands TableRun::operands() {
  table::Operands a;
  a.q = q.view, a.k = k.view, a.v = v.view, a.dout = dout.view;
  a.out = out.view, a.dq = dq.view, a.dk = dk.view, a.dv = dv.view;
  a.lse = lse, a.E = E, a.F = F, a.dE = dE, a.dF = dF;
  a.g = g.view, a.dg = dg.view;
  a.state = state.get();
  return a;
}

table::OracleInputs TableRun::oracle_inputs() const {
  return {reference::to_double(q.view),
          reference::to_double(k.view),
          reference::to_double(v.view),
          reference::to_double(dout.view),
          widen(E),
          widen(F),
          g.storage.empty() ? reference::Tensor() : reference::to_double(g.view)};
}

std::unique_ptr<TableRun> make_run(const table::Operator& op, const table::TestCase& c, std::mt19937_64& rng) {
  auto run = std::make_unique<TableRun>();
  table::Sizes& s = run->sizes;
  s = c.sizes;
  if (c.ragged) {
    run->lengths = table::ragged_key_lengths(s);
    s.key_lengths = run->lengths;
  }
  if (c.packed) {
    run->boundaries = table::packed_boundaries(s);
    s.cu_seqlens = run->boundaries;
  }
  const Layout layout = layout_of(c.storage);
  const int64_t B = s.batch, H = s.heads, D = s.dim, E = s.value_dim;
  run->q = random_tensor({B, s.seq_q, H, D}, layout, rng);
  run->k = random_tensor({B, s.seq_k, H, D}, layout, rng);
  run->v = random_tensor({B, s.seq_k, H, E}, layout, rng);
  run->dout = random_tensor({B, s.seq_q, H, E}, layout, rng);
  run->out = make_tensor({B, s.seq_q, H, E}, layout);
  run->dq = make_tensor(run->q.extent(), layout);
  run->dk = make_tensor(run->k.extent(), layout);
  run->dv = make_tensor(run->v.extent(), layout);
  if (const int64_t G = op.gate_dim(s); G > 0) {
    run->g = make_tensor({B, s.seq_q, H, G}, layout);
    fill_log_decays(run->g.view, rng);
    run->dg = make_tensor(run->g.extent(), layout);
  }
  if (op.has_lse) run->lse.assign(size_t(B * H * s.seq_q), 0.0f);
  if (op.has_projections) {
    std::uniform_real_distribution<float> dist(-0.2f, 0.2f);
    for (auto* projection : {&run->E, &run->F}) {
      projection->resize(size_t(table::projection_floats(s)));
      for (float& x : *projection) x = dist(rng);
    }
    run->dE.assign(run->E.size(), 0.0f);
    run->dF.assign(run->F.size(), 0.0f);
  }
  run->options = op.options(s);
  if (op.carries_state)
    run->state = std::make_unique<RecurrentState>(B, H, op.feature_dim(s), E, run->options.linear.feature_map->name());
  return run;
}

std::string describe(const table::TestCase& c, const TableRun& run) {
  const table::Sizes& s = run.sizes;
  std::string d = "B=" + std::to_string(s.batch) + " Nq=" + std::to_string(s.seq_q) + " Nk=" + std::to_string(s.seq_k) +
                  " H=" + std::to_string(s.heads) + " D=" + std::to_string(s.dim) +
                  " E=" + std::to_string(s.value_dim) + " " + layout_name(layout_of(c.storage)) +
                  " map=" + std::string(s.map) + (s.causal ? " causal" : "") + " chunk=" + std::to_string(s.chunk) +
                  " key_lengths=";
  for (int64_t l : run.lengths) d += std::to_string(l) + ",";
  if (!run.boundaries.empty()) {
    d += " cu_seqlens=";
    for (int64_t l : run.boundaries) d += std::to_string(l) + ",";
  }
  return d;
}

}  // namespace linattn::testing
