// ONNX export: a Model as an IR 8 / opset 17 graph whose initializers are the layout's
// tensors under their Starling names (dense0.weight, conv1.bias, ...), so that import
// gives the same parameters bit for bit.
#include <onnx/checker.h>
#include <onnx/onnx_pb.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "starling/onnx/onnx.hpp"

namespace starling::onnxio {
namespace {

std::vector<std::string> splitOn(std::string_view s, char sep) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (true) {
    const std::size_t pos = s.find(sep, start);
    out.emplace_back(s.substr(start, pos == std::string_view::npos ? std::string_view::npos : pos - start));
    if (pos == std::string_view::npos) return out;
    start = pos + 1;
  }
}

class GraphWriter {
 public:
  GraphWriter(onnx::GraphProto& g, const model::Model& m) : g_(g), m_(m) {}

  // Adds a node reading the current value; returns its output's name.
  std::string node(const std::string& op, const std::string& name, std::vector<std::string> extraInputs = {}) {
    onnx::NodeProto* n = g_.add_node();
    n->set_op_type(op);
    n->set_name(name);
    n->add_input(current_);
    for (const auto& in : extraInputs)
      n->add_input(in);
    current_ = name + "_out";
    n->add_output(current_);
    last_ = n;
    return current_;
  }
  onnx::AttributeProto* attribute(const std::string& name, onnx::AttributeProto::AttributeType type) {
    onnx::AttributeProto* a = last_->add_attribute();
    a->set_name(name);
    a->set_type(type);
    return a;
  }
  void ints(const std::string& name, std::initializer_list<int64_t> values) {
    auto* a = attribute(name, onnx::AttributeProto::INTS);
    for (int64_t v : values)
      a->add_ints(v);
  }
  void integer(const std::string& name, int64_t v) { attribute(name, onnx::AttributeProto::INT)->set_i(v); }
  void real(const std::string& name, float v) { attribute(name, onnx::AttributeProto::FLOAT)->set_f(v); }
  // A window attribute: the value once per spatial axis (rank of them), or twice per
  // axis for pads.
  void window(const std::string& name, int rank, int64_t v) {
    auto* a = attribute(name, onnx::AttributeProto::INTS);
    for (int i = 0; i < rank; ++i)
      a->add_ints(v);
  }
  // A float scalar initializer that is not a parameter (a clip bound).
  void scalar(const std::string& name, float v) {
    onnx::TensorProto* p = g_.add_initializer();
    p->set_name(name);
    p->set_data_type(onnx::TensorProto::FLOAT);
    p->add_float_data(v);
  }

  // The layout tensor as an initializer (fp32, raw little-endian bytes).
  Status initializer(const std::string& name) {
    const model::TensorInfo* t = m_.layout().find(name);
    if (!t) return Status(StatusCode::kInternal, "model '" + m_.spec() + "' has no tensor '" + name + "'");
    onnx::TensorProto* p = g_.add_initializer();
    p->set_name(name);
    p->set_data_type(onnx::TensorProto::FLOAT);
    for (int d : t->shape)
      p->add_dims(d);
    p->set_raw_data(reinterpret_cast<const char*>(m_.params().data() + t->offset), t->size * sizeof(float));
    return {};
  }

  Status dense(int index, bool last) {
    const std::string name = "dense" + std::to_string(index);
    STARLING_RETURN_IF_ERROR(initializer(name + ".weight"));
    STARLING_RETURN_IF_ERROR(initializer(name + ".bias"));
    node("Gemm", name, {name + ".weight", name + ".bias"});
    integer("transB", 1);
    (void)last;
    return {};
  }

  std::string current_ = "input";

