// linattn run: Q, K, V (and optionally dO, and Linformer's E, F) from .npy files through one operator,
// or through the fp64 oracle with --reference; writes the output (and dq, dk, dv, dE, dF) as .npy, each
// file atomically.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <cfloat>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/command.hpp"
#include "common/flags.hpp"
#include "common/memory.hpp"
#include "common/tensor_files.hpp"
#include "common/workload.hpp"
#include "linattn/error.hpp"
#include "linattn/favor.hpp"
#include "linattn/file_io.hpp"
#include "linattn/half_attention.hpp"
#include "linattn/limits.hpp"
#include "linattn/linear_attention.hpp"
#include "linattn/linformer.hpp"
#include "linattn/npy.hpp"
#include "linattn/reference.hpp"
#include "linattn/softmax_attention.hpp"
#include "linattn/threads.hpp"

namespace linattn::cli {
namespace {

struct RunArgs {
  std::string q, k, v, out, dout, dq, dk, dv, lse;
  std::string proj_e, proj_f, dproj_e, dproj_f;  // linformer
  Op op = Op::softmax;
  std::string feature_map = "elu";
  bool causal = false;
  std::vector<int64_t> key_lengths;
  std::optional<float> scale;
  float eps = 1e-6f;
  bool normalize = true;
  int64_t chunk_size = 64;
  Layout layout = Layout::bnhd;
  bool reference = false;
  int threads = 0;
  int64_t features = 0;  // performer
  uint64_t seed = 0;
  // --dtype: q, k, v, out, dout and the gradients in this storage (inputs rounded, float16 files
  // read exactly; outputs written as float16 for f16, as float32 holding bf16 values for bf16).
  DType dtype = DType::f32;
};

// A Linformer projection from its file: `shape` as in the file, [P, N_max] or [H or 1, P, N_max];
// `heads`, `rows`, `cols` the same as [heads, P, N_max].
struct Projection {
  std::string name;  // the flag: "--proj-e"
  std::string path;
  std::vector<int64_t> shape;
  int64_t heads = 0, rows = 0, cols = 0;
  std::vector<float> data;
};

// The tensors of one run; gradients only when dout is given.
struct Tensors {
  FileTensor q, k, v, out;
  std::optional<FileTensor> dout, dq, dk, dv;
  std::vector<float> lse;          // softmax and linformer: [B, H, Nq]
  std::optional<Projection> E, F;  // linformer (no F: E projects the values too)
  std::vector<float> dE, dF;       // linformer with dout, shaped like E and F
};

// The shape in a file's header, read without loading the data (for the memory estimate).
std::vector<int64_t> header_shape(const std::string& path) {
  // Not a regular file (a FIFO would block here): load() refuses it with the path in its message.
  std::error_code error;
  if (!std::filesystem::is_regular_file(path, error)) return {};
  std::ifstream in(path, std::ios::binary);
  std::string head(1 << 16, '\0');
  in.read(head.data(), std::streamsize(head.size()));
  head.resize(size_t(in.gcount()));
  try {
    return npy::parse_header(head).shape;
  } catch (const Error&) {
    return {};  // load() reports the problem with the path in its message
  }
}

double elements(const std::vector<int64_t>& shape) {
  double n = 1;
  for (int64_t e : shape) n *= double(e);
  return n;
}

void check_same(const FileTensor& t, int axis, int64_t expected, const std::string& because) {
  static const char* axes[] = {"batch B", "sequence N", "heads H", "head dim"};
  if (t.extent()[size_t(axis)] != expected)
    throw Error(t.name + " " + t.path.string() + ": " + axes[axis] + " is " + std::to_string(t.extent()[size_t(axis)]) +
                ", expected " + std::to_string(expected) + " (" + because + ")");
}

Projection load_projection(const std::string& name, const std::string& path) {
  npy::Array array = npy::load(path);
  const auto& s = array.shape;
  if (s.size() != 2 && s.size() != 3)
    throw Error(name + " " + path + ": shape " + shape_string(s) + " has rank " + std::to_string(s.size()) +
                ", expected [P, N_max] or [H, P, N_max]");
  for (int64_t extent : s)
    if (extent <= 0)
      throw Error(name + " " + path + ": shape " + shape_string(s) + " has an empty axis, expected every extent ≥ 1");
  const size_t r = s.size() - 2;
  return {name, path, s, r ? s[0] : 1, s[r], s[r + 1], std::move(array.data)};
}

// E (and F) agree with q, k: one projection per head or one for all, a column for every key.
void check_projections(const Tensors& t) {
  const int64_t H = t.q.extent()[2], Nk = t.k.extent()[1];
  const Projection& E = *t.E;
  const auto where = [](const Projection& p) { return p.name + " " + p.path + ": shape " + shape_string(p.shape); };
  if (E.heads != 1 && E.heads != H)
    throw Error(where(E) + " has " + std::to_string(E.heads) + " heads, expected " + std::to_string(H) +
                " (--q's heads) or 1 (one projection for all heads)");
  if (E.cols < Nk)
    throw Error(where(E) + " has N_max = " + std::to_string(E.cols) + " columns, expected ≥ " + std::to_string(Nk) +
                " (--k's sequence length): one column per key position");
  if (t.F && t.F->shape != E.shape)
    throw Error(where(*t.F) + ", expected " + shape_string(E.shape) + " (--proj-e's shape)");
}

LinformerOptions linformer_options(const RunArgs& a, const Tensors& t) {
  LinformerOptions o;
  o.projected_length = t.E->rows;
  o.max_length = t.E->cols;
  o.share_heads = t.E->heads == 1;
  o.share_key_value = !t.F;
  o.scale = a.scale;
  o.key_lengths = a.key_lengths;
  return o;
}

std::span<const float> data_of(const std::optional<Projection>& p) {
  return p ? std::span<const float>(p->data) : std::span<const float>();
}

void check_shapes(const RunArgs& a, const Tensors& t) {
  const auto [B, Nq, H, D] = t.q.extent();
  check_same(t.k, 0, B, "--q's batch");
  check_same(t.k, 2, H, "--q's heads");
  check_same(t.k, 3, D, "--q's head dim");
  check_same(t.v, 0, B, "--q's batch");
  check_same(t.v, 1, t.k.extent()[1], "--k's sequence length");
  check_same(t.v, 2, H, "--q's heads");
  const bool causal_linear = a.op != Op::softmax && (a.causal || a.op == Op::causal || a.op == Op::recurrent);
  if (causal_linear) check_same(t.k, 1, Nq, "causal linear attention needs as many keys as queries");
  if (t.dout) {
    check_same(*t.dout, 0, B, "--q's batch");
    check_same(*t.dout, 1, Nq, "--q's sequence length");
    check_same(*t.dout, 2, H, "--q's heads");
    check_same(*t.dout, 3, t.v.extent()[3], "--v's head dim");
  }
  if (t.E) check_projections(t);
  if (!a.key_lengths.empty()) {
    if (int64_t(a.key_lengths.size()) != B)
      throw UsageError("--key-lengths has " + std::to_string(a.key_lengths.size()) + " values, expected " +
                       std::to_string(B) + " (one per batch)");
    for (int64_t length : a.key_lengths)
      if (length < 0 || length > t.k.extent()[1])
        throw UsageError("--key-lengths value " + std::to_string(length) + " is outside [0, " +
                         std::to_string(t.k.extent()[1]) + "] (the key count)");
  }
}

// dim: the head dim D, which the Performer map is drawn for.
LinearAttentionOptions linear_options(const RunArgs& a, int64_t dim) {
  LinearAttentionOptions o;
  o.feature_map = a.op == Op::favor ? favor_feature_map(dim, FavorOptions{a.features, a.seed, true})
                                    : feature_map_by_name(a.feature_map);
  o.eps = a.eps;
  o.normalize = a.normalize;
  o.causal = a.causal || a.op == Op::causal || a.op == Op::recurrent;
  o.key_lengths = a.key_lengths;
  o.chunk_size = a.chunk_size;
  return o;
}

SoftmaxAttentionOptions softmax_options(const RunArgs& a) {
  SoftmaxAttentionOptions o;
  o.scale = a.scale;
  o.causal = a.causal;
  o.key_lengths = a.key_lengths;
  return o;
}

// The tensors of one call as views of T (float, or bf16/f16 copies for --dtype).
template <class T>
struct Views {
  View4<const T> q, k, v, dout;
  View4<T> out, dq, dk, dv;
};

template <class T>
View4<T> token(View4<T> x, int64_t n) {
  x.data += n * x.stride[1];
  x.extent[1] = 1;
  return x;
}

// The fast operators on views of T: the fp32 functions, or their half-precision overloads
// (linattn/half_attention.hpp) of the same names.
template <class T>
void run_ops(const RunArgs& a, Tensors& t, const Views<T>& w) {
  const LinearAttentionOptions linear = linear_options(a, t.q.extent()[3]);
  switch (a.op) {
    case Op::softmax:
      softmax_attention_forward(w.out, t.lse, w.q, w.k, w.v, softmax_options(a));
      if (t.dout) softmax_attention_backward(w.dq, w.dk, w.dv, w.dout, w.q, w.k, w.v, w.out, t.lse, softmax_options(a));
      return;
    case Op::linear:
    case Op::favor:
    case Op::causal:
      if (linear.causal) {
        causal_linear_attention_forward(w.out, w.q, w.k, w.v, linear);
        if (t.dout) causal_linear_attention_backward(w.dq, w.dk, w.dv, w.dout, w.q, w.k, w.v, linear);
      } else {
        linear_attention_forward(w.out, w.q, w.k, w.v, linear);
        if (t.dout) linear_attention_backward(w.dq, w.dk, w.dv, w.dout, w.q, w.k, w.v, linear);
      }
      return;
    case Op::recurrent: {
      const auto e = t.q.extent();
      RecurrentState state(e[0], e[2], linear.feature_map->feature_dim(e[3]), t.v.extent()[3],
                           linear.feature_map->name());
      for (int64_t n = 0; n < e[1]; ++n)
        recurrent_step(token(w.out, n), token(w.q, n), token(w.k, n), token(w.v, n), state, linear);
      return;
    }
    case Op::retention:
    case Op::lightning:
    case Op::simple_gla:
    case Op::gla:
    case Op::delta_rule:
    case Op::gated_delta_rule:
    case Op::kda:
    case Op::mamba2:
    case Op::rwkv7:
      break;  // refused by run() before any file is read
    case Op::linformer: {
      const LinformerOptions o = linformer_options(a, t);
      linformer_attention_forward(w.out, t.lse, w.q, w.k, w.v, t.E->data, data_of(t.F), o);
      if (t.dout)
        linformer_attention_backward(w.dq, w.dk, w.dv, t.dE, t.dF, w.dout, w.q, w.k, w.v, t.E->data, data_of(t.F),
                                     w.out, t.lse, o);
      return;
    }
  }
}

// A half copy of a file tensor in the same layout (rounded; exact for a float16 file).
template <HalfType H>
struct HalfCopy {
  std::vector<H> data;
  View4<H> view;
  explicit HalfCopy(const FileTensor& x) : data(x.data.size()) {
    convert(std::span<H>(data), std::span<const float>(x.data));
    view = {data.data() + (x.view.data - x.data.data()), x.view.extent, x.view.stride};
  }
  // Back into the file tensor, widened (exact).
  void store(FileTensor& x) const { convert(std::span<float>(x.data), std::span<const H>(data)); }
};

template <HalfType H>
void run_half(const RunArgs& a, Tensors& t) {
  const HalfCopy<H> q(t.q), k(t.k), v(t.v);
  HalfCopy<H> out(t.out);
  std::optional<HalfCopy<H>> dout, dq, dk, dv;
  Views<H> w{q.view, k.view, v.view, {}, out.view, {}, {}, {}};
  if (t.dout) {
    dout.emplace(*t.dout), dq.emplace(*t.dq), dk.emplace(*t.dk), dv.emplace(*t.dv);
    w.dout = dout->view, w.dq = dq->view, w.dk = dk->view, w.dv = dv->view;
  }
  run_ops(a, t, w);
  out.store(t.out);
  if (t.dout) dq->store(*t.dq), dk->store(*t.dk), dv->store(*t.dv);
}

void run_fast(const RunArgs& a, Tensors& t) {
  if (a.dtype == DType::bf16) return run_half<bf16>(a, t);
  if (a.dtype == DType::f16) return run_half<f16>(a, t);
  Views<float> w{t.q.view, t.k.view, t.v.view, {}, t.out.view, {}, {}, {}};
  if (t.dout) w.dout = t.dout->view, w.dq = t.dq->view, w.dk = t.dk->view, w.dv = t.dv->view;
  run_ops(a, t, w);
}

void copy_from(FileTensor& dst, const reference::Tensor& src) {
  const auto& e = src.extent;
  for (int64_t b = 0; b < e[0]; ++b)
    for (int64_t n = 0; n < e[1]; ++n)
      for (int64_t h = 0; h < e[2]; ++h)
        for (int64_t d = 0; d < e[3]; ++d) dst.view(b, n, h, d) = float(src(b, n, h, d));
}

void run_reference(const RunArgs& a, Tensors& t) {
  const reference::Tensor q = reference::to_double(t.q.view), k = reference::to_double(t.k.view),
                          v = reference::to_double(t.v.view);
  std::optional<reference::Tensor> dout;
  if (t.dout) dout = reference::to_double(t.dout->view);
  std::optional<reference::Gradients> grads;
  const auto doubles = [](const std::optional<Projection>& p) {
    return p ? std::vector<double>(p->data.begin(), p->data.end()) : std::vector<double>();
  };
  if (a.op == Op::softmax) {
    std::vector<double> lse;
    copy_from(t.out, reference::softmax_attention_forward(q, k, v, softmax_options(a), &lse));
    t.lse.assign(lse.begin(), lse.end());
    if (dout) grads = reference::softmax_attention_backward(*dout, q, k, v, softmax_options(a));
  } else if (a.op == Op::linformer) {
    const LinformerOptions o = linformer_options(a, t);
    const std::vector<double> E = doubles(t.E), F = doubles(t.F);
    std::vector<double> lse;
    copy_from(t.out, reference::linformer_attention_forward(q, k, v, E, F, o, &lse));
    t.lse.assign(lse.begin(), lse.end());
    if (dout) {
      reference::LinformerGradients g = reference::linformer_attention_backward(*dout, q, k, v, E, F, o);
      t.dE.assign(g.dE.begin(), g.dE.end());
      t.dF.assign(g.dF.begin(), g.dF.end());
      grads = reference::Gradients{std::move(g.dq), std::move(g.dk), std::move(g.dv)};
    }
  } else {
    const LinearAttentionOptions linear = linear_options(a, q.extent[3]);
    copy_from(t.out, reference::linear_attention_forward(q, k, v, linear));
    if (dout) grads = reference::linear_attention_backward(*dout, q, k, v, linear);
  }
  if (grads) {
    copy_from(*t.dq, grads->dq);
    copy_from(*t.dk, grads->dk);
    copy_from(*t.dv, grads->dv);
  }
}

std::string sibling(const std::string& out, const char* name) {
  return (std::filesystem::path(out).parent_path() / name).string();
}

int run(RunArgs& a) {
  const bool linformer = a.op == Op::linformer;
  if (is_recurrence(a.op))
    throw UsageError(std::string("--op ") + op_name(a.op) +
                     ": linattn run covers softmax, linear, causal, recurrent, performer and linformer; the decayed "
                     "family, the delta rule, mamba2 and rwkv7 are in bench and compare (and the Python module's "
                     "linattn.fla and linattn.mamba)");
  if (linformer && a.proj_e.empty())
    throw UsageError("--proj-e: --op linformer needs the projection E (.npy, [P, N_max] or [H, P, N_max])");
  if (!linformer && !(a.proj_e.empty() && a.proj_f.empty() && a.dproj_e.empty() && a.dproj_f.empty()))
    throw UsageError("--proj-e/--proj-f/--dproj-e/--dproj-f apply to --op linformer");
  if (linformer && a.causal)
    throw UsageError("--causal: --op linformer has no causal mode (every projected key mixes all positions)");
  if (!a.dproj_f.empty() && a.proj_f.empty()) throw UsageError("--dproj-f needs --proj-f");
  if (a.op == Op::favor && a.feature_map != "elu") throw UsageError("--feature-map: --op performer uses favor");
  if (a.causal && a.op == Op::linear) a.op = Op::causal;
  if (a.op == Op::recurrent && !a.dout.empty()) throw UsageError("--dout: --op recurrent has no backward");
  if (a.op == Op::recurrent && !a.key_lengths.empty())
    throw UsageError("--key-lengths: not supported by --op recurrent");
  if ((a.op == Op::softmax || linformer) && a.feature_map != "elu")
    throw UsageError("--feature-map applies to the linear operators");
  if (a.op != Op::favor && (a.features != 0 || a.seed != 0))
    throw UsageError("--features and --seed apply to --op performer");
  if (a.op != Op::softmax && !linformer && a.scale) throw UsageError("--scale applies to --op softmax and linformer");
  if (a.op != Op::softmax && !linformer && !a.lse.empty())
    throw UsageError("--lse applies to --op softmax and linformer");
  if (a.dout.empty() && (!a.dq.empty() || !a.dk.empty() || !a.dv.empty() || !a.dproj_e.empty() || !a.dproj_f.empty()))
    throw UsageError("--dq/--dk/--dv/--dproj-e/--dproj-f need --dout");
  if (a.reference && a.dtype != DType::f32)
    throw UsageError("--dtype: --reference runs the fp64 oracle, expected f32 (the default) with it");
  set_num_threads(a.threads);

  // Refuse up front: inputs, output, gradients, and fp64 copies of all of them for --reference.
  const std::vector<int64_t> sq = header_shape(a.q), sk = header_shape(a.k), sv = header_shape(a.v);
  double floats = 2 * (elements(sq) + elements(sk) + elements(sv)) +
                  elements(sq) / double(sq.empty() ? 1 : sq.back()) * double(sv.empty() ? 1 : sv.back());
  // E and F with their gradients; the projected keys and values are no larger than k and v.
  if (!a.proj_e.empty()) floats += 2 * elements(header_shape(a.proj_e)) + 2 * elements(sk) + 2 * elements(sv);
  if (!a.proj_f.empty()) floats += 2 * elements(header_shape(a.proj_f));
  if (a.reference) floats *= 3;
  check_memory(floats * 4 + 64.0 * (1 << 20), "linattn run on " + a.q + ", " + a.k + ", " + a.v);

  Tensors t;
  t.q = load_tensor("--q", a.q, a.layout);
  t.k = load_tensor("--k", a.k, a.layout);
  t.v = load_tensor("--v", a.v, a.layout);
  if (!a.dout.empty()) t.dout = load_tensor("--dout", a.dout, a.layout);
  if (linformer) t.E = load_projection("--proj-e", a.proj_e);
  if (!a.proj_f.empty()) t.F = load_projection("--proj-f", a.proj_f);
  check_shapes(a, t);
  const auto [B, Nq, H, D] = t.q.extent();
  const int64_t Nk = t.k.extent()[1], E = t.v.extent()[3];
  t.out = make_tensor("--out", a.out, a.layout, {B, Nq, H, E});
  if (a.op == Op::softmax || linformer) t.lse.assign(size_t(B * H * Nq), 0.0f);
  if (t.dout && t.E) t.dE.assign(t.E->data.size(), 0.0f);
  if (t.dout && t.F) t.dF.assign(t.F->data.size(), 0.0f);
  if (t.dout) {
    t.dq = make_tensor("--dq", a.dq.empty() ? sibling(a.out, "dq.npy") : a.dq, a.layout, {B, Nq, H, D});
    t.dk = make_tensor("--dk", a.dk.empty() ? sibling(a.out, "dk.npy") : a.dk, a.layout, {B, Nk, H, D});
    t.dv = make_tensor("--dv", a.dv.empty() ? sibling(a.out, "dv.npy") : a.dv, a.layout, {B, Nk, H, E});
  }
  if (a.reference)
    run_reference(a, t);
  else
    run_fast(a, t);

  // Written only once everything has been computed, and as one set (docs/reliability.md): every file
  // goes to a temporary first, so that a full disk or a kill leaves all the old outputs, and only then
  // are they renamed in, under a journal that the next run finishes if a kill falls between renames.
  FileSet outputs;
  const auto add = [&](const FileTensor& x) {
    outputs.add(x.path, npy::serialize(file_shape(x.layout, x.extent()), x.data,
                                       a.dtype == DType::f16 ? DType::f16 : DType::f32));
  };
  add(t.out);
  if (!a.lse.empty()) outputs.add(a.lse, npy::serialize(std::vector<int64_t>{B, H, Nq}, t.lse));
  if (t.dout) {
    add(*t.dq);
    add(*t.dk);
    add(*t.dv);
    if (t.E) outputs.add(a.dproj_e.empty() ? sibling(a.out, "dE.npy") : a.dproj_e, npy::serialize(t.E->shape, t.dE));
    if (t.F) outputs.add(a.dproj_f.empty() ? sibling(a.out, "dF.npy") : a.dproj_f, npy::serialize(t.F->shape, t.dF));
  }
  outputs.commit();
  return kExitOk;
}

const Registrar registrar{
    {"run", "Run one operator (or the fp64 oracle) on Q, K, V .npy files; write out (and dq, dk, dv) .npy", 40,
     [](CLI::App& app) {
       auto a = std::make_shared<RunArgs>();
       app.add_option("--q", a->q, "Queries .npy, float32 [B, Nq, H, D] (see --layout)")->required();
       app.add_option("--k", a->k, "Keys .npy, float32 [B, Nk, H, D]")->required();
       app.add_option("--v", a->v, "Values .npy, float32 [B, Nk, H, E]")->required();
       app.add_option("--out", a->out, "Output .npy, float32 [B, Nq, H, E]")->required();
       app.add_option("--dout", a->dout,
                      "Gradient of the loss w.r.t. the output, [B, Nq, H, E]: also write dq, dk, dv");
       app.add_option("--dq", a->dq, "Where dq goes (default: dq.npy beside --out)");
       app.add_option("--dk", a->dk, "Where dk goes (default: dk.npy beside --out)");
       app.add_option("--dv", a->dv, "Where dv goes (default: dv.npy beside --out)");
       app.add_option("--lse", a->lse, "Softmax, Linformer: also write the log-sum-exp of each row, [B, H, Nq]");
       app.add_option("--op", a->op,
                      "softmax, linear, causal (causal linear), recurrent (token by token), performer (linear "
                      "attention with FAVOR+ features) or linformer (softmax over keys and values projected by "
                      "--proj-e/--proj-f)")
           ->capture_default_str()
           ->transform(flags::choice(op_names()))
           ->option_text("OP");
       app.add_option("--feature-map", a->feature_map, "Linear attention's φ: elu (elu+1), relu or identity")
           ->capture_default_str()
           ->transform(flags::one_of({"elu", "relu", "identity"}));
       app.add_option("--features", a->features, "Performer: random features m (0: default for D)")
           ->check(flags::bounded(0, limits::kMaxFeatures));
       app.add_option("--seed", a->seed, "Performer: seed of the random features")->check(flags::seed());
       app.add_option("--proj-e", a->proj_e,
                      "Linformer: E .npy, float32 [P, N_max] (one for all heads) or [H, P, N_max]; projects the keys, "
                      "and the values too without --proj-f");
       app.add_option("--proj-f", a->proj_f, "Linformer: F .npy, E's shape; projects the values");
       app.add_option("--dproj-e", a->dproj_e, "Linformer: where dE goes (default: dE.npy beside --out)");
       app.add_option("--dproj-f", a->dproj_f, "Linformer: where dF goes (default: dF.npy beside --out)");
       app.add_flag("--causal", a->causal, "Causal mask, aligned bottom-right (softmax; with linear: causal linear)");
       flags::add_list(app, "--key-lengths", a->key_lengths, "Per-batch key lengths, comma-separated (B values)",
                       flags::at_least(0));
       // float options: a finite float (1e39 would be inf).
       app.add_option("--scale", a->scale, "Softmax, Linformer: scale of q·k (default 1/sqrt(D))")
           ->check(flags::finite(-FLT_MAX, FLT_MAX));
       app.add_option("--eps", a->eps, "Linear: added to the normaliser")
           ->check(flags::finite(-FLT_MAX, FLT_MAX))
           ->capture_default_str();
       app.add_flag("!--no-normalize", a->normalize, "Linear: out = φ(q)ᵀS without the normaliser");
       app.add_option("--chunk-size", a->chunk_size, "Causal linear: tokens per chunk")
           ->capture_default_str()
           ->check(flags::bounded(1, limits::kMaxChunkSize));
       app.add_option("--layout", a->layout, "Axis order of every file: bnhd [B, N, H, D] or bhnd [B, H, N, D]")
           ->transform(flags::choice(std::map<std::string, Layout>{{"bnhd", Layout::bnhd}, {"bhnd", Layout::bhnd}}))
           ->option_text("bnhd|bhnd");
       app.add_flag("--reference", a->reference, "Run the fp64 oracle (O(N²), slow) instead of the fast operator");
       app.add_option("--threads", a->threads, "Threads; 0: the default")->check(flags::threads());
       app.add_option("--dtype", a->dtype,
                      "Storage of q, k, v, out and the gradients: f32, bf16 or f16 (f16 writes float16 .npy files)")
           ->transform(flags::choice(dtype_names()));
       app.footer(
           "Exit codes: 0 done, 1 a bad or mismatched input file (message names the flag and path), 2 a bad flag, "
           "3 the inputs would need more memory than this process can allocate. Outputs are written only after "
           "everything is "
           "computed, as one set: all new or all old (a .OUT.set journal beside --out marks a set a kill interrupted; "
           "the next run finishes it).");
       flags::examples(app,
                       {"linattn run --q q.npy --k k.npy --v v.npy --out out.npy --op causal",
                        "linattn run --q q.npy --k k.npy --v v.npy --dout dout.npy --out out.npy --op softmax --causal",
                        "linattn run --q q.npy --k k.npy --v v.npy --out ref.npy --op linear --reference"});
       return [a] { return run(*a); };
     }}};

}  // namespace
}  // namespace linattn::cli
