// ONNX import: walks the graph as one chain of layers from its input to its output and
// writes the Starling spec those layers make (docs/model.md, "ONNX").
//
// The graph is checked first (IR and opset no newer than ONNX 1.12 knows, then
// onnx::checker and strict shape inference), so the walk may rely on well-formed nodes.
// Nodes fall in two groups: the network's path (every node that reads the input or a
// value computed from it, except Shape) and shape glue (Constant, Shape, Gather,
// Unsqueeze, Squeeze, Concat, Cast, Identity that compute a Reshape's target shape).
// Glue is evaluated on small integer vectors in which the batch size is a symbol; it
// may feed nothing but the shape input of a Reshape, and that Reshape must flatten.
#include <onnx/checker.h>
#include <onnx/onnx_pb.h>
#include <onnx/shape_inference/implementation.h>

#include <charconv>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "starling/onnx/onnx.hpp"

namespace starling::onnxio {
namespace {

constexpr int64_t kBatch = std::numeric_limits<int64_t>::min();        // the batch size, in glue values
constexpr int64_t kUnknown = std::numeric_limits<int64_t>::min() + 1;  // a size glue cannot know
constexpr std::size_t kMaxFileBytes = std::size_t{1} << 31;

std::string label(const onnx::NodeProto& node, int index) {
  if (!node.name().empty()) return "node '" + node.name() + "' (" + node.op_type() + ")";
  return "node #" + std::to_string(index) + " (" + node.op_type() +
         (node.output_size() > 0 ? ", output '" + node.output(0) + "')" : ")");
}

std::string ints(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (std::size_t i = 0; i < v.size(); ++i)
    s += (i ? "," : "") + std::to_string(v[i]);
  return s + "]";
}

// A constant tensor: an initializer or a Constant node's value.
struct Const {
  std::vector<int64_t> dims;
  std::vector<float> f;    // FLOAT and DOUBLE tensors
  std::vector<int64_t> i;  // integer tensors
  bool isFloat = false;
  std::size_t count() const {
    std::size_t n = 1;
    for (int64_t d : dims)
      n *= static_cast<std::size_t>(d);
    return n;
  }
};

template <class T>
std::vector<T> rawValues(const std::string& raw, std::size_t n) {
  std::vector<T> out(n);
  std::memcpy(out.data(), raw.data(), n * sizeof(T));  // ONNX raw data is little-endian, as is every target
  return out;
}

Result<Const> readTensor(const onnx::TensorProto& t, const std::string& where) {
  Const c;
  for (int64_t d : t.dims()) {
    if (d < 0) return Status(StatusCode::kMalformed, where + ": tensor '" + t.name() + "' has a negative dimension");
    c.dims.push_back(d);
  }
  if (t.data_location() == onnx::TensorProto::EXTERNAL)
    return Status(StatusCode::kUnsupported,
                  where + ": tensor '" + t.name() + "' is stored outside the file (external data is not supported)");
  const std::size_t n = c.count();
  const bool raw = t.has_raw_data();
  auto sized = [&](std::size_t have) -> Status {
    if (have != n)
      return Status(StatusCode::kMalformed, where + ": tensor '" + t.name() + "' holds " + std::to_string(have) +
                                                " values, its shape " + ints(c.dims) + " " + std::to_string(n));
    return {};
  };
  switch (t.data_type()) {
    case onnx::TensorProto::FLOAT:
      c.isFloat = true;
      if (raw) {
        STARLING_RETURN_IF_ERROR(sized(t.raw_data().size() / 4));
        c.f = rawValues<float>(t.raw_data(), n);
      } else {
        STARLING_RETURN_IF_ERROR(sized(static_cast<std::size_t>(t.float_data_size())));
        c.f.assign(t.float_data().begin(), t.float_data().end());
      }
      return c;
    case onnx::TensorProto::DOUBLE: {
      c.isFloat = true;
      std::vector<double> d;
      if (raw) {
        STARLING_RETURN_IF_ERROR(sized(t.raw_data().size() / 8));
        d = rawValues<double>(t.raw_data(), n);
      } else {
        STARLING_RETURN_IF_ERROR(sized(static_cast<std::size_t>(t.double_data_size())));
        d.assign(t.double_data().begin(), t.double_data().end());
      }
      c.f.assign(d.begin(), d.end());
      return c;
    }
    case onnx::TensorProto::INT64:
      if (raw) {
        STARLING_RETURN_IF_ERROR(sized(t.raw_data().size() / 8));
        c.i = rawValues<int64_t>(t.raw_data(), n);
      } else {
        STARLING_RETURN_IF_ERROR(sized(static_cast<std::size_t>(t.int64_data_size())));
        c.i.assign(t.int64_data().begin(), t.int64_data().end());
      }
      return c;
    case onnx::TensorProto::INT32:
      if (raw) {
        STARLING_RETURN_IF_ERROR(sized(t.raw_data().size() / 4));
        auto v = rawValues<int32_t>(t.raw_data(), n);
        c.i.assign(v.begin(), v.end());
      } else {
        STARLING_RETURN_IF_ERROR(sized(static_cast<std::size_t>(t.int32_data_size())));
        c.i.assign(t.int32_data().begin(), t.int32_data().end());
      }
      return c;
    case onnx::TensorProto::BOOL:
      if (raw) {
        STARLING_RETURN_IF_ERROR(sized(t.raw_data().size()));
        auto v = rawValues<uint8_t>(t.raw_data(), n);
        c.i.assign(v.begin(), v.end());
      } else {
        STARLING_RETURN_IF_ERROR(sized(static_cast<std::size_t>(t.int32_data_size())));
        c.i.assign(t.int32_data().begin(), t.int32_data().end());
      }
      return c;
    default:
      return Status(StatusCode::kUnsupported, where + ": tensor '" + t.name() + "' has element type " +
                                                  std::to_string(t.data_type()) +
                                                  " (float, double, int32 and int64 are supported)");
  }
}

const onnx::AttributeProto* attr(const onnx::NodeProto& node, std::string_view name) {
  for (const auto& a : node.attribute())
    if (a.name() == name) return &a;
  return nullptr;
}
int64_t attrInt(const onnx::NodeProto& node, std::string_view name, int64_t fallback) {
  const auto* a = attr(node, name);
  return a ? a->i() : fallback;
}
std::optional<std::vector<int64_t>> attrInts(const onnx::NodeProto& node, std::string_view name) {
  const auto* a = attr(node, name);
  if (!a) return std::nullopt;
  return std::vector<int64_t>(a->ints().begin(), a->ints().end());
}

// The activations of one example on the network's path.
// An image is C x H x W, or C x L (oneD: an N x C x L value, h = 1).
struct Act {
  bool image = false;
  int c = 0, h = 1, w = 1;
  bool oneD = false;
  std::size_t size() const { return static_cast<std::size_t>(c) * h * w; }
  std::string text() const {
    if (!image) return std::to_string(c);
    return oneD ? std::to_string(c) + "x" + std::to_string(w)
                : std::to_string(c) + "x" + std::to_string(h) + "x" + std::to_string(w);
  }
  // The value's dimensions after the batch.
  std::vector<int64_t> dims() const {
    if (!image) return {c};
    if (oneD) return {c, w};
    return {c, h, w};
  }
};

// kGru: in = features, k = steps, out = hidden; w = W then R, b = B (ONNX's layout).
// kEmbed: in = rows of the table, out = its width, k = 1 for a mean; w = the table.
enum class StageKind {
  kDense,
  kConv,
  kPool,
  kRelu,
  kTanh,
  kSigmoid,
  kFlatten,
  kSoftmax,
  kAvgPool,
  kGlobalPool,
  kBatchNorm,
  kLeakyRelu,
  kClip,
  kGru,
  kEmbed
};

struct Stage {
  Stage(StageKind kind_, std::string where_, int out_ = 0, int in_ = 0, int k_ = 0)
      : kind(kind_), where(std::move(where_)), out(out_), in(in_), k(k_) {}
  StageKind kind;
  std::string where;  // label() of the node
  int out = 0, in = 0, k = 0;
  int stride = 1, pad = 0;  // conv
  float alpha = 0.0f;       // leaky relu slope, clip's lower bound
  float beta = 0.0f;        // clip's upper bound
  float eps = 0.0f;         // batch normalization
  // Starling's layout: dense {out, in}, conv {out, in, k, k} (or {out, in, k}), batch
  // normalization gamma (w), beta (b), running mean and variance.
  std::vector<float> w, b, mean, var;
  bool biasSet = false;
  bool fromMatMul = false;
  bool resetBefore = false;  // kGru: linear_before_reset 0 (gru:lbr0:)
};

constexpr const char* kNotSupported =
    "is not supported (Starling reads Gemm, MatMul, Add, Relu, LeakyRelu, Tanh, Sigmoid, Clip, Conv, MaxPool, "
    "AveragePool, GlobalAveragePool, BatchNormalization, Flatten, Reshape, Dropout, Identity, Softmax, LogSoftmax, "
    "and on the graph's input a GRU, or Gather + ReduceSum/ReduceMean; see docs/model.md)";

Status unsupported(const std::string& where, const std::string& why) {
  return {StatusCode::kUnsupported, where + ": " + why};
}

class Importer {
 public:
  explicit Importer(const onnx::ModelProto& m) : model_(m), graph_(m.graph()) {}

