#include "common/workload.hpp"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <random>
#include <string>

#include "common/command.hpp"
#include "common/half_workload.hpp"
#include "linattn/decay.hpp"
#include "linattn/delta.hpp"
#include "linattn/linear_attention.hpp"
#include "linattn/random.hpp"
#include "linattn/recurrent_state.hpp"

namespace linattn::cli {

namespace {
// Indexed by Op: the names the flags use and the output prints, and the table's names.
constexpr const char* kOpNames[] = {"softmax",    "linear",           "causal",    "recurrent",  "performer",
                                    "linformer",  "retention",        "lightning", "simple_gla", "gla",
                                    "delta_rule", "gated_delta_rule", "kda",       "mamba2",     "rwkv7"};
constexpr const char* kTableNames[] = {"softmax",    "linear",           "causal",    "recurrent",  "favor",
                                       "linformer",  "retention",        "lightning", "simple_gla", "gla",
                                       "delta_rule", "gated_delta_rule", "kda",       "mamba2",     "rwkv7"};
}  // namespace

const char* op_name(Op op) { return kOpNames[int(op)]; }

const std::map<std::string, Op>& op_names() {
  static const std::map<std::string, Op> names = [] {
    std::map<std::string, Op> m;
    for (int i = 0; i < int(std::size(kOpNames)); ++i) m[kOpNames[i]] = m[kTableNames[i]] = Op(i);
    return m;
  }();
  return names;
}

const table::Operator& table_operator(Op op) { return table::find(kTableNames[int(op)]); }

bool has_backward(Op op) { return table_operator(op).has_backward; }
bool is_causal(Op op) { return table_operator(op).causality == table::Causality::always; }
bool is_decayed(Op op) { return op == Op::retention || op == Op::lightning || op == Op::simple_gla || op == Op::gla; }
bool is_delta(Op op) { return op == Op::delta_rule || op == Op::gated_delta_rule || op == Op::kda; }
bool is_recurrence(Op op) { return is_decayed(op) || is_delta(op) || op == Op::mamba2 || op == Op::rwkv7; }
bool has_half(Op op) { return op != Op::mamba2 && op != Op::rwkv7; }
void check_dtype(const Problem& p) {
  if (p.dtype != DType::f32 && !has_half(p.op))
    throw UsageError(std::string("--dtype ") + dtype_name(p.dtype) + ": --op " + op_name(p.op) +
                     " runs in f32 only (drop --dtype)");
}

table::Sizes sizes(const Problem& p) {
  table::Sizes s;
  s.batch = p.batch, s.heads = p.heads, s.seq_q = s.seq_k = p.seq, s.dim = p.dim, s.value_dim = p.value_dim;
  s.causal = p.causal;
  s.features = p.features;
  s.seed = p.seed;
  s.groups = p.groups;
  s.chunk = is_decayed(p.op) || p.op == Op::mamba2 ? DecayedAttentionOptions{}.chunk_size
            : is_delta(p.op)                       ? DeltaRuleOptions{}.chunk_size
                                                   : LinearAttentionOptions{}.chunk_size;
  s.projected = p.projected;
  return s;
}

int64_t feature_dim(const Problem& p) {
  const int64_t m = table_operator(p.op).feature_dim(sizes(p));
  return m > 0 ? m : p.dim;
}

int64_t projected_length(const Problem& p) { return table::projected_length(sizes(p)); }

double forward_flops(const Problem& p) { return table_operator(p.op).forward_flops(sizes(p)); }
double backward_flops(const Problem& p) { return table_operator(p.op).backward_flops(sizes(p)); }

double estimated_bytes(const Problem& p, bool backward) {
  const double b = double(p.batch), h = double(p.heads), n = double(p.seq), d = double(p.dim), e = double(p.value_dim);
  const double g = double(table_operator(p.op).gate_dim(sizes(p)));
  double floats = n * b * h * (2 * d + 2 * e + g);  // q, k, v, out, the gate
  if (backward) floats *= 2;                        // dout, dq, dk, dv, dg
  floats += table_operator(p.op).working_floats(sizes(p), backward);
  // The packed copies the kernels read: keys and values (in the backward also queries, dout and the
  // gradients) with each row padded to a multiple of 16 floats (kernels::kPad). At D = E = 1 they are
  // 32 floats a token where the tensors are 4: `bench --seq 10000000 --dim 1` estimated 267 MB and
  // used 1.45 GB before this term.
  const auto padded = [](double x) { return std::ceil(x / 16) * 16; };
  floats += n * b * h * (padded(d) + padded(e)) * (backward ? 3 : 1);
  return floats * 4 + 64.0 * (1 << 20);  // thread tiles, code and heap slack
}

struct Workload::Extra {
  RecurrentState state;
  std::vector<float> E, F, dE, dF;  // Linformer's projections [H, P, N] and their gradients
};

namespace {
std::vector<float> normal(int64_t count, std::mt19937_64& rng) {
  Random draws(rng());  // portable normals: std::normal_distribution differs between libraries
  std::vector<float> x(static_cast<size_t>(count));
  for (float& value : x) value = float(draws.normal());
  return x;
}
}  // namespace

Workload::Workload(const Problem& p)
    : p_(p), op_(table_operator(p.op)), options_(op_.options(sizes(p))), extra_(std::make_unique<Extra>()) {
  check_dtype(p);
  std::mt19937_64 rng(p.seed);
  const int64_t rows = p.batch * p.seq * p.heads;
  q_ = normal(rows * p.dim, rng);
  k_ = normal(rows * p.dim, rng);
  v_ = normal(rows * p.value_dim, rng);
  out_.assign(size_t(rows * p.value_dim), 0.0f);
  if (const int64_t G = op_.gate_dim(sizes(p)); G > 0) {
    Random draws(rng());
    g_.resize(size_t(rows * G));
    for (float& x : g_) x = table::log_decay_of_normal(draws.normal());
  }
  if (op_.has_lse) lse_.assign(size_t(p.batch * p.heads * p.seq), 0.0f);
  if (op_.has_projections) {
    // Untrained stand-ins for Linformer's learned E and F: row p averages the p-th of P equal
    // segments of the sequence (mean pooling), so that k̃ and ṽ summarise the keys and values.
    const int64_t P = projected_length(p);
    extra_->E.assign(size_t(p.heads * P * p.seq), 0.0f);
    for (int64_t h = 0; h < p.heads; ++h)
      for (int64_t r = 0; r < P; ++r) {
        const int64_t begin = r * p.seq / P, end = (r + 1) * p.seq / P;
        for (int64_t n = begin; n < end; ++n) extra_->E[size_t((h * P + r) * p.seq + n)] = 1.0f / float(end - begin);
      }
    extra_->F = extra_->E;
  }
  if (op_.carries_state)
    extra_->state = RecurrentState(p.batch, p.heads, feature_dim(p), p.value_dim, options_.linear.feature_map->name());
}

Workload::~Workload() = default;

std::span<const float> Workload::out() const {
  if (!half_) return out_;
  half_out_.resize(out_.size());
  half_->out_to(half_out_);
  return half_out_;
}

namespace {
// A [B, N, H, dim] view of one of the workload's buffers.
TensorView view(const Problem& p, std::vector<float>& x, int64_t dim) {
  return bnhd(x.data(), p.batch, p.seq, p.heads, dim);
}
}  // namespace

table::Operands Workload::operands() {
  const int64_t D = p_.dim, E = p_.value_dim;
  table::Operands a;
  a.q = view(p_, q_, D), a.k = view(p_, k_, D), a.v = view(p_, v_, E), a.out = view(p_, out_, E);
  a.lse = lse_;
  if (!g_.empty()) a.g = view(p_, g_, int64_t(g_.size()) / (p_.batch * p_.seq * p_.heads));
  a.E = extra_->E, a.F = extra_->F;
  a.state = &extra_->state;
  if (!dout_.empty()) {
    a.dout = view(p_, dout_, E);
    a.dq = view(p_, dq_, D), a.dk = view(p_, dk_, D), a.dv = view(p_, dv_, E);
    a.dE = extra_->dE, a.dF = extra_->dF;
    if (!dg_.empty()) a.dg = view(p_, dg_, int64_t(dg_.size()) / (p_.batch * p_.seq * p_.heads));
  }
  return a;
}

void Workload::forward() {
  if (op_.carries_state) extra_->state.reset();
  if (p_.dtype == DType::f32) return op_.forward(operands(), options_);
  if (!half_) half_ = std::make_unique<HalfOperands>(p_.dtype, operands(), options_);
  half_->forward(p_.op, options_);
}

void Workload::backward() {
  if (!op_.has_backward) throw UsageError(std::string("--op ") + op_name(p_.op) + " has no backward");
  if (dout_.empty()) {
    std::mt19937_64 rng(p_.seed + 1);
    dout_ = normal(p_.batch * p_.seq * p_.heads * p_.value_dim, rng);
    dq_.assign(q_.size(), 0.0f);
    dk_.assign(k_.size(), 0.0f);
    dv_.assign(v_.size(), 0.0f);
    dg_.assign(g_.size(), 0.0f);
    extra_->dE.assign(extra_->E.size(), 0.0f);
    extra_->dF.assign(extra_->F.size(), 0.0f);
  }
  if (p_.dtype == DType::f32) return op_.backward(operands(), options_);
  // The half copies are made again once dout exists (a forward-only run made them without it).
  if (!half_ || !half_->has_dout()) {
    half_ = std::make_unique<HalfOperands>(p_.dtype, operands(), options_);
    half_->forward(p_.op, options_);  // out and lse, which the softmax and Linformer backwards read
  }
  half_->backward(p_.op, options_);
}

}  // namespace linattn::cli