 private:
  onnx::GraphProto& g_;
  const model::Model& m_;
  onnx::NodeProto* last_ = nullptr;
};

// A float of a spec token: 'n' for minus.
float tokenFloat(std::string_view s) {
  const bool negative = !s.empty() && s[0] == 'n';
  const float v = std::stof(std::string(s.substr(negative ? 1 : 0)));
  return negative ? -v : v;
}

// The number after letter in a conv token (c16k3s2z1l), or fallback.
int64_t tokenPart(const std::string& t, char letter, int64_t fallback) {
  const std::size_t at = t.find(letter, 1);
  return at == std::string::npos ? fallback : std::stoll(t.substr(at + 1));
}

void setShape(onnx::ValueInfoProto* v, const std::string& name, std::initializer_list<int64_t> dims) {
  v->set_name(name);
  auto* tt = v->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(onnx::TensorProto::FLOAT);
  auto* shape = tt->mutable_shape();
  shape->add_dim()->set_dim_param("N");
  for (int64_t d : dims)
    shape->add_dim()->set_dim_value(d);
}

// ---- gru and embedbag ----

onnx::NodeProto* addNode(onnx::GraphProto& g, const std::string& op, const std::string& name,
                         std::initializer_list<std::string> inputs, std::initializer_list<std::string> outputs) {
  onnx::NodeProto* n = g.add_node();
  n->set_op_type(op);
  n->set_name(name);
  for (const auto& in : inputs)
    n->add_input(in);
  for (const auto& out : outputs)
    n->add_output(out);
  return n;
}

void intAttribute(onnx::NodeProto* n, const std::string& name, int64_t v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(v);
}

void intsAttribute(onnx::NodeProto* n, const std::string& name, std::initializer_list<int64_t> values) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INTS);
  for (int64_t v : values)
    a->add_ints(v);
}

// The layers of a gru or embedbag spec up to its last dense layer. gru: the input
// [N, T, F] is transposed to the GRU's [T, N, F]; Y_h [1, N, H] becomes [N, H] by
// Transpose and Flatten. embedbag: the input is [N, L] token ids; Gather of the rows
// of embed.weight, ReduceSum (or ReduceMean) over the L tokens, Add embed.bias.
Status sequenceGraph(onnx::GraphProto& g, GraphWriter& w, const std::string& kind, std::string rest) {
  const bool mean = rest.starts_with("mean:");
  if (mean) rest = rest.substr(5);
  const bool resetBefore = rest.starts_with("lbr0:");  // gru:lbr0: is linear_before_reset 0
  if (resetBefore) rest = rest.substr(5);
  std::string act = "Relu";
  if (rest.starts_with("tanh:")) act = "Tanh", rest = rest.substr(5);
  if (rest.starts_with("sigmoid:")) act = "Sigmoid", rest = rest.substr(8);
  const std::vector<std::string> tokens = splitOn(rest, '-');
  auto* in = g.add_input();
  in->set_name("input");
  auto* tt = in->mutable_type()->mutable_tensor_type();
  auto* shape = tt->mutable_shape();
  shape->add_dim()->set_dim_param("N");
  if (kind == "gru") {
    const std::vector<std::string> tf = splitOn(tokens[0], 'x');
    tt->set_elem_type(onnx::TensorProto::FLOAT);
    shape->add_dim()->set_dim_value(std::stoll(tf[0]));
    shape->add_dim()->set_dim_value(std::stoll(tf[1]));
    w.node("Transpose", "gru_time_major");
    w.ints("perm", {1, 0, 2});
    for (const char* t : {"gru.W", "gru.R", "gru.B"})
      STARLING_RETURN_IF_ERROR(w.initializer(t));
    onnx::NodeProto* n = addNode(g, "GRU", "gru", {w.current_, "gru.W", "gru.R", "gru.B"}, {"", "gru_h"});
    intAttribute(n, "hidden_size", std::stoll(tokens[1]));
    intAttribute(n, "linear_before_reset", resetBefore ? 0 : 1);
    w.current_ = "gru_h";
    w.node("Transpose", "gru_batch_first");
    w.ints("perm", {1, 0, 2});
    w.node("Flatten", "gru_last");
    w.integer("axis", 1);
  } else {
    tt->set_elem_type(onnx::TensorProto::INT64);
    shape->add_dim()->set_dim_param("L");
    STARLING_RETURN_IF_ERROR(w.initializer("embed.weight"));
    STARLING_RETURN_IF_ERROR(w.initializer("embed.bias"));
    addNode(g, "Gather", "embed", {"embed.weight", "input"}, {"embed_rows"});
    onnx::NodeProto* n = nullptr;
    if (mean) {
      n = addNode(g, "ReduceMean", "embed_mean", {"embed_rows"}, {"embed_bag"});
      intsAttribute(n, "axes", {1});
    } else {
      onnx::TensorProto* axes = g.add_initializer();
      axes->set_name("embed.axes");
      axes->set_data_type(onnx::TensorProto::INT64);
      axes->add_dims(1);
      axes->add_int64_data(1);
      n = addNode(g, "ReduceSum", "embed_sum", {"embed_rows", "embed.axes"}, {"embed_bag"});
    }
    intAttribute(n, "keepdims", 0);
    w.current_ = "embed_bag";
    w.node("Add", "embed_bias", {"embed.bias"});
    w.node(act, "embed_" + act);
  }
  for (std::size_t i = 2; i < tokens.size(); ++i) {
    const bool last = i + 1 == tokens.size();
    STARLING_RETURN_IF_ERROR(w.dense(static_cast<int>(i - 2), last));
    if (!last) w.node(act, act + std::to_string(i - 2));
  }
  return {};
}

}  // namespace

