#include "common/workload.hpp"

#include <algorithm>
#include <iterator>
#include <random>
#include <string>

#include "common/command.hpp"
#include "linattn/linear_attention.hpp"
#include "linattn/linformer.hpp"
#include "linattn/favor.hpp"
#include "linattn/recurrent_state.hpp"
#include "linattn/softmax_attention.hpp"

namespace linattn::cli {

namespace {
// Indexed by Op: the names the flags use.
constexpr const char* kOpNames[] = {"softmax", "linear", "causal", "recurrent", "performer", "linformer"};
}  // namespace

const char* op_name(Op op) { return kOpNames[int(op)]; }

const std::map<std::string, Op>& op_names() {
  static const std::map<std::string, Op> names = [] {
    std::map<std::string, Op> m;
    for (int i = 0; i < int(std::size(kOpNames)); ++i) m[kOpNames[i]] = Op(i);
    return m;
  }();
  return names;
}

bool has_backward(Op op) { return op != Op::recurrent; }
bool is_causal(Op op) { return op == Op::causal || op == Op::recurrent; }

namespace {

double pairs(const Problem& p) {  // (query, key) pairs softmax visits per (batch, head)
  const double n = double(p.seq);
  return p.causal ? n * (n + 1) / 2 : n * n;
}

}  // namespace

int64_t feature_dim(const Problem& p) {
  if (p.op != Op::performer) return p.dim;
  return p.features > 0 ? p.features : default_favor_features(p.dim);
}

int64_t projected_length(const Problem& p) { return p.projected > 0 ? p.projected : std::min<int64_t>(p.seq, 256); }

double forward_flops(const Problem& p) {
  const double bh = double(p.batch) * double(p.heads), n = double(p.seq), d = double(p.dim), e = double(p.value_dim);
  switch (p.op) {
    case Op::softmax:
      return bh * 2 * pairs(p) * (d + e);  // q kᵀ and p v
    case Op::linear:
    case Op::causal:
    case Op::recurrent:
      return bh * 4 * n * double(feature_dim(p)) * e;  // φ(k)vᵀ summed, φ(q)ᵀS
    case Op::performer: {
      const double m = double(feature_dim(p));
      return bh * (4 * n * d * m + 4 * n * m * e);  // ωᵀx for q and k, then linear attention
    }
    case Op::linformer: {
      const double k = double(projected_length(p));
      return bh * (2 * k * n * (d + e) + 2 * n * k * (d + e));  // E k, F v, then softmax over k keys
    }
  }
  return 0;
}

double backward_flops(const Problem& p) {
  const double bh = double(p.batch) * double(p.heads), n = double(p.seq), d = double(p.dim), e = double(p.value_dim);
  switch (p.op) {
    case Op::softmax:
      return bh * 2 * pairs(p) * (3 * d + 2 * e);  // recompute s; dv, dp, dq, dk
    case Op::linear:
    case Op::causal:
      return bh * 8 * n * double(feature_dim(p)) * e;
    case Op::recurrent:
      return 0;
    case Op::performer: {
      const double m = double(feature_dim(p));
      return bh * (4 * n * d * m + 8 * n * m * e);
    }
    case Op::linformer: {
      const double k = double(projected_length(p));
      return bh * (4 * k * n * (d + e) + 2 * n * k * (3 * d + 2 * e));
    }
  }
  return 0;
}

double estimated_bytes(const Problem& p, bool backward) {
  const double b = double(p.batch), h = double(p.heads), n = double(p.seq), d = double(p.dim), e = double(p.value_dim);
  double floats = n * b * h * (2 * d + 2 * e);  // q, k, v, out
  if (backward) floats *= 2;                    // dout, dq, dk, dv
  switch (p.op) {
    case Op::softmax:
      floats += b * h * n;
      break;  // lse
    case Op::linear:
    case Op::causal:
    case Op::recurrent:
    case Op::performer: {
      const double m = double(feature_dim(p));
      floats += b * h * m * (e + 1) * (backward ? 2 : 1);  // S, z (and their gradients)
      floats += b * n * h * m * (backward ? 4 : 2);        // φ(q), φ(k) (and dφ) if materialised
      if (p.op == Op::causal && backward) floats += b * h * (n / 64 + 1) * m * (e + 1);  // chunk states
      break;
    }
    case Op::linformer: {
      const double k = double(projected_length(p));
      floats += b * h * k * (d + e + 1) * (backward ? 2 : 1) + 2 * h * k * n * (backward ? 2 : 1);
      break;
    }
  }
  return floats * 4 + 64.0 * (1 << 20);  // thread tiles, code and heap slack
}

void recurrent_forward(TensorView out, ConstTensorView q, ConstTensorView k, ConstTensorView v, RecurrentState& state,
                       const LinearAttentionOptions& options) {
  const auto token = [](auto view, int64_t n) {  // [B, 1, H, ·]: row n of each tensor
    view.data += n * view.stride[1];
    view.extent[1] = 1;
    return view;
  };
  for (int64_t n = 0; n < q.extent[1]; ++n)
    recurrent_step(token(out, n), token(q, n), token(k, n), token(v, n), state, options);
}

struct Workload::Extra {
  RecurrentState state;
  std::vector<float> E, F, dE, dF;  // Linformer's projections [H, P, N] and their gradients
  LinformerOptions linformer;
};

namespace {
std::vector<float> normal(int64_t count, std::mt19937_64& rng) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(count));
  for (float& value : x) value = dist(rng);
  return x;
}
}  // namespace

