#pragma once
// ONNX import and export of Starling models (coordinator only: clients never parse ONNX
// and do not link protobuf; they get the imported model as spec + round-0 weights).
//
// Import reads a graph that a Starling spec can express (docs/model.md, "ONNX": Gemm,
// MatMul+Add, Relu, Tanh, Sigmoid, LeakyRelu, two-sided Clip, 1-D or 2-D square Conv
// with one stride and symmetric padding, MaxPool and AveragePool with stride = window,
// GlobalAveragePool, inference-mode BatchNormalization, Flatten/Reshape to a flatten,
// Dropout and Identity as the identity, a final Softmax/LogSoftmax or single-output
// Sigmoid read as the loss head; a forward GRU with linear_before_reset 1 read up to its
// last hidden state; Gather from an embedding table + ReduceSum/ReduceMean over the
// tokens) and returns the
// spec and the parameters in Starling's layout. Anything else is refused with a message
// that names the node and its op type. Models newer than IR 8 / opset 17 (what
// ONNX 1.12 checks) are refused.
//
// Export writes a Model as an IR 8 / opset 17 graph: Gemm (transB = 1, the weights as
// the layout stores them), Relu/Tanh/Sigmoid/LeakyRelu/Clip, Conv, MaxPool,
// AveragePool, GlobalAveragePool, BatchNormalization, Flatten, GRU, Gather +
// ReduceSum/ReduceMean (an embedbag's input is then N x L token ids), then the head's
// output as Model::forward() returns it: Softmax probabilities (cross-entropy), P(y=1) =
// Sigmoid(z) (logistic), the prediction (mse, huber). Importing an exported file gives
// the same spec and bit-identical parameters.

#include <string>
#include <string_view>
#include <vector>

#include "starling/data/task_kind.hpp"
#include "starling/model/model.hpp"
#include "starling/util/status.hpp"

namespace starling::onnxio {

// What ends the imported graph after its last dense layer.
enum class OutputHead {
  kNone,     // raw outputs (logits, or a regression's prediction)
  kSoftmax,  // Softmax or LogSoftmax: class probabilities
  kSigmoid,  // Sigmoid on one output: P(y = 1)
};

struct ImportedModel {
  // The spec without a loss suffix ("mlp:784-128-10", "cnn:1x28x28-c8k5-p2-10"): what
  // model::resolveSpec() completes with the task's head.
  std::string body;
  // A complete spec with the head the graph implies: cross-entropy for >= 2 outputs,
  // /logistic for one output ending in Sigmoid, /mse for one raw output (or the head
  // Starling's export recorded in the file's metadata, "starling.spec").
  std::string spec;
  std::vector<float> params;  // in the layout of Model::fromSpec(spec)
  OutputHead head = OutputHead::kNone;
  std::size_t inputDim = 0;
  int outputs = 0;
  std::vector<std::string> notes;  // nodes read as the identity or as the head, for the log
};

// Reads and imports an ONNX file. kNotFound for a missing file; kUnsupported for a
// newer IR or opset and for ops and attributes Starling cannot express; kMalformed for a
// file the ONNX checker rejects.
Result<ImportedModel> importOnnx(const std::string& path);
// The same from the serialized ModelProto; `name` is used in messages.
Result<ImportedModel> importOnnxBytes(std::string_view bytes, const std::string& name);

// The imported model's spec for a task: model::resolveSpec() on its body, after checking
// that the graph's own head fits the task (a final Softmax is classification, a final
// Sigmoid binary). inputDim and numClasses come from the evaluation data when there is
// some, else from the model itself (pass 0 for both).
Result<std::string> resolveImported(const ImportedModel& imported, data::TaskKind task, std::size_t inputDim,
                                    int numClasses, float huberDelta);

// Writes the model as ONNX (IR 8, opset 17) after onnx::checker accepts it; the file is
// written to path + ".tmp" and renamed over path.
Status exportOnnx(const model::Model& model, const std::string& path);
// The serialized ModelProto.
Result<std::string> exportOnnxBytes(const model::Model& model);

constexpr int64_t kMaxIrVersion = 8;
constexpr int64_t kMaxOpset = 17;

}  // namespace starling::onnxio