  Result<ImportedModel> run();

 private:
  Status readInput();
  Status glueNode(const onnx::NodeProto& node, const std::string& where);
  Status pathNode(const onnx::NodeProto& node, const std::string& where);
  Status gemm(const onnx::NodeProto& node, const std::string& where);
  Status matmul(const onnx::NodeProto& node, const std::string& where);
  Status add(const onnx::NodeProto& node, const std::string& where);
  Status conv(const onnx::NodeProto& node, const std::string& where);
  Status pool(const onnx::NodeProto& node, const std::string& where);
  Status batchNorm(const onnx::NodeProto& node, const std::string& where);
  Status clip(const onnx::NodeProto& node, const std::string& where);
  Status reshape(const onnx::NodeProto& node, const std::string& where);
  // Sequences and embeddings: the values between a rank-3 (or token id) input and the
  // first N x features value, tracked by their axes.
  bool readSequenceInput(const onnx::ValueInfoProto& in);
  std::vector<int64_t> seqShape(const std::string& value) const;
  Status constantOfShape(const onnx::NodeProto& node, const std::string& where);
  Status seqNode(const onnx::NodeProto& node, const std::string& where);
  Status gru(const onnx::NodeProto& node, const std::string& where, const std::string& x);
  Status embedding(const onnx::NodeProto& node, const std::string& where);
  Status reduceTokens(const onnx::NodeProto& node, const std::string& where, const std::string& x);
  Status seqResult(const onnx::NodeProto& node, std::string axes);
  std::optional<std::vector<int64_t>> seqIndices(const onnx::NodeProto& node, int input, const char* attribute);
  Result<std::string> sequenceBody(const std::vector<Stage>& st, ImportedModel& r) const;
  Result<ImportedModel> finish();
  const Const* constant(const std::string& name) const {
    auto it = consts_.find(name);
    return it == consts_.end() ? nullptr : &it->second;
  }

