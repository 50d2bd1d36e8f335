#pragma once
// The ONNX conformance harness: runs the single-node tests of the ONNX test data
// (Debian's libonnx-testdata, data/node/test_*/{model.onnx, test_data_set_0/*.pb})
// through Starling's layer kernels and compares with the expected output.
//
// Each supported op has one runner, registered by op type from any .cpp file linked
// into test-onnx-conformance:
//
//   Outcome runRelu(const NodeCase& c) { ... return Outcome::output(...); }
//   const Register kRelu("Relu", runRelu);
//
// A runner maps the node's attributes and inputs onto a Starling layer and returns its
// output, or Outcome::skip("why") when the node uses something Starling does not
// support (an attribute value, an element type, a rank). The driver (conformance.cpp)
// walks every test directory, runs the cases of registered ops, prints one line per
// case (PASS/FAIL with the largest difference, SKIP with the reason) and fails when a
// case that ran disagrees.
//
// Runners reach the kernels through the model library's private detail API
// (common/model/network.hpp): this test specifies the kernels themselves, not a spec.

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "network.hpp"

namespace starling::conformance {

// A float tensor from a TensorProto (float, double, int32 and int64 are converted).
struct Tensor {
  std::vector<int64_t> dims;
  std::vector<float> values;
  std::size_t count() const;
  int64_t dim(int i) const { return i < static_cast<int>(dims.size()) ? dims[static_cast<std::size_t>(i)] : 1; }
  int rank() const { return static_cast<int>(dims.size()); }
};

// Parses a serialized TensorProto; an empty string on success, else why not.
std::string parseTensor(const std::string& bytes, Tensor& out);

// One node test: the graph's single node, its inputs by name and the expected output.
struct NodeCase {
  std::string name;  // the directory name, e.g. "test_relu"
  onnx::ModelProto model;
  std::map<std::string, Tensor> values;  // graph inputs by name (input_N.pb is graph input N)
  Tensor expected;                       // output_0.pb
  const onnx::NodeProto& node() const { return model.graph().node(0); }
  // The node's input i, or null when it is absent or omitted ("").
  const Tensor* input(int i) const;
};

// What a runner returns: the op's output, or the reason it did not run.
struct Outcome {
  bool ran = false;
  std::string skipReason;
  Tensor result;
  static Outcome skip(std::string why) {
    Outcome o;
    o.skipReason = std::move(why);
    return o;
  }
  static Outcome output(Tensor t) {
    Outcome o;
    o.ran = true;
    o.result = std::move(t);
    return o;
  }
};

using Runner = Outcome (*)(const NodeCase&);

// The registered runners by op type.
std::map<std::string, Runner>& runners();
struct Register {
  Register(const char* opType, Runner runner) { runners()[opType] = runner; }
};

// Attribute readers: the value, or fallback when the node does not set it.
const onnx::AttributeProto* attribute(const onnx::NodeProto& node, std::string_view name);
int64_t attrInt(const onnx::NodeProto& node, std::string_view name, int64_t fallback);
float attrFloat(const onnx::NodeProto& node, std::string_view name, float fallback);
std::vector<int64_t> attrInts(const onnx::NodeProto& node, std::string_view name);
std::string attrString(const onnx::NodeProto& node, std::string_view name, std::string fallback);
// The names of the attributes set on the node that are not in known: "" when all are
// known, else e.g. "attribute 'dilations'" for a skip reason.
std::string unknownAttributes(const onnx::NodeProto& node, std::initializer_list<std::string_view> known);

// Runs one layer on batch examples of x (batch x layer.in.size() floats) with the
// given parameters (at the layer's offsets); returns batch x layer.out.size() floats.
// training: the forward pass of training (batch normalization uses batch statistics).
std::vector<float> runLayer(const model::detail::Layer& layer, const std::vector<float>& params,
                            const std::vector<float>& x, int batch, bool training = false);

// Tolerance: |got - expected| <= kAbsTol + kRelTol * |expected| for every element.
constexpr double kAbsTol = 1e-5;
constexpr double kRelTol = 1e-5;

}  // namespace starling::conformance
