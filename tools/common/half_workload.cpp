// --dtype bf16|f16 (half_workload.hpp): the operands rounded once, then every call on half views.
#include "common/half_workload.hpp"

#include <vector>

#include "common/workload.hpp"
#include "linattn/half_attention.hpp"

namespace linattn::cli {
namespace {

// A half copy of an fp32 view (empty for an empty view), [B, N, H, D] contiguous.
template <class H>
struct Half {
  std::vector<H> data;
  View4<H> view;
  Half() = default;
  explicit Half(ConstTensorView x, bool copy = true) {
    if (!x.data) return;
    const auto [B, N, Hh, D] = x.extent;
    data.resize(size_t(B * N * Hh * D));
    view = bnhd(data.data(), B, N, Hh, D);
    if (!copy) return;
    std::vector<float> row(static_cast<size_t>(D));
    for (int64_t b = 0; b < B; ++b)
      for (int64_t n = 0; n < N; ++n)
        for (int64_t h = 0; h < Hh; ++h) {
          for (int64_t d = 0; d < D; ++d) row[size_t(d)] = x(b, n, h, d);
          convert(std::span<H>(view.row(b, n, h), size_t(D)), std::span<const float>(row));
        }
  }
  View4<const H> in() const { return view; }
};

template <class T>
View4<T> token(View4<T> x, int64_t n) {
  x.data += n * x.stride[1];
  x.extent[1] = 1;
  return x;
}

template <class H>
struct Typed {
  table::Operands fp32;
  Half<H> q, k, v, g, beta, out, dout, dq, dk, dv, dg, dbeta;
  Typed(const table::Operands& a, const table::Options& o)
      : fp32(a),
        q(a.q),
        k(a.k),
        v(a.v),
        g(a.g),
        out(a.out, false),
        dout(a.dout),
        dq(a.dq, false),
        dk(a.dk, false),
        dv(a.dv, false),
        dg(a.dg, false) {
    if (o.beta) {  // the delta rows' β [B, N, H, 1]
      const auto& e = a.q.extent;
      beta = Half<H>(bnhd(o.beta->data(), e[0], e[1], e[2], int64_t(1)));
      dbeta = Half<H>(bnhd(o.beta->data(), e[0], e[1], e[2], int64_t(1)), false);
    }
  }

  void forward(Op op, const table::Options& o) {
    const table::Operands& a = fp32;
    if (is_decayed(op)) return decayed_attention_forward(out.view, q.in(), k.in(), v.in(), g.in(), o.decayed);
    if (is_delta(op)) return delta_rule_forward(out.view, q.in(), k.in(), v.in(), beta.in(), g.in(), o.delta);
    switch (op) {
      case Op::softmax:
        return softmax_attention_forward(out.view, a.lse, q.in(), k.in(), v.in(), o.softmax);
      case Op::linear:
      case Op::favor:
        return linear_attention_forward(out.view, q.in(), k.in(), v.in(), o.linear);
      case Op::causal:
        return causal_linear_attention_forward(out.view, q.in(), k.in(), v.in(), o.linear);
      case Op::recurrent:
        for (int64_t n = 0; n < q.view.seq(); ++n)
          recurrent_step(token(out.view, n), token(q.in(), n), token(k.in(), n), token(v.in(), n), *a.state, o.linear);
        return;
      case Op::linformer:
        return linformer_attention_forward(out.view, a.lse, q.in(), k.in(), v.in(), a.E, a.F, o.linformer);
      default:
        break;
    }
  }

  void backward(Op op, const table::Options& o) {
    const table::Operands& a = fp32;
    if (is_decayed(op))
      return decayed_attention_backward(dq.view, dk.view, dv.view, dg.view, {}, dout.in(), {}, q.in(), k.in(), v.in(),
                                        g.in(), o.decayed);
    if (is_delta(op))
      return delta_rule_backward(dq.view, dk.view, dv.view, dbeta.view, dg.view, {}, dout.in(), {}, q.in(), k.in(),
                                 v.in(), beta.in(), g.in(), o.delta);
    switch (op) {
      case Op::softmax:
        return softmax_attention_backward(dq.view, dk.view, dv.view, dout.in(), q.in(), k.in(), v.in(), out.in(), a.lse,
                                          o.softmax);
      case Op::linear:
      case Op::favor:
        return linear_attention_backward(dq.view, dk.view, dv.view, dout.in(), q.in(), k.in(), v.in(), o.linear);
      case Op::causal:
        return causal_linear_attention_backward(dq.view, dk.view, dv.view, dout.in(), q.in(), k.in(), v.in(), o.linear);
      case Op::linformer:
        return linformer_attention_backward(dq.view, dk.view, dv.view, a.dE, a.dF, dout.in(), q.in(), k.in(), v.in(),
                                            a.E, a.F, out.in(), a.lse, o.linformer);
      default:
        break;
    }
  }
};

}  // namespace

struct HalfOperands::Buffers {
  DType dtype;
  std::unique_ptr<Typed<bf16>> b;
  std::unique_ptr<Typed<f16>> h;
};

HalfOperands::HalfOperands(DType dtype, const table::Operands& fp32, const table::Options& options)
    : b_(std::make_unique<Buffers>()) {
  b_->dtype = dtype;
  if (dtype == DType::bf16) b_->b = std::make_unique<Typed<bf16>>(fp32, options);
  if (dtype == DType::f16) b_->h = std::make_unique<Typed<f16>>(fp32, options);
}
HalfOperands::~HalfOperands() = default;

void HalfOperands::forward(Op op, const table::Options& options) {
  if (b_->b) b_->b->forward(op, options);
  if (b_->h) b_->h->forward(op, options);
}
void HalfOperands::backward(Op op, const table::Options& options) {
  if (b_->b) b_->b->backward(op, options);
  if (b_->h) b_->h->backward(op, options);
}
bool HalfOperands::has_dout() const { return b_->b ? !b_->b->dout.data.empty() : !b_->h->dout.data.empty(); }
void HalfOperands::out_to(std::span<float> out) const {
  if (b_->b) convert(out, std::span<const bf16>(b_->b->out.data));
  if (b_->h) convert(out, std::span<const f16>(b_->h->out.data));
}

}  // namespace linattn::cli