  const onnx::ModelProto& model_;
  const onnx::GraphProto& graph_;
  std::map<std::string, Const> consts_;
  std::map<std::string, std::vector<int64_t>> glue_;  // evaluated shape values
  std::set<std::string> glueReshapeOnly_;             // glue outputs (must feed Reshape shapes only)
  std::map<std::string, Act> path_;                   // values on the network's path and their shapes
  std::string input_;
  int inputRank_ = 0;  // set when the input is neither N x features nor N x C x H x W
  Act inputAct_;
  std::string current_;
  Act act_;
  std::vector<Stage> stages_;
  std::vector<std::string> notes_;
  // Axes of the sequence values, one letter each: N batch, T steps, F features, H hidden
  // units, D directions (1), 1 a kept axis of size 1, L tokens, E embedding width;
  // before the GRU the input's axes are a, b, c (its dimensions 0, 1, 2).
  std::map<std::string, std::string> axes_;
  std::vector<int64_t> seqInputDims_;  // -1: not a fixed size
  int seqSteps_ = 0, seqFeatures_ = 0, seqHidden_ = 0, embedWidth_ = 0;
  std::set<std::string> gruOutputs_;  // the GRU's outputs, until one of them is read
  std::set<std::string> zeros_;       // ConstantOfShape values that are all zero
};

Status Importer::readInput() {
  for (const auto& t : graph_.initializer()) {
    auto c = readTensor(t, "initializer");
    if (!c) return c.status();
    consts_[t.name()] = std::move(*c);
  }
  std::vector<const onnx::ValueInfoProto*> inputs;
  for (const auto& in : graph_.input())
    if (!consts_.count(in.name())) inputs.push_back(&in);
  if (inputs.size() != 1)
    return Status(StatusCode::kUnsupported, "the graph has " + std::to_string(inputs.size()) +
                                                " inputs besides its weights; Starling's models take one");
  const onnx::ValueInfoProto& in = *inputs[0];
  input_ = in.name();
  if (readSequenceInput(in)) return {};
  if (!in.type().has_tensor_type() || in.type().tensor_type().elem_type() != onnx::TensorProto::FLOAT)
    return Status(StatusCode::kUnsupported, "input '" + input_ + "' must be a float tensor");
  const auto& shape = in.type().tensor_type().shape();
  auto fixed = [&shape](int i) { return shape.dim(i).has_dim_value() && shape.dim(i).dim_value() > 0; };
  if (shape.dim_size() < 2 || shape.dim_size() > 4 || (shape.dim_size() == 3 && !(fixed(1) && fixed(2)))) {
    // Refused at the first node that reads it, so that an unsupported op (an LSTM's
    // T x N x features input; N x C x L with a variable dimension) is named first.
    inputRank_ = shape.dim_size();
    current_ = input_;
    path_[input_] = act_;
    return {};
  }
  std::vector<int64_t> dims;
  for (int i = 1; i < shape.dim_size(); ++i) {
    if (!shape.dim(i).has_dim_value() || shape.dim(i).dim_value() <= 0)
      return Status(StatusCode::kUnsupported, "input '" + input_ + "': dimension " + std::to_string(i) +
                                                  " must be a fixed size (only the batch, dimension 0, may vary)");
    dims.push_back(shape.dim(i).dim_value());
  }
  for (int64_t d : dims)
    if (d > (1 << 16)) return Status(StatusCode::kUnsupported, "input '" + input_ + "': a dimension is too large");
  if (shape.dim_size() == 2) {
    inputAct_ = Act{false, static_cast<int>(dims[0]), 1, 1};
  } else if (shape.dim_size() == 3) {  // N x C x L: a 1-D series
    inputAct_ = Act{true, static_cast<int>(dims[0]), 1, static_cast<int>(dims[1]), true};
  } else {
    inputAct_ = Act{true, static_cast<int>(dims[0]), static_cast<int>(dims[1]), static_cast<int>(dims[2])};
  }
  current_ = input_;
  act_ = inputAct_;
  path_[input_] = act_;
  return {};
}

Status Importer::glueNode(const onnx::NodeProto& node, const std::string& where) {
  const std::string& op = node.op_type();
  auto value = [&](int i) -> const std::vector<int64_t>* {
    if (i >= node.input_size()) return nullptr;
    auto g = glue_.find(node.input(i));
    if (g != glue_.end()) return &g->second;
    const Const* c = constant(node.input(i));
    if (c && !c->isFloat) {
      glue_[node.input(i)] = c->i;
      return &glue_[node.input(i)];
    }
    return nullptr;
  };
  std::vector<int64_t> out;
  if (op == "Constant") {
    const auto* v = attr(node, "value");
    if (v) {
      auto c = readTensor(v->t(), where);
      if (!c) return c.status();
      if (!c->isFloat) glue_[node.output(0)] = c->i;
      consts_[node.output(0)] = std::move(*c);
      return {};
    }
    if (const auto* vi = attr(node, "value_ints")) {
      out.assign(vi->ints().begin(), vi->ints().end());
    } else if (const auto* one = attr(node, "value_int")) {
      out = {one->i()};
    } else {
      return unsupported(where, "only 'value', 'value_ints' and 'value_int' constants are supported");
    }
    Const c;
    c.dims = {static_cast<int64_t>(out.size())};
    c.i = out;
    consts_[node.output(0)] = c;
    glue_[node.output(0)] = out;
    glueReshapeOnly_.insert(node.output(0));
    return {};
  }
  if (op == "Shape") {
    auto p = path_.find(node.input(0));
    if (p == path_.end()) return unsupported(where, "takes the shape of a value that is not on the network's path");
    if (axes_.count(node.input(0))) {
      out = seqShape(node.input(0));
    } else {
      out = {kBatch};
      for (int64_t d : p->second.dims())
        out.push_back(d);
    }
    const int64_t rank = static_cast<int64_t>(out.size());
    int64_t start = attrInt(node, "start", 0), end = attrInt(node, "end", rank);
    if (start < 0) start += rank;
    if (end < 0) end += rank;
    start = std::clamp<int64_t>(start, 0, rank);
    end = std::clamp<int64_t>(end, start, rank);
    out = std::vector<int64_t>(out.begin() + start, out.begin() + end);
  } else if (op == "Identity" || op == "Cast" || op == "Unsqueeze" || op == "Squeeze") {
    const auto* v = value(0);
    if (!v) return unsupported(where, "its input is not a shape Starling can compute");
    out = *v;
  } else if (op == "Gather") {
    const auto* v = value(0);
    const auto* idx = value(1);
    if (!v || !idx || attrInt(node, "axis", 0) != 0)
      return unsupported(where, "only gathers from a shape along axis 0 are supported");
    for (int64_t i : *idx) {
      if (i < 0) i += static_cast<int64_t>(v->size());
      if (i < 0 || i >= static_cast<int64_t>(v->size())) return unsupported(where, "index out of range");
      out.push_back((*v)[static_cast<std::size_t>(i)]);
    }
  } else if (op == "Concat") {
    for (int i = 0; i < node.input_size(); ++i) {
      const auto* v = value(i);
      if (!v) return unsupported(where, "its input '" + node.input(i) + "' is not a shape Starling can compute");
      out.insert(out.end(), v->begin(), v->end());
    }
  } else if (op == "ConstantOfShape") {
    return constantOfShape(node, where);
  } else {
    return unsupported(where,
                       "is not supported off the network's path (only Constant, Shape, Gather, Unsqueeze, Squeeze, "
                       "Concat, Cast and Identity computing a Reshape's shape are)");
  }
  glue_[node.output(0)] = out;
  glueReshapeOnly_.insert(node.output(0));
  return {};
}

Status Importer::gemm(const onnx::NodeProto& node, const std::string& where) {
  if (act_.image) return unsupported(where, "needs a flat input (N x features): add a Flatten before it");
  if (node.input(0) != current_) return unsupported(where, "the network's input must be its first operand (A)");
  const Const* b = node.input_size() > 1 ? constant(node.input(1)) : nullptr;
  if (!b || !b->isFloat || b->dims.size() != 2)
    return unsupported(where, "its weight B must be a 2-D float initializer");
  const Const* c = node.input_size() > 2 && !node.input(2).empty() ? constant(node.input(2)) : nullptr;
  if (node.input_size() > 2 && !node.input(2).empty() && (!c || !c->isFloat))
    return unsupported(where, "its bias C must be a float initializer");
  if (const auto* a = attr(node, "alpha"); a && a->f() != 1.0f)
    return unsupported(where, "alpha " + std::to_string(a->f()) + " is not supported (only 1)");
  if (const auto* a = attr(node, "beta"); a && a->f() != 1.0f && c)
    return unsupported(where, "beta " + std::to_string(a->f()) + " is not supported (only 1)");
  if (attrInt(node, "transA", 0) != 0) return unsupported(where, "transA=1 is not supported");
  const bool transB = attrInt(node, "transB", 0) != 0;
  const int out = static_cast<int>(transB ? b->dims[0] : b->dims[1]);
  const int in = static_cast<int>(transB ? b->dims[1] : b->dims[0]);
  if (static_cast<std::size_t>(in) != act_.size())
    return unsupported(where, "its weight takes " + std::to_string(in) + " inputs but receives " + act_.text());
  Stage s{StageKind::kDense, where, out, in};
  if (transB) {
    s.w = b->f;
  } else {  // B is {in, out}: Starling stores {out, in}
    s.w.resize(b->f.size());
    for (int o = 0; o < out; ++o)
      for (int i = 0; i < in; ++i)
        s.w[static_cast<std::size_t>(o) * in + i] = b->f[static_cast<std::size_t>(i) * out + o];
  }
  s.b.assign(static_cast<std::size_t>(out), 0.0f);
  if (c) {
    if (c->f.size() == static_cast<std::size_t>(out))
      s.b = c->f;
    else if (c->f.size() == 1)
      s.b.assign(static_cast<std::size_t>(out), c->f[0]);
    else
      return unsupported(
          where, "its bias C has " + std::to_string(c->f.size()) + " values for " + std::to_string(out) + " outputs");
    s.biasSet = true;
  }
  stages_.push_back(std::move(s));
  act_ = Act{false, out, 1, 1};
  return {};
}

Status Importer::matmul(const onnx::NodeProto& node, const std::string& where) {
  if (act_.image) return unsupported(where, "needs a flat input (N x features): add a Flatten before it");
  if (node.input(0) != current_) return unsupported(where, "the network's input must be its first operand");
  const Const* b = constant(node.input(1));
  if (!b || !b->isFloat || b->dims.size() != 2)
    return unsupported(where, "its second operand must be a 2-D float initializer {in, out}");
  const int in = static_cast<int>(b->dims[0]);
  const int out = static_cast<int>(b->dims[1]);
  if (static_cast<std::size_t>(in) != act_.size())
    return unsupported(where, "its weight takes " + std::to_string(in) + " inputs but receives " + act_.text());
  Stage s{StageKind::kDense, where, out, in};
  s.w.resize(b->f.size());
  for (int o = 0; o < out; ++o)
    for (int i = 0; i < in; ++i)
      s.w[static_cast<std::size_t>(o) * in + i] = b->f[static_cast<std::size_t>(i) * out + o];
  s.b.assign(static_cast<std::size_t>(out), 0.0f);
  s.fromMatMul = true;
  stages_.push_back(std::move(s));
  act_ = Act{false, out, 1, 1};
  return {};
}

Status Importer::add(const onnx::NodeProto& node, const std::string& where) {
  const std::string& other = node.input(0) == current_ ? node.input(1) : node.input(0);
  const Const* c = constant(other);
  if (!c || !c->isFloat) return unsupported(where, "only a dense layer's bias (a float initializer) can be added");
  if (stages_.empty() || (stages_.back().kind != StageKind::kDense && stages_.back().kind != StageKind::kEmbed) ||
      stages_.back().biasSet)
    return unsupported(where, "only a bias directly after MatMul (or a Gemm without C) can be added");
  Stage& s = stages_.back();
  if (c->f.size() != static_cast<std::size_t>(s.out) && c->f.size() != 1)
    return unsupported(
        where, "its bias has " + std::to_string(c->f.size()) + " values for " + std::to_string(s.out) + " outputs");
  if (c->f.size() == 1)
    s.b.assign(static_cast<std::size_t>(s.out), c->f[0]);
  else
    s.b = c->f;
  s.biasSet = true;
  return {};
}

// The window of a Conv or a pool on the current image: square (one size for every
// spatial axis), equal strides, and the same padding on every side. auto_pad VALID is
// no padding; SAME_* is refused.
struct WindowAttrs {
  int k = 0, stride = 1, pad = 0;
};
Result<WindowAttrs> windowAttrs(const onnx::NodeProto& node, const std::string& where, const Act& act,
                                const std::vector<int64_t>& kernel, const char* what) {
  const std::size_t rank = act.oneD ? 1 : 2;
  if (kernel.size() != rank || std::any_of(kernel.begin(), kernel.end(), [&](int64_t v) { return v != kernel[0]; }))
    return unsupported(where, "kernel " + ints(kernel) + " is not a square " + std::to_string(rank) +
                                  "-D window on its " + act.text() + " input");
  WindowAttrs a;
  a.k = static_cast<int>(kernel[0]);
  const std::string autoPad = attr(node, "auto_pad") ? attr(node, "auto_pad")->s() : "NOTSET";
  if (autoPad != "NOTSET" && autoPad != "VALID")
    return unsupported(where, "auto_pad " + autoPad + " is not supported: give explicit symmetric pads");
  if (auto p = attrInts(node, "pads"); p && !p->empty()) {
    if (std::any_of(p->begin(), p->end(), [&](int64_t v) { return v != (*p)[0]; }))
      return unsupported(where, "pads " + ints(*p) + " are not supported: Starling's " + what +
                                    " pads every side of every axis equally");
    a.pad = static_cast<int>((*p)[0]);
  }
  if (auto s = attrInts(node, "strides"); s && !s->empty()) {
    if (std::any_of(s->begin(), s->end(), [&](int64_t v) { return v != (*s)[0]; }))
      return unsupported(where, "strides " + ints(*s) + " differ between axes: Starling's " + what + " has one stride");
    a.stride = static_cast<int>((*s)[0]);
  }
  if (auto d = attrInts(node, "dilations"); d && std::any_of(d->begin(), d->end(), [](int64_t v) { return v != 1; }))
    return unsupported(where, "dilations " + ints(*d) + " are not supported");
  if (a.k < 1 || a.stride < 1 || a.pad < 0 || a.pad >= a.k)
    return unsupported(where, "kernel " + std::to_string(a.k) + ", stride " + std::to_string(a.stride) + ", pads " +
                                  std::to_string(a.pad) + " are not supported (padding must be below the kernel)");
  if (a.k > (act.oneD ? 1 : act.h + 2 * a.pad) && !act.oneD)
    return unsupported(where, "its window is larger than its " + act.text() + " input");
  if (a.k > act.w + 2 * a.pad) return unsupported(where, "its window is larger than its " + act.text() + " input");
  return a;
}

Status Importer::conv(const onnx::NodeProto& node, const std::string& where) {
  if (!act_.image) return unsupported(where, "needs an N x C x H x W or N x C x L input");
  const Const* w = constant(node.input(1));
  const std::size_t rank = act_.oneD ? 3 : 4;
  if (!w || !w->isFloat || w->dims.size() != rank)
    return unsupported(where, "its weight must be a " + std::to_string(rank) + "-D float initializer");
  if (attrInt(node, "group", 1) != 1) return unsupported(where, "grouped convolutions are not supported");
  const int out = static_cast<int>(w->dims[0]);
  const int in = static_cast<int>(w->dims[1]);
  if (in != act_.c)
    return unsupported(where, "its weight takes " + std::to_string(in) + " channels but receives " + act_.text());
  auto win = windowAttrs(node, where, act_, std::vector<int64_t>(w->dims.begin() + 2, w->dims.end()), "convolution");
  if (!win) return win.status();
  if (auto ks = attrInts(node, "kernel_shape"); ks && *ks != std::vector<int64_t>(w->dims.begin() + 2, w->dims.end()))
    return unsupported(where, "kernel_shape " + ints(*ks) + " disagrees with its weight");
  Stage s{StageKind::kConv, where, out, in, win->k};
  s.stride = win->stride;
  s.pad = win->pad;
  s.w = w->f;
  s.b.assign(static_cast<std::size_t>(out), 0.0f);
  if (node.input_size() > 2 && !node.input(2).empty()) {
    const Const* b = constant(node.input(2));
    if (!b || !b->isFloat || b->f.size() != static_cast<std::size_t>(out))
      return unsupported(where, "its bias must be a float initializer of " + std::to_string(out) + " values");
    s.b = b->f;
  }
  stages_.push_back(std::move(s));
  const int h = act_.oneD ? 1 : (act_.h + 2 * win->pad - win->k) / win->stride + 1;
  act_ = Act{true, out, h, (act_.w + 2 * win->pad - win->k) / win->stride + 1, act_.oneD};
  return {};
}

// MaxPool and AveragePool with stride = window and no padding (so AveragePool's
// count_include_pad changes nothing).
Status Importer::pool(const onnx::NodeProto& node, const std::string& where) {
  if (!act_.image) return unsupported(where, "needs an N x C x H x W or N x C x L input");
  const bool average = node.op_type() == "AveragePool";
  auto kernel = attrInts(node, "kernel_shape").value_or(std::vector<int64_t>{});
  auto win = windowAttrs(node, where, act_, kernel, "pooling");
  if (!win) return win.status();
  const int k = win->k;
  if (win->pad != 0)
    return unsupported(where,
                       "pads " + ints(*attrInts(node, "pads")) + " are not supported: Starling's pooling is unpadded");
  if (win->stride != k)
    return unsupported(where, "strides " + ints(attrInts(node, "strides").value_or(std::vector<int64_t>{1})) +
                                  " are not supported: Starling pools with stride = window (" + std::to_string(k) +
                                  ")");
  if (attrInt(node, "storage_order", 0) != 0) return unsupported(where, "storage_order 1 is not supported");
  const int h = act_.oneD ? 1 : act_.h / k;
  if (attrInt(node, "ceil_mode", 0) != 0 && ((!act_.oneD && act_.h % k != 0) || act_.w % k != 0))
    return unsupported(where, "ceil_mode 1 on a " + act_.text() + " input is not supported: Starling floors");
  stages_.push_back(Stage{average ? StageKind::kAvgPool : StageKind::kPool, where, 0, 0, k});
  act_ = Act{true, act_.c, h, act_.w / k, act_.oneD};
  return {};
}

// Inference-mode batch normalization: scale, B, input_mean and input_var are float
// initializers of one value per channel.
Status Importer::batchNorm(const onnx::NodeProto& node, const std::string& where) {
  if (attrInt(node, "training_mode", 0) != 0) return unsupported(where, "training_mode 1 is not supported");
  if (node.output_size() > 1)
    return unsupported(where, "its running statistics outputs (training mode) are not supported");
  const int c = act_.c;
  Stage s{StageKind::kBatchNorm, where, c, c};
  std::vector<float>* into[4] = {&s.w, &s.b, &s.mean, &s.var};
  const char* names[4] = {"scale", "B", "input_mean", "input_var"};
  for (int i = 0; i < 4; ++i) {
    const Const* t = node.input_size() > i + 1 ? constant(node.input(i + 1)) : nullptr;
    if (!t || !t->isFloat || t->f.size() != static_cast<std::size_t>(c))
      return unsupported(where, std::string("its ") + names[i] + " must be a float initializer of " +
                                    std::to_string(c) + " values (one per channel)");
    *into[i] = t->f;
  }
  s.eps = attr(node, "epsilon") ? attr(node, "epsilon")->f() : 1e-5f;
  if (!(s.eps > 0.0f) || !std::isfinite(s.eps)) return unsupported(where, "epsilon must be > 0");
  if (attr(node, "momentum"))
    notes_.push_back(where + ": momentum ignored (Starling's running statistics move by 0.1 per training step)");
  stages_.push_back(std::move(s));
  return {};
}

// Clip with both bounds: min and max inputs (opset 11+, initializers or Constants) or
// attributes (opset 6). Clip to [0, inf) is a ReLU.
Status Importer::clip(const onnx::NodeProto& node, const std::string& where) {
  auto bound = [&](int input, const char* name, std::optional<float>& v) -> Status {
    if (const auto* a = attr(node, name)) v = a->f();
    if (node.input_size() <= input || node.input(input).empty()) return {};
    const Const* t = constant(node.input(input));
    if (!t || !t->isFloat || t->f.size() != 1)
      return unsupported(where, std::string("its ") + name + " must be a float scalar initializer or Constant");
    v = t->f[0];
    return {};
  };
  std::optional<float> lo, hi;
  STARLING_RETURN_IF_ERROR(bound(1, "min", lo));
  STARLING_RETURN_IF_ERROR(bound(2, "max", hi));
  if (lo && *lo == 0.0f && !hi) {
    stages_.push_back(Stage{StageKind::kRelu, where});
    return {};
  }
  if (!lo || !hi || !std::isfinite(*lo) || !std::isfinite(*hi))
    return unsupported(where, std::string("its ") + (!lo || !std::isfinite(*lo) ? "min" : "max") +
                                  " is missing or infinite: Starling's clip has two finite bounds");
  if (*lo > *hi) return unsupported(where, "min > max");
  Stage s{StageKind::kClip, where};
  s.alpha = *lo;
  s.beta = *hi;
  stages_.push_back(std::move(s));
  return {};
}

Status Importer::reshape(const onnx::NodeProto& node, const std::string& where) {
  if (attrInt(node, "allowzero", 0) != 0) return unsupported(where, "allowzero 1 is not supported");
  auto g = glue_.find(node.input(1));
  std::vector<int64_t> target;
  if (g != glue_.end()) {
    target = g->second;
  } else if (const Const* c = constant(node.input(1)); c && !c->isFloat) {
    target = c->i;
  } else {
    return unsupported(where, "its shape is not a constant or a shape computation Starling can follow");
  }
  std::vector<int64_t> in = {kBatch};
  for (int64_t d : act_.dims())
    in.push_back(d);
  // Resolve 0 (copy) and the batch symbol; the one -1 takes what is left.
  bool ok = target.size() == 2;
  int64_t known = 1;
  int inferred = -1;
  std::vector<int64_t> out = target;
  for (std::size_t i = 0; ok && i < out.size(); ++i) {
    if (out[i] == 0) out[i] = i < in.size() ? in[i] : kUnknown;
    if (out[i] == -1) {
      if (inferred >= 0) ok = false;
      inferred = static_cast<int>(i);
    } else if (out[i] == kUnknown || (out[i] < 0 && out[i] != kBatch)) {
      ok = false;
    } else if (out[i] != kBatch) {
      known *= out[i];
    }
  }
  const auto flat = static_cast<int64_t>(act_.size());
  if (ok) {
    // Flattening keeps the batch first: [batch, -1], [-1, features], [batch, features],
    // or a fixed batch of 1 ([1, -1], [1, features]).
    const bool batchFirst = out[0] == kBatch || out[0] == 1;
    if (batchFirst && (out[1] == -1 || out[1] == flat))
      ok = true;
    else if (out[0] == -1 && out[1] == flat)
      ok = true;
    else
      ok = false;
  }
  if (!ok)
    return unsupported(where, "reshapes " + act_.text() + " to " + ints(target) + ": only a flatten to N x " +
                                  std::to_string(flat) + " is supported");
  if (act_.image) stages_.push_back(Stage{StageKind::kFlatten, where});
  act_ = Act{false, static_cast<int>(flat), 1, 1};
  return {};
}

Status Importer::pathNode(const onnx::NodeProto& node, const std::string& where) {
  const std::string& op = node.op_type();
  // The chain: one input on the path, and it is the latest value.
  int onPath = 0;
  for (const auto& in : node.input())
    if (path_.count(in)) ++onPath;
  if (onPath != 1 || std::find(node.input().begin(), node.input().end(), current_) == node.input().end())
    return unsupported(where, "the graph branches or joins here; Starling's networks are a single chain of layers");
  static const std::set<std::string> kSupported = {"Gemm",
                                                   "MatMul",
                                                   "Add",
                                                   "Relu",
                                                   "Tanh",
                                                   "Sigmoid",
                                                   "Conv",
                                                   "MaxPool",
                                                   "Flatten",
                                                   "Reshape",
                                                   "Dropout",
                                                   "Identity",
                                                   "Softmax",
                                                   "LogSoftmax",
                                                   "AveragePool",
                                                   "GlobalAveragePool",
                                                   "BatchNormalization",
                                                   "LeakyRelu",
                                                   "Clip"};
  if (!kSupported.count(op)) return unsupported(where, kNotSupported);
  if (inputRank_ != 0)
    return unsupported(where, "reads the input '" + input_ + "' of rank " + std::to_string(inputRank_) +
                                  ": Starling reads N x features, N x C x L or N x C x H x W");
  if (op == "Gemm") {
    STARLING_RETURN_IF_ERROR(gemm(node, where));
  } else if (op == "MatMul") {
    STARLING_RETURN_IF_ERROR(matmul(node, where));
  } else if (op == "Add") {
    STARLING_RETURN_IF_ERROR(add(node, where));
  } else if (op == "Relu") {
    stages_.push_back(Stage{StageKind::kRelu, where});
  } else if (op == "Tanh") {
    stages_.push_back(Stage{StageKind::kTanh, where});
  } else if (op == "Sigmoid") {
    stages_.push_back(Stage{StageKind::kSigmoid, where});
  } else if (op == "Conv") {
    STARLING_RETURN_IF_ERROR(conv(node, where));
  } else if (op == "MaxPool" || op == "AveragePool") {
    if (node.output_size() > 1 && !node.output(1).empty())
      return unsupported(where, "its Indices output is not supported");
    STARLING_RETURN_IF_ERROR(pool(node, where));
  } else if (op == "GlobalAveragePool") {
    if (!act_.image) return unsupported(where, "needs an N x C x H x W or N x C x L input");
    stages_.push_back(Stage{StageKind::kGlobalPool, where});
    act_ = Act{true, act_.c, 1, 1, act_.oneD};
  } else if (op == "BatchNormalization") {
    STARLING_RETURN_IF_ERROR(batchNorm(node, where));
  } else if (op == "LeakyRelu") {
    Stage st{StageKind::kLeakyRelu, where};
    st.alpha = attr(node, "alpha") ? attr(node, "alpha")->f() : 0.01f;
    stages_.push_back(std::move(st));
  } else if (op == "Clip") {
    STARLING_RETURN_IF_ERROR(clip(node, where));
  } else if (op == "Flatten") {
    if (attrInt(node, "axis", 1) != 1)
      return unsupported(where, "axis " + std::to_string(attrInt(node, "axis", 1)) + " is not supported (only 1)");
    if (act_.image) stages_.push_back(Stage{StageKind::kFlatten, where});
    act_ = Act{false, static_cast<int>(act_.size()), 1, 1};
  } else if (op == "Reshape") {
    if (node.input(0) != current_) return unsupported(where, "reshapes its shape input");
    STARLING_RETURN_IF_ERROR(reshape(node, where));
  } else if (op == "Dropout") {
    if (node.input_size() > 2 && !node.input(2).empty()) {
      const Const* t = constant(node.input(2));
      if (!t || t->i.empty() || t->i[0] != 0) return unsupported(where, "training_mode must be false");
    }
    if (node.output_size() > 1 && !node.output(1).empty())
      return unsupported(where, "its mask output is not supported");
    notes_.push_back(where + " read as the identity (Starling trains without dropout)");
  } else if (op == "Identity") {
  } else if (op == "Softmax" || op == "LogSoftmax") {
    const int64_t axis = attrInt(node, "axis", -1);
    if (act_.image || (axis != -1 && axis != 1))
      return unsupported(where,
                         "only a softmax over the outputs of a dense layer (axis 1 of N x outputs) is supported");
    stages_.push_back(Stage{StageKind::kSoftmax, where});
  } else {
    return unsupported(where, kNotSupported);
  }
  current_ = node.output(0);
  path_[current_] = act_;
  return {};
}

Result<ImportedModel> Importer::run() {
  STARLING_RETURN_IF_ERROR(readInput());
  for (int i = 0; i < graph_.node_size(); ++i) {
    const onnx::NodeProto& node = graph_.node(i);
    const std::string where = label(node, i);
    if (!node.domain().empty() && node.domain() != "ai.onnx")
      return unsupported(where, "domain '" + node.domain() + "' is not supported (only the default ONNX domain)");
    bool onPath = false;
    for (const auto& in : node.input())
      if (path_.count(in)) onPath = true;
    const bool onSequence = std::any_of(node.input().begin(), node.input().end(),
                                        [&](const std::string& in) { return axes_.count(in) > 0; });
    if (node.op_type() == "Shape" || !onPath) {
      STARLING_RETURN_IF_ERROR(glueNode(node, where));
    } else if (onSequence) {
      STARLING_RETURN_IF_ERROR(seqNode(node, where));
    } else {
      STARLING_RETURN_IF_ERROR(pathNode(node, where));
    }
  }
  // Glue may feed only the shape input of a Reshape (or other glue).
  for (int i = 0; i < graph_.node_size(); ++i) {
    const onnx::NodeProto& node = graph_.node(i);
    const bool glueNode = node.op_type() == "Shape" || !path_.count(node.output_size() ? node.output(0) : "");
    for (int j = 0; j < node.input_size(); ++j) {
      if (!glueReshapeOnly_.count(node.input(j))) continue;
      if (glueNode || (node.op_type() == "Reshape" && j == 1) || (node.op_type() == "Clip" && j >= 1)) continue;
      return unsupported(label(node, i), "uses the computed value '" + node.input(j) +
                                             "' as data; Starling follows shape computations only into a Reshape");
    }
  }
  if (graph_.output_size() != 1)
    return Status(StatusCode::kUnsupported,
                  "the graph has " + std::to_string(graph_.output_size()) + " outputs; Starling's models have one");
  if (graph_.output(0).name() != current_)
    return Status(StatusCode::kUnsupported, "the graph's output '" + graph_.output(0).name() +
                                                "' is not the end of the chain of layers from its input");
  return finish();
}

// A float as a spec token writes it: shortest fixed notation, 'n' for minus.
std::string specFloat(float v) {
  char buf[64];
  auto [ptr, ec] = std::to_chars(buf, buf + sizeof buf, std::abs(v), std::chars_format::fixed);
  return (v < 0.0f ? "n" : "") + std::string(buf, ec == std::errc() ? ptr : buf);
}

const char* actName(StageKind k) {
  return k == StageKind::kTanh ? "tanh" : k == StageKind::kSigmoid ? "sigmoid" : "relu";
}
bool isAct(StageKind k) {
  return k == StageKind::kRelu || k == StageKind::kTanh || k == StageKind::kSigmoid;
}

Result<ImportedModel> Importer::finish() {
  ImportedModel r;
  std::vector<Stage> st = std::move(stages_);
  // The head: a final softmax, or a sigmoid on one output.
  if (!st.empty() && st.back().kind == StageKind::kSoftmax) {
    r.head = OutputHead::kSoftmax;
    r.notes.push_back(st.back().where + " read as the softmax of the cross-entropy head");
    st.pop_back();
  } else if (st.size() >= 2 && st.back().kind == StageKind::kSigmoid && st[st.size() - 2].kind == StageKind::kDense &&
             st[st.size() - 2].out == 1) {
    r.head = OutputHead::kSigmoid;
    r.notes.push_back(st.back().where + " read as the sigmoid of the logistic head");
    st.pop_back();
  }
  for (const Stage& s : st)
    if (s.kind == StageKind::kSoftmax) return unsupported(s.where, "a softmax is supported only at the end");
  if (st.empty() || st.back().kind != StageKind::kDense)
    return unsupported(st.empty() ? std::string("the graph") : st.back().where,
                       "Starling's networks end in a dense layer without activation (the loss head comes from the "
                       "task: a final Softmax, or a Sigmoid on one output, is read as the head)");
  // An mlp is dense layers and activations; anything else takes a cnn spec.
  const bool convolutional = std::any_of(st.begin(), st.end(), [](const Stage& s) {
    return s.kind != StageKind::kDense && s.kind != StageKind::kFlatten && !isAct(s.kind);
  });
  std::string body;
  if (st.front().kind == StageKind::kGru || st.front().kind == StageKind::kEmbed) {
    auto b = sequenceBody(st, r);
    if (!b) return b.status();
    body = *b;
  } else if (!convolutional) {
    // [Flatten] Dense (act Dense)*, one activation throughout.
    std::size_t i = 0;
    if (i < st.size() && st[i].kind == StageKind::kFlatten) ++i;
    std::optional<StageKind> act;
    std::vector<int> widths;
    const Stage* prev = nullptr;
    bool needDense = true;
    for (; i < st.size(); ++i) {
      const Stage& s = st[i];
      if (s.kind == StageKind::kDense) {
        if (!needDense)
          return unsupported(s.where, "follows the dense layer " + prev->where +
                                          " without an activation; Starling's mlp has relu, tanh or sigmoid between "
                                          "every two dense layers");
        widths.push_back(s.out);
        needDense = false;
        prev = &s;
      } else if (isAct(s.kind) && !needDense) {
        if (act && *act != s.kind)
          return unsupported(s.where, std::string("mixes activations: Starling's mlp uses one (") + actName(*act) +
                                          ") between all its layers");
        act = s.kind;
        needDense = true;
      } else {
        return unsupported(s.where, "cannot be placed here: an mlp is dense layers with one activation between them");
      }
    }
    r.inputDim = inputAct_.size();
    if (widths.size() == 1) {
      body = "linear:" + std::to_string(r.inputDim) + "-" + std::to_string(widths[0]);
    } else {
      body = "mlp:";
      if (act == StageKind::kTanh) body += "tanh:";
      if (act == StageKind::kSigmoid) body += "sigmoid:";
      body += std::to_string(r.inputDim);
      for (int w : widths)
        body += "-" + std::to_string(w);
    }
  } else {
    body = "cnn:" + inputAct_.text();
    r.inputDim = inputAct_.size();
    bool flat = !inputAct_.image;
    std::vector<bool> consumed(st.size(), false);  // ReLUs read as part of a conv or dense layer
    for (std::size_t i = 0; i < st.size(); ++i) {
      const Stage& s = st[i];
      const bool last = i + 1 == st.size();
      if (consumed[i]) continue;
      if (s.kind == StageKind::kConv) {
        // The conv's ReLU: the next stage, or one after max pools (they commute).
        std::size_t j = i + 1;
        while (j < st.size() && st[j].kind == StageKind::kPool)
          ++j;
        const bool relu = j < st.size() && st[j].kind == StageKind::kRelu;
        if (relu) consumed[j] = true;
        body += "-c" + std::to_string(s.out) + "k" + std::to_string(s.k);
        if (s.stride != 1) body += "s" + std::to_string(s.stride);
        if (s.pad != 0) body += "z" + std::to_string(s.pad);
        if (!relu) body += "l";
      } else if (s.kind == StageKind::kPool || s.kind == StageKind::kAvgPool || s.kind == StageKind::kGlobalPool) {
        body += s.kind == StageKind::kPool      ? "-p" + std::to_string(s.k)
                : s.kind == StageKind::kAvgPool ? "-a" + std::to_string(s.k)
                                                : std::string("-g");
      } else if (s.kind == StageKind::kFlatten) {
        flat = true;
      } else if (s.kind == StageKind::kBatchNorm) {
        body += s.eps == 1e-5f ? std::string("-b") : "-be" + specFloat(s.eps);
      } else if (isAct(s.kind)) {
        body += s.kind == StageKind::kRelu ? "-r" : s.kind == StageKind::kTanh ? "-t" : "-sg";
      } else if (s.kind == StageKind::kLeakyRelu) {
        body += "-lr" + specFloat(s.alpha);
      } else if (s.kind == StageKind::kClip) {
        body += "-clip" + specFloat(s.alpha) + "_" + specFloat(s.beta);
      } else if (s.kind == StageKind::kDense) {
        if (!flat) return unsupported(s.where, "needs a Flatten (or Reshape) before it");
        const bool relu = !last && st[i + 1].kind == StageKind::kRelu;
        if (!last && !relu)
          return unsupported(s.where, "is not followed by a ReLU: the hidden dense layers of Starling's cnn are");
        body += last ? "-" + std::to_string(s.out) : "-f" + std::to_string(s.out);
        if (relu) consumed[i + 1] = true;
      } else {
        return unsupported(s.where, "cannot be placed here in a cnn");
      }
    }
  }
  r.outputs = st.back().out;
  r.body = body;
  std::string suffix;
  if (r.outputs == 1) suffix = r.head == OutputHead::kSigmoid ? "/logistic" : "/mse";
  if (r.outputs == 1 && r.head == OutputHead::kSoftmax)
    return unsupported(st.back().where, "a softmax over one output is constant");
  if (r.outputs > 1 && r.head == OutputHead::kSigmoid)
    return unsupported(st.back().where, "a sigmoid over several outputs (multi-label) is not supported");
  // Starling's export records the spec with its head: keep that head when the body agrees.
  for (const auto& p : model_.metadata_props())
    if (p.key() == "starling.spec" && p.value().substr(0, p.value().find('/')) == body) {
      auto m = model::Model::fromSpec(p.value());
      if (m && m->numClasses() == r.outputs) suffix = p.value().substr(std::min(p.value().size(), body.size()));
    }
  r.spec = body + suffix;
  auto m = model::Model::fromSpec(r.spec);
  if (!m) return m.status().withContext("the spec read from the graph");
  // The parameters, layer by layer in the layout's order (weight, then bias).
  const auto& tensors = m->layout().tensors();
  std::size_t t = 0;
  r.params.reserve(m->numParams());
  for (const Stage& s : st) {
    if (s.kind == StageKind::kGru) {  // W and R in w, B in b
      if (t + 2 >= tensors.size() || tensors[t].size + tensors[t + 1].size != s.w.size() ||
          tensors[t + 2].size != s.b.size())
        return Status(StatusCode::kInternal, "the layout of '" + r.spec + "' does not match " + s.where);
      r.params.insert(r.params.end(), s.w.begin(), s.w.end());
      r.params.insert(r.params.end(), s.b.begin(), s.b.end());
      t += 3;
      continue;
    }
    if (s.kind != StageKind::kDense && s.kind != StageKind::kConv && s.kind != StageKind::kBatchNorm &&
        s.kind != StageKind::kEmbed)
      continue;
    std::vector<const std::vector<float>*> parts = {&s.w, &s.b};
    if (s.kind == StageKind::kBatchNorm) parts = {&s.w, &s.b, &s.mean, &s.var};
    for (const std::vector<float>* part : parts) {
      if (t >= tensors.size() || tensors[t].size != part->size())
        return Status(StatusCode::kInternal, "the layout of '" + r.spec + "' does not match " + s.where);
      r.params.insert(r.params.end(), part->begin(), part->end());
      ++t;
    }
  }
  if (t != tensors.size() || r.params.size() != m->numParams())
    return Status(StatusCode::kInternal, "the layout of '" + r.spec + "' does not match the graph's weights");
  for (auto& n : notes_)
    r.notes.push_back(std::move(n));
  return r;
}

// ---- Sequences (GRU) and embedding bags (Gather + ReduceSum/ReduceMean) ----

bool Importer::readSequenceInput(const onnx::ValueInfoProto& in) {
  if (!in.type().has_tensor_type()) return false;
  const auto& tt = in.type().tensor_type();
  const int rank = tt.shape().dim_size();
  const bool ids = tt.elem_type() == onnx::TensorProto::INT64 || tt.elem_type() == onnx::TensorProto::INT32;
  // A rank-3 float input is a GRU's sequence in a graph with a GRU, otherwise a cnn's
  // N x C x L series (readInput).
  const bool gru = std::any_of(graph_.node().begin(), graph_.node().end(),
                               [](const onnx::NodeProto& n) { return n.op_type() == "GRU"; });
  if (!(ids && rank == 2) && !(tt.elem_type() == onnx::TensorProto::FLOAT && rank == 3 && gru)) return false;
  for (int i = 0; i < rank; ++i) {
    const auto& d = tt.shape().dim(i);
    seqInputDims_.push_back(d.has_dim_value() && d.dim_value() > 0 ? d.dim_value() : -1);
  }
  current_ = input_;
  path_[input_] = Act{};
  axes_[input_] = ids ? "NL" : "abc";
  return true;
}

std::vector<int64_t> Importer::seqShape(const std::string& value) const {
  std::vector<int64_t> out;
  for (char a : axes_.at(value)) {
    switch (a) {
      case 'N':
        out.push_back(kBatch);
        break;
      case 'T':
        out.push_back(seqSteps_);
        break;
      case 'F':
        out.push_back(seqFeatures_);
        break;
      case 'H':
        out.push_back(seqHidden_);
        break;
      case 'E':
        out.push_back(embedWidth_);
        break;
      case 'L':
        out.push_back(seqInputDims_[1] > 0 ? seqInputDims_[1] : kUnknown);
        break;
      case 'a':
      case 'b':
      case 'c': {  // the input's own dimensions: a symbolic one is the batch
        const int64_t d = seqInputDims_[static_cast<std::size_t>(a - 'a')];
        out.push_back(d > 0 ? d : kBatch);
        break;
      }
      default:  // D and 1
        out.push_back(1);
    }
  }
  return out;
}

Status Importer::constantOfShape(const onnx::NodeProto& node, const std::string& where) {
  if (const auto* v = attr(node, "value")) {
    auto c = readTensor(v->t(), where);
    if (!c) return c.status();
    if (std::any_of(c->f.begin(), c->f.end(), [](float f) { return f != 0.0f; }) ||
        std::any_of(c->i.begin(), c->i.end(), [](int64_t i) { return i != 0; }))
      return unsupported(where, "only a ConstantOfShape of zeros (a GRU's initial state) is supported");
  }
  zeros_.insert(node.output(0));
  return {};
}

std::optional<std::vector<int64_t>> Importer::seqIndices(const onnx::NodeProto& node, int input,
                                                         const char* attribute) {
  if (node.input_size() > input && !node.input(input).empty()) {
    const Const* c = constant(node.input(input));
    if (!c || c->isFloat) return std::nullopt;
    return c->i;
  }
  return attrInts(node, attribute);
}

Status Importer::seqResult(const onnx::NodeProto& node, std::string axes) {
  const std::string& out = node.output(0);
  current_ = out;
  if (axes.size() == 2 && axes[0] == 'N' && (axes[1] == 'H' || axes[1] == 'E')) {
    act_ = Act{false, axes[1] == 'H' ? seqHidden_ : embedWidth_, 1, 1};
    path_[out] = act_;
    return {};
  }
  path_[out] = Act{};
  axes_[out] = std::move(axes);
  return {};
}

Status Importer::seqNode(const onnx::NodeProto& node, const std::string& where) {
  const std::string& op = node.op_type();
  int onPath = 0;
  std::string x;
  for (const auto& in : node.input())
    if (path_.count(in)) {
      ++onPath;
      x = in;
    }
  if (onPath != 1 || (x != current_ && !gruOutputs_.count(x)))
    return unsupported(where, "the graph branches or joins here; Starling's networks are a single chain of layers");
  gruOutputs_.clear();
  const std::string ax = axes_.at(x);
  auto axisOf = [&](int64_t a) { return a < 0 ? a + static_cast<int64_t>(ax.size()) : a; };
  auto sizeOne = [](char a) { return a == 'D' || a == '1'; };
  if (op == "GRU") return gru(node, where, x);
  if (op == "Gather" && x == node.input(1)) return embedding(node, where);
  if (op == "ReduceSum" || op == "ReduceMean") return reduceTokens(node, where, x);
  if (op == "Identity") return seqResult(node, ax);
  if (op == "Transpose") {
    std::vector<int64_t> perm = attrInts(node, "perm").value_or(std::vector<int64_t>{});
    if (perm.empty())
      for (std::size_t i = ax.size(); i-- > 0;)
        perm.push_back(static_cast<int64_t>(i));
    std::string out;
    for (int64_t p : perm) {
      if (p < 0 || p >= static_cast<int64_t>(ax.size()))
        return unsupported(where, "perm " + ints(perm) + " is invalid");
      out += ax[static_cast<std::size_t>(p)];
    }
    return seqResult(node, out);
  }
  if (op == "Squeeze") {
    auto axes = seqIndices(node, 1, "axes");
    std::string out;
    for (std::size_t i = 0; i < ax.size(); ++i) {
      const bool listed = axes ? std::any_of(axes->begin(), axes->end(),
                                             [&](int64_t a) { return axisOf(a) == static_cast<int64_t>(i); })
                               : sizeOne(ax[i]);
      if (listed && !sizeOne(ax[i]))
        return unsupported(where, "squeezes axis " + std::to_string(i) + ", which Starling cannot show is of size 1");
      if (!listed) out += ax[i];
    }
    return seqResult(node, out);
  }
  if (op == "Gather" || op == "Slice") {
    // The last step of Y (axis T), or the one direction (axis D) of Y or Y_h.
    int64_t axis = 0, first = 0, end = std::numeric_limits<int64_t>::max();
    bool scalar = false;
    if (op == "Gather") {
      axis = axisOf(attrInt(node, "axis", 0));
      const Const* idx = constant(node.input(1));
      if (!idx || idx->isFloat || idx->count() != 1)
        return unsupported(where, "its indices must be one constant integer (the last step)");
      first = idx->i[0];
      end = first == -1 ? std::numeric_limits<int64_t>::max() : first + 1;
      scalar = idx->dims.empty();
    } else {
      auto starts = seqIndices(node, 1, "starts"), ends = seqIndices(node, 2, "ends");
      auto axes = seqIndices(node, 3, "axes").value_or(std::vector<int64_t>{0});
      auto steps = seqIndices(node, 4, "steps").value_or(std::vector<int64_t>{1});
      if (!starts || !ends || starts->size() != 1 || ends->size() != 1 || axes.size() != 1 ||
          steps != std::vector<int64_t>{1})
        return unsupported(where, "only a constant slice of one axis with step 1 (the last step) is supported");
      axis = axisOf(axes[0]);
      first = (*starts)[0];
      end = (*ends)[0];
    }
    if (axis < 0 || axis >= static_cast<int64_t>(ax.size())) return unsupported(where, "its axis is out of range");
    const char a = ax[static_cast<std::size_t>(axis)];
    const int64_t size = a == 'T' ? seqSteps_ : sizeOne(a) ? 1 : -1;
    if (first < 0) first += size;
    if (end < 0) end += size;
    if (size < 0 || first != size - 1 || end < size)
      return unsupported(where, "selects [" + std::to_string(first) + ", " + std::to_string(end) + ") of axis " +
                                    std::to_string(axis) +
                                    ": Starling's gru feeds only the last step's hidden state to its dense layers");
    std::string out = ax;
    if (scalar)
      out.erase(static_cast<std::size_t>(axis), 1);
    else
      out[static_cast<std::size_t>(axis)] = a == 'T' ? '1' : a;
    return seqResult(node, out);
  }
  if (op == "Flatten" && attrInt(node, "axis", 1) == 1 && ax[0] == 'N') {
    std::string rest;
    for (std::size_t i = 1; i < ax.size(); ++i)
      if (!sizeOne(ax[i])) rest += ax[i];
    if (rest == "H" || rest == "E") return seqResult(node, "N" + rest);
  }
  return unsupported(where,
                     "is not supported here (on a sequence Starling reads Transpose, one GRU, then Squeeze, Gather, "
                     "Slice or Flatten down to the last hidden state; on token ids, Gather from an embedding table "
                     "then ReduceSum or ReduceMean over the tokens; see docs/model.md)");
}

Status Importer::gru(const onnx::NodeProto& node, const std::string& where, const std::string& x) {
  const std::string& ax = axes_.at(x);
  if (!stages_.empty() || ax.size() != 3 || ax.find_first_not_of("abc") != std::string::npos)
    return unsupported(where, "its input X must be the graph's N x steps x features input, or a Transpose of it");
  const int64_t layout = attrInt(node, "layout", 0);
  if (layout != 0 && layout != 1) return unsupported(where, "layout " + std::to_string(layout) + " is invalid");
  // X is [steps, batch, features] (layout 0) or [batch, steps, features] (layout 1).
  const int64_t steps = seqInputDims_[static_cast<std::size_t>(ax[layout == 0 ? 0 : 1] - 'a')];
  const int64_t features = seqInputDims_[static_cast<std::size_t>(ax[2] - 'a')];
  if (steps <= 0 || features <= 0 || steps * features > (1 << 24))
    return unsupported(where, "its input X needs a fixed number of steps and of features (only the batch may vary)");
  const std::string direction = attr(node, "direction") ? attr(node, "direction")->s() : "forward";
  if (direction != "forward")
    return unsupported(where, "direction '" + direction + "' is not supported (only forward)");
  const int64_t linearBeforeReset = attrInt(node, "linear_before_reset", 0);
  if (linearBeforeReset != 0 && linearBeforeReset != 1)
    return unsupported(where, "linear_before_reset " + std::to_string(linearBeforeReset) + " is invalid (0 or 1)");
  if (const auto* a = attr(node, "activations")) {
    std::vector<std::string> acts(a->strings().begin(), a->strings().end());
    if (acts != std::vector<std::string>{"Sigmoid", "Tanh"})
      return unsupported(where, "activations other than the default (Sigmoid, Tanh) are not supported");
  }
  for (const char* name : {"activation_alpha", "activation_beta", "clip"})
    if (attr(node, name)) return unsupported(where, std::string(name) + " is not supported");
  const int64_t hidden = attrInt(node, "hidden_size", 0);
  const Const* w = node.input_size() > 1 ? constant(node.input(1)) : nullptr;
  const Const* r = node.input_size() > 2 ? constant(node.input(2)) : nullptr;
  const Const* b = node.input_size() > 3 && !node.input(3).empty() ? constant(node.input(3)) : nullptr;
  if (hidden <= 0 || hidden > (1 << 16)) return unsupported(where, "hidden_size must be set (1 to 65536)");
  if (!w || !w->isFloat || w->dims != std::vector<int64_t>{1, 3 * hidden, features})
    return unsupported(where, "its weight W must be a float initializer of shape [1," + std::to_string(3 * hidden) +
                                  "," + std::to_string(features) + "]");
  if (!r || !r->isFloat || r->dims != std::vector<int64_t>{1, 3 * hidden, hidden})
    return unsupported(where, "its weight R must be a float initializer of shape [1," + std::to_string(3 * hidden) +
                                  "," + std::to_string(hidden) + "]");
  if (node.input_size() > 3 && !node.input(3).empty() &&
      (!b || !b->isFloat || b->dims != std::vector<int64_t>{1, 6 * hidden}))
    return unsupported(where, "its bias B must be a float initializer of shape [1," + std::to_string(6 * hidden) + "]");
  if (node.input_size() > 4 && !node.input(4).empty())
    return unsupported(where,
                       "sequence_lens is not supported: every sequence has all " + std::to_string(steps) + " steps");
  if (node.input_size() > 5 && !node.input(5).empty()) {
    const Const* h0 = constant(node.input(5));
    const bool zero = zeros_.count(node.input(5)) ||
                      (h0 && h0->isFloat && std::all_of(h0->f.begin(), h0->f.end(), [](float v) { return v == 0.0f; }));
    if (!zero) return unsupported(where, "initial_h must be absent or zero");
  }
  Stage s{StageKind::kGru, where, static_cast<int>(hidden), static_cast<int>(features), static_cast<int>(steps)};
  s.w = w->f;
  s.w.insert(s.w.end(), r->f.begin(), r->f.end());
  s.b = b ? b->f : std::vector<float>(static_cast<std::size_t>(6 * hidden), 0.0f);
  s.resetBefore = linearBeforeReset == 0;
  stages_.push_back(std::move(s));
  seqSteps_ = static_cast<int>(steps);
  seqFeatures_ = static_cast<int>(features);
  seqHidden_ = static_cast<int>(hidden);
  const std::string yAxes = layout == 0 ? "TDNH" : "NTDH";
  const std::string hAxes = layout == 0 ? "DNH" : "NDH";
  current_.clear();
  for (int i = 0; i < node.output_size() && i < 2; ++i) {
    if (node.output(i).empty()) continue;
    path_[node.output(i)] = Act{};
    axes_[node.output(i)] = i == 0 ? yAxes : hAxes;
    gruOutputs_.insert(node.output(i));
    if (current_.empty()) current_ = node.output(i);
  }
  if (node.output_size() > 2) return unsupported(where, "has more than two outputs");
  return {};
}

Status Importer::embedding(const onnx::NodeProto& node, const std::string& where) {
  const Const* table = constant(node.input(0));
  if (axes_.at(node.input(1)) != "NL" || attrInt(node, "axis", 0) != 0 || !table || !table->isFloat ||
      table->dims.size() != 2)
    return unsupported(where,
                       "only an embedding lookup is supported: Gather(axis 0) of rows of a 2-D float table by the "
                       "graph's N x tokens input of ids");
  if (table->dims[0] > (1 << 24) || table->dims[1] > (1 << 16))
    return unsupported(where, "its table of " + ints(table->dims) + " is too large");
  Stage s{StageKind::kEmbed, where, static_cast<int>(table->dims[1]), static_cast<int>(table->dims[0]), 0};
  s.w = table->f;
  s.b.assign(static_cast<std::size_t>(s.out), 0.0f);
  stages_.push_back(std::move(s));
  embedWidth_ = static_cast<int>(table->dims[1]);
  return seqResult(node, "NLE");
}

Status Importer::reduceTokens(const onnx::NodeProto& node, const std::string& where, const std::string& x) {
  const std::string& ax = axes_.at(x);
  const std::size_t tokens = ax.find('L');
  auto axes = seqIndices(node, 1, "axes");
  if (axes && axes->size() == 1 && (*axes)[0] < 0) (*axes)[0] += static_cast<int64_t>(ax.size());
  if (tokens == std::string::npos || stages_.empty() || stages_.back().kind != StageKind::kEmbed || !axes ||
      *axes != std::vector<int64_t>{static_cast<int64_t>(tokens)})
    return unsupported(where,
                       "only a sum or mean over the token axis of an embedding lookup is supported (an embedding bag)");
  stages_.back().k = node.op_type() == "ReduceMean" ? 1 : 0;
  std::string out = ax;
  if (attrInt(node, "keepdims", 1) != 0)
    out[tokens] = '1';
  else
    out.erase(tokens, 1);
  return seqResult(node, out);
}

// gru:<T>x<F>-<H>(-<width>)*-<outputs> or embedbag:[mean:][act:]<rows>-<width>-...
Result<std::string> Importer::sequenceBody(const std::vector<Stage>& st, ImportedModel& r) const {
  const Stage& first = st.front();
  std::string body;
  std::size_t i = 1;
  std::optional<StageKind> act;
  if (first.kind == StageKind::kGru) {
    body = std::string(first.resetBefore ? "gru:lbr0:" : "gru:") + std::to_string(first.k) + "x" +
           std::to_string(first.in) + "-" + std::to_string(first.out);
    r.inputDim = static_cast<std::size_t>(first.k) * first.in;
    act = StageKind::kRelu;
  } else {
    if (st.size() < 3 || !isAct(st[1].kind))
      return unsupported(st.size() > 1 ? st[1].where : first.where,
                         "Starling's embedbag has an activation (Relu, Tanh or Sigmoid) after the embedding bag, "
                         "then dense layers");
    act = st[1].kind;
    body = std::string("embedbag:") + (first.k ? "mean:" : "");
    if (act != StageKind::kRelu) body += std::string(actName(*act)) + ":";
    body += std::to_string(first.in) + "-" + std::to_string(first.out);
    r.inputDim = static_cast<std::size_t>(first.in);
    i = 2;
  }
  bool needDense = true;
  for (; i < st.size(); ++i) {
    const Stage& s = st[i];
    if (s.kind == StageKind::kDense && needDense) {
      body += "-" + std::to_string(s.out);
      needDense = false;
    } else if (s.kind == act && !needDense) {
      needDense = true;
    } else {
      return unsupported(s.where, std::string("cannot be placed here: after the ") +
                                      (first.kind == StageKind::kGru ? "GRU" : "embedding bag") +
                                      " Starling has dense layers with " + actName(*act) + " between them");
    }
  }
  return body;
}

}  // namespace

Result<ImportedModel> importOnnxBytes(std::string_view bytes, const std::string& name) {
  onnx::ModelProto model;
  if (bytes.size() > static_cast<std::size_t>(std::numeric_limits<int>::max()) ||
      !model.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())))
    return Status(StatusCode::kMalformed, name + ": not an ONNX model (the protobuf does not parse)");
  if (model.ir_version() > kMaxIrVersion)
    return Status(StatusCode::kUnsupported,
                  name + ": IR version " + std::to_string(model.ir_version()) + " is newer than Starling reads (IR " +
                      std::to_string(kMaxIrVersion) + ", opset " + std::to_string(kMaxOpset) +
                      "): export with opset_version=17 from a torch that writes IR 8, or convert it with "
                      "onnx.version_converter");
  for (const auto& o : model.opset_import()) {
    if (!o.domain().empty() && o.domain() != "ai.onnx")
      return Status(StatusCode::kUnsupported, name + ": operator set '" + o.domain() + "' is not supported");
    if (o.version() > kMaxOpset)
      return Status(StatusCode::kUnsupported, name + ": opset " + std::to_string(o.version()) +
                                                  " is newer than Starling reads (IR " + std::to_string(kMaxIrVersion) +
                                                  ", opset " + std::to_string(kMaxOpset) +
                                                  "): export with opset_version=17");
  }
  try {
    onnx::checker::check_model(model);
    onnx::shape_inference::InferShapes(model, onnx::OpSchemaRegistry::Instance(),
                                       onnx::ShapeInferenceOptions(true, 1, false));
  } catch (const std::exception& e) {
    return Status(StatusCode::kMalformed, name + ": the ONNX checker refuses it: " + e.what());
  }
  Importer importer(model);
  auto r = importer.run();
  if (!r) return Status(r.status().code(), name + ": " + r.status().message());
  return r;
}