Workload::Workload(const Problem& p) : p_(p), extra_(std::make_unique<Extra>()) {
  map_ =
      p.op == Op::performer ? favor_feature_map(p.dim, FavorOptions{feature_dim(p), p.seed, true}) : elu_feature_map();
  std::mt19937_64 rng(p.seed);
  const int64_t rows = p.batch * p.seq * p.heads;
  q_ = normal(rows * p.dim, rng);
  k_ = normal(rows * p.dim, rng);
  v_ = normal(rows * p.value_dim, rng);
  out_.assign(size_t(rows * p.value_dim), 0.0f);
  if (p.op == Op::softmax || p.op == Op::linformer) lse_.assign(size_t(p.batch * p.heads * p.seq), 0.0f);
  if (p.op == Op::linformer) {
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
    extra_->linformer.projected_length = P;
    extra_->linformer.max_length = p.seq;
  }
  if (p.op == Op::recurrent)
    extra_->state = RecurrentState(p.batch, p.heads, feature_dim(p), p.value_dim, map_->name());
}

Workload::~Workload() = default;

namespace {
// A [B, N, H, dim] view of one of the workload's buffers.
TensorView view(const Problem& p, std::vector<float>& x, int64_t dim) {
  return bnhd(x.data(), p.batch, p.seq, p.heads, dim);
}
}  // namespace

void Workload::forward() {
  const int64_t D = p_.dim, E = p_.value_dim;
  const ConstTensorView q = view(p_, q_, D), k = view(p_, k_, D), v = view(p_, v_, E);
  const TensorView out = view(p_, out_, E);
  LinearAttentionOptions linear;
  linear.feature_map = map_;
  SoftmaxAttentionOptions softmax;
  softmax.causal = p_.causal;
  switch (p_.op) {
    case Op::softmax:
      softmax_attention_forward(out, lse_, q, k, v, softmax);
      return;
    case Op::linear:
    case Op::performer:
      linear_attention_forward(out, q, k, v, linear);
      return;
    case Op::causal:
      causal_linear_attention_forward(out, q, k, v, linear);
      return;
    case Op::linformer:
      linformer_attention_forward(out, lse_, q, k, v, extra_->E, extra_->F, extra_->linformer);
      return;
    case Op::recurrent:
      extra_->state.reset();
      recurrent_forward(out, q, k, v, extra_->state, linear);
      return;
  }
}

void Workload::backward() {
  if (!has_backward(p_.op)) throw UsageError(std::string("--op ") + op_name(p_.op) + " has no backward");
  const int64_t D = p_.dim, E = p_.value_dim;
  if (dout_.empty()) {
    std::mt19937_64 rng(p_.seed + 1);
    dout_ = normal(p_.batch * p_.seq * p_.heads * E, rng);
    dq_.assign(q_.size(), 0.0f);
    dk_.assign(k_.size(), 0.0f);
    dv_.assign(v_.size(), 0.0f);
    extra_->dE.assign(extra_->E.size(), 0.0f);
    extra_->dF.assign(extra_->F.size(), 0.0f);
  }
  const ConstTensorView q = view(p_, q_, D), k = view(p_, k_, D), v = view(p_, v_, E), out = view(p_, out_, E),
                        dout = view(p_, dout_, E);
  const TensorView dq = view(p_, dq_, D), dk = view(p_, dk_, D), dv = view(p_, dv_, E);
  LinearAttentionOptions linear;
  linear.feature_map = map_;
  SoftmaxAttentionOptions softmax;
  softmax.causal = p_.causal;
  switch (p_.op) {
    case Op::softmax:
      softmax_attention_backward(dq, dk, dv, dout, q, k, v, out, lse_, softmax);
      return;
    case Op::linear:
    case Op::performer:
      linear_attention_backward(dq, dk, dv, dout, q, k, v, linear);
      return;
    case Op::causal:
      causal_linear_attention_backward(dq, dk, dv, dout, q, k, v, linear);
      return;
    case Op::linformer:
      linformer_attention_backward(dq, dk, dv, extra_->dE, extra_->dF, dout, q, k, v, extra_->E, extra_->F, out, lse_,
                                   extra_->linformer);
      return;
    case Op::recurrent:
      break;
  }
}

}  // namespace linattn::cli
