// Conformance runners of the feed-forward and convolutional ops (conformance.hpp).
#include <algorithm>
#include <cmath>

#include "starling/model/model.hpp"

#include "conformance.hpp"

namespace starling::conformance {
namespace {

using model::detail::Layer;
using model::detail::LayerKind;
using model::detail::Shape;

// An elementwise layer over the whole tensor (one example of count() values).
Outcome elementwise(const NodeCase& c, LayerKind kind) {
  const Tensor* x = c.input(0);
  if (!x) return Outcome::skip("no input");
  Layer l;
  l.kind = kind;
  l.in = Shape{static_cast<int>(x->count()), 1, 1};
  l.out = l.in;
  Tensor y;
  y.dims = x->dims;
  y.values = runLayer(l, {}, x->values, 1);
  return Outcome::output(std::move(y));
}

Outcome runRelu(const NodeCase& c) {
  return elementwise(c, LayerKind::kRelu);
}
Outcome runSigmoid(const NodeCase& c) {
  return elementwise(c, LayerKind::kSigmoid);
}
Outcome runTanh(const NodeCase& c) {
  return elementwise(c, LayerKind::kTanh);
}

// A dense layer y = W x + b with W {out, in} from an M x K by K x N product.
Outcome dense(const Tensor& a, const std::vector<float>& w, const std::vector<float>& b, int in, int out) {
  Layer l;
  l.kind = LayerKind::kDense;
  l.in = Shape{in, 1, 1};
  l.out = Shape{out, 1, 1};
  l.weightOffset = 0;
  l.biasOffset = w.size();
  std::vector<float> params = w;
  params.insert(params.end(), b.begin(), b.end());
  Tensor y;
  y.dims = {a.dim(0), out};
  y.values = runLayer(l, params, a.values, static_cast<int>(a.dim(0)));
  return Outcome::output(std::move(y));
}

// B (K x N, or N x K when transposed) as Starling's {out = N, in = K} weights.
std::vector<float> denseWeights(const Tensor& b, bool transposed) {
  if (transposed) return b.values;
  const auto k = static_cast<std::size_t>(b.dim(0));
  const auto n = static_cast<std::size_t>(b.dim(1));
  std::vector<float> w(k * n);
  for (std::size_t i = 0; i < k; ++i)
    for (std::size_t j = 0; j < n; ++j)
      w[j * k + i] = b.values[i * n + j];
  return w;
}

Outcome runGemm(const NodeCase& c) {
  const onnx::NodeProto& n = c.node();
  if (attrFloat(n, "alpha", 1.0f) != 1.0f) return Outcome::skip("attribute 'alpha' != 1");
  if (attrFloat(n, "beta", 1.0f) != 1.0f) return Outcome::skip("attribute 'beta' != 1");
  if (attrInt(n, "transA", 0) != 0) return Outcome::skip("attribute 'transA' = 1");
  const Tensor* a = c.input(0);
  const Tensor* b = c.input(1);
  const Tensor* bias = c.input(2);
  const bool transB = attrInt(n, "transB", 0) != 0;
  const int in = static_cast<int>(a->dim(1));
  const int out = static_cast<int>(transB ? b->dim(0) : b->dim(1));
  std::vector<float> bv(static_cast<std::size_t>(out), 0.0f);
  if (bias) {
    if (bias->count() == 1)
      std::fill(bv.begin(), bv.end(), bias->values[0]);
    else if (bias->count() == static_cast<std::size_t>(out) && (bias->rank() == 1 || bias->dim(0) == 1))
      bv = bias->values;
    else
      return Outcome::skip("input C of shape M x N (Starling's bias is a vector over the outputs)");
  }
  return dense(*a, denseWeights(*b, transB), bv, in, out);
}

Outcome runMatMul(const NodeCase& c) {
  const Tensor* a = c.input(0);
  const Tensor* b = c.input(1);
  if (a->rank() != 2 || b->rank() != 2) return Outcome::skip("inputs of rank > 2 (Starling multiplies N x K by K x N)");
  const int out = static_cast<int>(b->dim(1));
  return dense(*a, denseWeights(*b, false), std::vector<float>(static_cast<std::size_t>(out), 0.0f),
               static_cast<int>(a->dim(1)), out);
}

// Flatten (axis 1) is the identity on Starling's C-major storage.
Outcome runFlatten(const NodeCase& c) {
  const Tensor* x = c.input(0);
  int64_t axis = attrInt(c.node(), "axis", 1);
  if (axis < 0) axis += x->rank();
  if (axis != 1) return Outcome::skip("attribute 'axis' = " + std::to_string(axis) + " (only 1)");
  Tensor y;
  y.dims = {x->dim(0), static_cast<int64_t>(x->count() / static_cast<std::size_t>(x->dim(0)))};
  y.values = x->values;
  return Outcome::output(std::move(y));
}

// Softmax and LogSoftmax over the last axis: the cross-entropy head of a linear model
// whose weights are the identity (its logits are the input, exactly).
Outcome softmax(const NodeCase& c, bool log) {
  const Tensor* x = c.input(0);
  int64_t axis = attrInt(c.node(), "axis", -1);
  if (axis < 0) axis += x->rank();
  if (axis != x->rank() - 1) return Outcome::skip("attribute 'axis' is not the last axis");
  const int k = static_cast<int>(x->dim(x->rank() - 1));
  if (k < 2) return Outcome::skip("a softmax over one value");
  const int rows = static_cast<int>(x->count() / static_cast<std::size_t>(k));
  auto m = model::Model::fromSpec("linear:" + std::to_string(k) + "-" + std::to_string(k));
  if (!m) return Outcome::skip(m.status().message());
  std::fill(m->params().begin(), m->params().end(), 0.0f);
  for (int i = 0; i < k; ++i)
    m->params()[static_cast<std::size_t>(i) * k + i] = 1.0f;
  auto p = m->forward(x->values.data(), rows);
  Tensor y;
  y.dims = x->dims;
  y.values.assign(p.begin(), p.end());
  if (log)
    for (float& v : y.values)
      v = std::log(v);
  return Outcome::output(std::move(y));
}
Outcome runSoftmax(const NodeCase& c) {
  return softmax(c, false);
}
Outcome runLogSoftmax(const NodeCase& c) {
  return softmax(c, true);
}

// The attributes of a Conv or a pool that Starling does not have; "" when none.
std::string windowUnsupported(const NodeCase& c, std::initializer_list<std::string_view> known) {
  const onnx::NodeProto& n = c.node();
  if (std::string u = unknownAttributes(n, known); !u.empty()) return u;
  if (attrString(n, "auto_pad", "NOTSET") != "NOTSET") return "attribute 'auto_pad'";
  for (int64_t d : attrInts(n, "dilations"))
    if (d != 1) return "attribute 'dilations' != 1";
  if (attrInt(n, "group", 1) != 1) return "attribute 'group' != 1";
  if (attrInt(n, "ceil_mode", 0) != 0) return "attribute 'ceil_mode' = 1";
  const int rank = c.input(0)->rank();
  if (rank != 3 && rank != 4) return "a " + std::to_string(rank - 2) + "-D input (Starling: 1-D and 2-D)";
  return "";
}

// N x C x H x W, or N x C x L as C x 1 x L.
Shape imageShape(const Tensor& x) {
  if (x.rank() == 3) return Shape{static_cast<int>(x.dim(1)), 1, static_cast<int>(x.dim(2))};
  return Shape{static_cast<int>(x.dim(1)), static_cast<int>(x.dim(2)), static_cast<int>(x.dim(3))};
}

Tensor imageOutput(const Tensor& x, const Layer& l, std::vector<float> values) {
  Tensor y;
  if (x.rank() == 3)
    y.dims = {x.dim(0), l.out.c, l.out.w};
  else
    y.dims = {x.dim(0), l.out.c, l.out.h, l.out.w};
  y.values = std::move(values);
  return y;
}

// A square window's size, stride and symmetric padding as Starling's spec has them (one
// value for every spatial axis), or a skip reason.
struct Window {
  int k = 0, stride = 1, pad = 0;
};
std::string readWindow(const NodeCase& c, const std::vector<int64_t>& kernel, Window& win, bool stridesAreWindow) {
  const onnx::NodeProto& n = c.node();
  for (int64_t k : kernel)
    if (k != kernel[0]) return "a non-square window";
  win.k = static_cast<int>(kernel[0]);
  const auto strides = attrInts(n, "strides");
  win.stride = strides.empty() ? 1 : static_cast<int>(strides[0]);
  for (int64_t s : strides)
    if (s != win.stride) return "attribute 'strides' differs between axes";
  if (stridesAreWindow && win.stride != win.k) return "attribute 'strides' != the window";
  const auto pads = attrInts(n, "pads");
  win.pad = pads.empty() ? 0 : static_cast<int>(pads[0]);
  for (int64_t p : pads)
    if (p != win.pad) return "attribute 'pads' is not the same on every side";
  if (stridesAreWindow && win.pad != 0) return "attribute 'pads' != 0";
  return "";
}

void setWindow(Layer& l, const Window& w) {
  const bool oneD = l.in.h == 1 && l.kind != LayerKind::kDense;
  l.kernel = w.k;
  l.kernelH = oneD ? 1 : w.k;
  l.strideW = w.stride;
  l.strideH = oneD ? 1 : w.stride;
  l.padW = w.pad;
  l.padH = oneD ? 0 : w.pad;
  l.out.h = (l.in.h + 2 * l.padH - l.kernelH) / l.strideH + 1;
  l.out.w = (l.in.w + 2 * l.padW - l.kernel) / l.strideW + 1;
}

Outcome runConv(const NodeCase& c) {
  if (std::string u = windowUnsupported(c, {"kernel_shape", "strides", "pads", "dilations", "group", "auto_pad"});
      !u.empty())
    return Outcome::skip(u);
  const Tensor& x = *c.input(0);
  const Tensor& w = *c.input(1);
  std::vector<int64_t> kernel(w.dims.begin() + 2, w.dims.end());
  Window win;
  if (std::string u = readWindow(c, kernel, win, false); !u.empty()) return Outcome::skip(u);
  Layer l;
  l.kind = LayerKind::kConv;
  l.in = imageShape(x);
  l.out.c = static_cast<int>(w.dim(0));
  setWindow(l, win);
  l.weightOffset = 0;
  l.biasOffset = w.count();
  std::vector<float> params = w.values;
  if (const Tensor* b = c.input(2))
    params.insert(params.end(), b->values.begin(), b->values.end());
  else
    params.resize(params.size() + static_cast<std::size_t>(l.out.c), 0.0f);
  return Outcome::output(imageOutput(x, l, runLayer(l, params, x.values, static_cast<int>(x.dim(0)))));
}

// MaxPool and AveragePool: windows at stride = window, no padding (so AveragePool's
// count_include_pad changes nothing).
Outcome pool(const NodeCase& c, LayerKind kind) {
  if (std::string u = windowUnsupported(
          c, {"kernel_shape", "strides", "pads", "dilations", "auto_pad", "ceil_mode", "count_include_pad"});
      !u.empty())
    return Outcome::skip(u);
  if (c.model.graph().output_size() > 1) return Outcome::skip("the Indices output");
  Window win;
  if (std::string u = readWindow(c, attrInts(c.node(), "kernel_shape"), win, true); !u.empty()) return Outcome::skip(u);
  const Tensor& x = *c.input(0);
  Layer l;
  l.kind = kind;
  l.in = imageShape(x);
  l.out.c = l.in.c;
  setWindow(l, win);
  l.out.h = l.in.h / l.kernelH;  // floor, like ceil_mode 0
  l.out.w = l.in.w / l.kernel;
  return Outcome::output(imageOutput(x, l, runLayer(l, {}, x.values, static_cast<int>(x.dim(0)))));
}
Outcome runMaxPool(const NodeCase& c) {
  return pool(c, LayerKind::kMaxPool);
}
Outcome runAveragePool(const NodeCase& c) {
  return pool(c, LayerKind::kAvgPool);
}

Outcome runGlobalAveragePool(const NodeCase& c) {
  const Tensor& x = *c.input(0);
  if (x.rank() != 3 && x.rank() != 4) return Outcome::skip("a " + std::to_string(x.rank() - 2) + "-D input");
  Layer l;
  l.kind = LayerKind::kGlobalAvgPool;
  l.in = imageShape(x);
  l.out = Shape{l.in.c, 1, 1};
  Tensor y;
  y.dims = x.dims;
  for (std::size_t i = 2; i < y.dims.size(); ++i)
    y.dims[i] = 1;
  y.values = runLayer(l, {}, x.values, static_cast<int>(x.dim(0)));
  return Outcome::output(std::move(y));
}

// BatchNormalization: inference mode normalizes with the given mean and variance;
// training mode (output 0 only) with the batch's.
Outcome runBatchNormalization(const NodeCase& c) {
  const onnx::NodeProto& n = c.node();
  if (std::string u = unknownAttributes(n, {"epsilon", "momentum", "training_mode"}); !u.empty())
    return Outcome::skip(u);
  const Tensor& x = *c.input(0);
  if (x.rank() < 2 || x.rank() > 4) return Outcome::skip("a rank " + std::to_string(x.rank()) + " input");
  Layer l;
  l.kind = LayerKind::kBatchNorm;
  l.in = x.rank() == 2 ? Shape{static_cast<int>(x.dim(1)), 1, 1} : imageShape(x);
  l.out = l.in;
  l.eps = attrFloat(n, "epsilon", 1e-5f);
  const auto ch = static_cast<std::size_t>(l.in.c);
  l.weightOffset = 0;
  l.biasOffset = ch;
  l.meanOffset = 2 * ch;
  l.varOffset = 3 * ch;
  std::vector<float> params;
  for (int i = 1; i <= 4; ++i)
    params.insert(params.end(), c.input(i)->values.begin(), c.input(i)->values.end());
  Tensor y;
  y.dims = x.dims;
  y.values = runLayer(l, params, x.values, static_cast<int>(x.dim(0)), attrInt(n, "training_mode", 0) != 0);
  return Outcome::output(std::move(y));
}

Outcome runLeakyRelu(const NodeCase& c) {
  const Tensor* x = c.input(0);
  Layer l;
  l.kind = LayerKind::kLeakyRelu;
  l.in = Shape{static_cast<int>(x->count()), 1, 1};
  l.out = l.in;
  l.alpha = attrFloat(c.node(), "alpha", 0.01f);
  Tensor y;
  y.dims = x->dims;
  y.values = runLayer(l, {}, x->values, 1);
  return Outcome::output(std::move(y));
}

// Clip with both bounds as inputs (opset 11+) or attributes (before).
Outcome runClip(const NodeCase& c) {
  const Tensor* x = c.input(0);
  const Tensor* lo = c.input(1);
  const Tensor* hi = c.input(2);
  if (!lo || !hi)
    return Outcome::skip(std::string("no ") + (lo ? "max" : "min") + " (Starling's clip has both bounds)");
  Layer l;
  l.kind = LayerKind::kClip;
  l.in = Shape{static_cast<int>(x->count()), 1, 1};
  l.out = l.in;
  l.alpha = lo->values.at(0);
  l.beta = hi->values.at(0);
  if (l.alpha > l.beta) return Outcome::skip("min > max");
  Tensor y;
  y.dims = x->dims;
  y.values = runLayer(l, {}, x->values, 1);
  return Outcome::output(std::move(y));
}

const Register kRelu("Relu", runRelu);
const Register kSigmoid("Sigmoid", runSigmoid);
const Register kTanh("Tanh", runTanh);
const Register kGemm("Gemm", runGemm);
const Register kMatMul("MatMul", runMatMul);
const Register kFlatten("Flatten", runFlatten);
const Register kSoftmax("Softmax", runSoftmax);
const Register kLogSoftmax("LogSoftmax", runLogSoftmax);
const Register kConv("Conv", runConv);
const Register kMaxPool("MaxPool", runMaxPool);
const Register kAveragePool("AveragePool", runAveragePool);
const Register kGlobalAveragePool("GlobalAveragePool", runGlobalAveragePool);
const Register kBatchNormalization("BatchNormalization", runBatchNormalization);
const Register kLeakyRelu("LeakyRelu", runLeakyRelu);
const Register kClip("Clip", runClip);

}  // namespace
}  // namespace starling::conformance
