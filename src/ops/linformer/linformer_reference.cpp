// The Linformer oracle in fp64: k̃ = E k and ṽ = F v as plain sums over the visible keys, then the
// softmax oracle over the projected positions; the backward chains the softmax oracle's gradients
// through the same sums.
#include <vector>

#include "core/validate.hpp"
#include "linattn/linformer.hpp"
#include "ops/linformer/linformer_checks.hpp"

namespace linattn::reference {
namespace {

// The projection of head h: [P, N_max] row-major.
const double* head_projection(const std::vector<double>& E, const LinformerOptions& o, int64_t h) {
  return E.data() + (o.share_heads ? 0 : h) * o.projected_length * o.max_length;
}

// x̃: [B, P, H, D] = E_h x over keys j < key_length(b).
Tensor project(const Tensor& x, const std::vector<double>& E, const LinformerOptions& o) {
  const auto [B, N, H, D] = x.extent;
  const int64_t P = o.projected_length;
  Tensor out({B, P, H, D});
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const double* e = head_projection(E, o, h);
      for (int64_t r = 0; r < P; ++r)
        for (int64_t j = 0; j < detail::key_length(o.key_lengths, b, N); ++j)
          for (int64_t d = 0; d < D; ++d) out(b, r, h, d) += e[r * o.max_length + j] * x(b, j, h, d);
    }
  return out;
}

// dx = E_hᵀ dx̃ over keys j < key_length(b), and dE_h += dx̃ xᵀ; the backward of project.
void project_backward(Tensor& dx, std::vector<double>& dE, const Tensor& dxp, const Tensor& x,
                      const std::vector<double>& E, const LinformerOptions& o) {
  const auto [B, N, H, D] = x.extent;
  const int64_t P = o.projected_length;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const double* e = head_projection(E, o, h);
      double* de = dE.data() + (head_projection(E, o, h) - E.data());
      for (int64_t r = 0; r < P; ++r)
        for (int64_t j = 0; j < detail::key_length(o.key_lengths, b, N); ++j)
          for (int64_t d = 0; d < D; ++d) {
            dx(b, j, h, d) += e[r * o.max_length + j] * dxp(b, r, h, d);
            de[r * o.max_length + j] += dxp(b, r, h, d) * x(b, j, h, d);
          }
    }
}

// Softmax over the P projected positions; a batch with no visible key sees none of them.
struct ProjectedSoftmax {
  std::vector<int64_t> lengths;
  SoftmaxAttentionOptions options;
  ProjectedSoftmax(const LinformerOptions& o, int64_t batch) {
    options.scale = o.scale;
    if (o.key_lengths.empty()) return;
    for (int64_t b = 0; b < batch; ++b) lengths.push_back(o.key_lengths[b] > 0 ? o.projected_length : 0);
    options.key_lengths = lengths;
  }
};

// The driver's checks, on the tensors' shapes.
void check_arguments(const char* op, const Tensor& q, const Tensor& k, const Tensor& v, const std::vector<double>& E,
                     const std::vector<double>& F, const LinformerOptions& options) {
  const ConstTensorView qs = detail::shape_only(op, "q", q.extent, q.data.size());
  const ConstTensorView ks = detail::shape_only(op, "k", k.extent, k.data.size());
  const ConstTensorView vs = detail::shape_only(op, "v", v.extent, v.data.size());
  detail::check_linformer_arguments(op, qs, ks, vs, E.size(), F.size(), options);
}

}  // namespace

Tensor linformer_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const std::vector<double>& E,
                                   const std::vector<double>& F, const LinformerOptions& options,
                                   std::vector<double>* lse) {
  const char* op = "reference::linformer_attention_forward";
  check_arguments(op, q, k, v, E, F, options);
  using detail::object_region;
  detail::check_outputs(op, {object_region("lse", lse)},
                        {object_region("q", &q.data), object_region("k", &k.data), object_region("v", &v.data),
                         object_region("E", &E), object_region("F", &F)});
  const std::vector<double>& Fv = options.share_key_value ? E : F;
  const ProjectedSoftmax softmax(options, q.extent[0]);
  return softmax_attention_forward(q, project(k, E, options), project(v, Fv, options), softmax.options, lse);
}

LinformerGradients linformer_attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                                                const std::vector<double>& E, const std::vector<double>& F,
                                                const LinformerOptions& options) {
  const char* op = "reference::linformer_attention_backward";
  check_arguments(op, q, k, v, E, F, options);
  detail::check_output_shape(op, "dout", detail::shape_only(op, "dout", dout.extent, dout.data.size()),
                             detail::shape_only(q.extent), detail::shape_only(v.extent));
  const bool shared = options.share_key_value;
  const std::vector<double>& Fv = shared ? E : F;
  const ProjectedSoftmax softmax(options, q.extent[0]);
  const Gradients g =
      softmax_attention_backward(dout, q, project(k, E, options), project(v, Fv, options), softmax.options);
  LinformerGradients out{g.dq, Tensor(k.extent), Tensor(v.extent), std::vector<double>(E.size(), 0.0),
                         std::vector<double>(shared ? 0 : F.size(), 0.0)};
  project_backward(out.dk, out.dE, g.dk, k, E, options);
  project_backward(out.dv, shared ? out.dE : out.dF, g.dv, v, Fv, options);
  return out;
}

}  // namespace linattn::reference