Result<ImportedModel> importOnnx(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status(StatusCode::kNotFound, "cannot open ONNX file '" + path + "'");
  std::ostringstream buf;
  buf << in.rdbuf();
  std::string bytes = std::move(buf).str();
  if (bytes.size() > kMaxFileBytes) return Status(StatusCode::kOutOfRange, path + ": larger than 2 GiB");
  return importOnnxBytes(bytes, path);
}

Result<std::string> resolveImported(const ImportedModel& imported, data::TaskKind task, std::size_t inputDim,
                                    int numClasses, float huberDelta) {
  const std::string name(data::taskKindName(task));
  if (imported.head == OutputHead::kSoftmax && task != data::TaskKind::kClassification)
    return Status(StatusCode::kInvalidArgument,
                  "the ONNX graph ends in a softmax (class probabilities) but the task is " + name);
  if (imported.head == OutputHead::kSigmoid && task != data::TaskKind::kBinary)
    return Status(StatusCode::kInvalidArgument,
                  "the ONNX graph ends in a sigmoid (P(y=1), a binary task) but the task is " + name);
  if (inputDim == 0) inputDim = imported.inputDim;
  if (numClasses == 0) numClasses = imported.outputs;
  return model::resolveSpec(imported.body, task, inputDim, numClasses, huberDelta);
}

}  // namespace starling::onnxio