Result<std::string> exportOnnxBytes(const model::Model& m) {
  onnx::ModelProto proto;
  proto.set_ir_version(kMaxIrVersion);
  proto.set_producer_name("starling");
  proto.set_producer_version("0.1");
  proto.set_model_version(1);
  auto* opset = proto.add_opset_import();
  opset->set_domain("");
  opset->set_version(kMaxOpset);
  auto* meta = proto.add_metadata_props();
  meta->set_key("starling.spec");
  meta->set_value(m.spec());
  onnx::GraphProto& g = *proto.mutable_graph();
  g.set_name("starling");
  const std::string& spec = m.spec();
  proto.set_doc_string("Starling model " + spec);

  // The canonical spec (model.hpp): kind ":" [activation ":"] layers ["/" head].
  const std::string body = spec.substr(0, spec.find('/'));
  const std::size_t colon = body.find(':');
  const std::string kind = body.substr(0, colon);
  std::string rest = body.substr(colon + 1);
  std::string act = "Relu";
  if (rest.starts_with("tanh:")) act = "Tanh", rest = rest.substr(5);
  if (rest.starts_with("sigmoid:")) act = "Sigmoid", rest = rest.substr(8);
  const std::vector<std::string> tokens = splitOn(rest, '-');
  const std::vector<std::string> inShape = splitOn(tokens[0], 'x');

  GraphWriter w(g, m);
  const bool sequence = kind == "gru" || kind == "embedbag";
  if (sequence) {
    STARLING_RETURN_IF_ERROR(sequenceGraph(g, w, kind, body.substr(colon + 1)));
  } else if (kind == "cnn" && inShape.size() == 3) {
    setShape(g.add_input(), "input", {std::stoll(inShape[0]), std::stoll(inShape[1]), std::stoll(inShape[2])});
  } else if (kind == "cnn" && inShape.size() == 2) {  // a 1-D series: N x C x L
    setShape(g.add_input(), "input", {std::stoll(inShape[0]), std::stoll(inShape[1])});
  } else {
    setShape(g.add_input(), "input", {static_cast<int64_t>(m.inputDim())});
  }
  if (kind == "mlp" || kind == "linear") {
    if (inShape.size() == 3) {  // an image input read as its C x H x W features
      w.node("Flatten", "flatten");
      w.integer("axis", 1);
    }
    for (std::size_t i = 1; i < tokens.size(); ++i) {
      const bool last = i + 1 == tokens.size();
      STARLING_RETURN_IF_ERROR(w.dense(static_cast<int>(i - 1), last));
      if (!last)
        w.node(act, act == "Relu" ? "relu" + std::to_string(i - 1)
                                  : (act == "Tanh" ? "tanh" : "sigmoid") + std::to_string(i - 1));
    }
  } else if (kind == "cnn") {
    // The canonical cnn grammar (docs/model.md): one node (and its ReLU) per token.
    int convs = 0, pools = 0, denses = 0, norms = 0, acts = 0;
    bool flat = inShape.size() == 1;
    const int rank = inShape.size() == 2 ? 1 : 2;  // spatial axes
    for (std::size_t i = 1; i < tokens.size(); ++i) {
      const std::string& t = tokens[i];
      const bool last = i + 1 == tokens.size();
      const std::string act = "act" + std::to_string(acts);
      if (t == "r" || t == "t" || t == "sg") {
        w.node(t == "r" ? "Relu" : t == "t" ? "Tanh" : "Sigmoid", act);
        ++acts;
      } else if (t.starts_with("lr")) {
        w.node("LeakyRelu", act);
        w.real("alpha", tokenFloat(t.substr(2)));
        ++acts;
      } else if (t.starts_with("clip")) {
        const std::size_t us = t.find('_');
        w.scalar(act + ".min", tokenFloat(t.substr(4, us - 4)));
        w.scalar(act + ".max", tokenFloat(t.substr(us + 1)));
        w.node("Clip", act, {act + ".min", act + ".max"});
        ++acts;
      } else if (t == "b" || t.starts_with("be")) {
        const std::string name = "bn" + std::to_string(norms++);
        for (const char* part : {".weight", ".bias", ".running_mean", ".running_var"})
          STARLING_RETURN_IF_ERROR(w.initializer(name + part));
        w.node("BatchNormalization", name,
               {name + ".weight", name + ".bias", name + ".running_mean", name + ".running_var"});
        w.real("epsilon", t == "b" ? 1e-5f : tokenFloat(t.substr(2)));
        w.real("momentum", 0.9f);  // ONNX's momentum keeps 0.9 of the running value
      } else if (t == "g") {
        w.node("GlobalAveragePool", "pool" + std::to_string(pools++));
      } else if (t[0] == 'c') {
        const std::string name = "conv" + std::to_string(convs++);
        STARLING_RETURN_IF_ERROR(w.initializer(name + ".weight"));
        STARLING_RETURN_IF_ERROR(w.initializer(name + ".bias"));
        w.node("Conv", name, {name + ".weight", name + ".bias"});
        w.window("kernel_shape", rank, tokenPart(t, 'k', 0));
        w.window("strides", rank, tokenPart(t, 's', 1));
        w.window("pads", 2 * rank, tokenPart(t, 'z', 0));
        if (t.back() != 'l') w.node("Relu", name + "_relu");
      } else if (t[0] == 'p' || t[0] == 'a') {
        const int64_t p = std::stoll(t.substr(1));
        w.node(t[0] == 'p' ? "MaxPool" : "AveragePool", "pool" + std::to_string(pools++));
        w.window("kernel_shape", rank, p);
        w.window("strides", rank, p);
      } else {
        if (!flat) {
          w.node("Flatten", "flatten");
          w.integer("axis", 1);
          flat = true;
        }
        STARLING_RETURN_IF_ERROR(w.dense(denses, last));
        if (!last) w.node("Relu", "relu" + std::to_string(denses));
        ++denses;
      }
    }
  } else if (!sequence) {
    return Status(StatusCode::kUnsupported, "model '" + spec + "': no ONNX export for kind '" + kind + "'");
  }
  // The head's outputs, as Model::forward() returns them.
  switch (m.lossKind()) {
    case model::LossKind::kCrossEntropy:
      w.node("Softmax", "probabilities");
      w.integer("axis", 1);
      break;
    case model::LossKind::kLogistic:
      w.node("Sigmoid", "probability");
      break;
    case model::LossKind::kSquaredError:
    case model::LossKind::kHuber:
      break;
  }
  // Rename the last value "output".
  onnx::NodeProto* lastNode = g.mutable_node(g.node_size() - 1);
  lastNode->set_output(0, "output");
  setShape(g.add_output(), "output", {m.numClasses()});
  try {
    onnx::checker::check_model(proto);
  } catch (const std::exception& e) {
    return Status(StatusCode::kInternal, "model '" + spec + "': the ONNX checker refuses the export: " + e.what());
  }
  std::string bytes;
  if (!proto.SerializeToString(&bytes))
    return Status(StatusCode::kInternal, "model '" + spec + "': serializing the ONNX graph failed");
  return bytes;
}

Status exportOnnx(const model::Model& m, const std::string& path) {
  auto bytes = exportOnnxBytes(m);
  if (!bytes) return bytes.status();
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return Status(StatusCode::kIo, "cannot write '" + tmp + "'");
    out.write(bytes->data(), static_cast<std::streamsize>(bytes->size()));
    out.flush();
    if (!out) return Status(StatusCode::kIo, "writing '" + tmp + "' failed");
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) return Status(StatusCode::kIo, "renaming '" + tmp + "' to '" + path + "': " + ec.message());
  return {};
}

}  // namespace starling::onnxio
