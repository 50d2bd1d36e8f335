// ONNX import and export (coordinator/onnx): graphs made at test time by
// onnx_models.py (python3-onnx) import to the spec and weights whose forward pass
// matches the graph's reference evaluation; Starling models survive export -> import
// bit for bit; unsupported ops, attributes and versions are refused by name.
//
// The cases that need python3-onnx and numpy are skipped, with a warning, when they
// are missing; the round trip and the version refusals need only the C++ library.
#include "starling/onnx/onnx.hpp"

#include <onnx/onnx_pb.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "import_cases.hpp"

namespace fs = std::filesystem;
using namespace starling;

namespace {

std::string python() {
  const char* p = std::getenv("STARLING_PYTHON");
  return p && *p ? p : "/usr/bin/python3";
}
std::string helperScript() {
  const char* p = std::getenv("STARLING_ONNX_HELPER");
  return p ? p : "";
}

bool havePythonOnnx() {
  static const bool have =
      !helperScript().empty() && std::system((python() + " -c 'import onnx, numpy' >/dev/null 2>&1").c_str()) == 0;
  return have;
}

struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() / ("starling-onnx-test-" + std::to_string(::getpid()));
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

void writeFloats(const fs::path& p, std::span<const float> v) {
  std::ofstream out(p, std::ios::binary);
  out.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size_bytes()));
}

// The models onnx_models.py made, once per run.
const fs::path& madeModels() {
  static TempDir dir;
  static const bool made = std::system((python() + " " + helperScript() + " make " + dir.path.string()).c_str()) == 0;
  REQUIRE(made);
  return dir.path;
}

float maxAbsDiff(std::span<const float> a, std::span<const float> b) {
  REQUIRE(a.size() == b.size());
  float m = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

std::vector<float> randomInputs(std::size_t n, uint32_t seed) {
  std::vector<float> x(n);
  uint32_t s = seed;
  for (auto& v : x) {
    s = s * 1664525u + 1013904223u;
    v = static_cast<float>(s >> 8) / static_cast<float>(1 << 24) * 4.0f - 2.0f;
  }
  return x;
}

}  // namespace

TEST_CASE("onnx: graphs made with python3-onnx import to the same function", "[onnx][python]") {
  if (!havePythonOnnx()) {
    WARN("skipped: needs " << python() << " with onnx and numpy (apt-get install python3-onnx python3-numpy)");
    SUCCEED();
    return;
  }
  const fs::path& dir = madeModels();
  int cases = 0;
  for (const onnxtest::ImportCase& c : onnxtest::importCases(dir / "manifest.txt")) {
    ++cases;
    INFO(c.name);
    const float diff = onnxtest::importCase(dir, c).diff;
    std::printf("onnx import %-12s %-36s max |starling - reference| = %.3g\n", c.name.c_str(), c.spec.c_str(), diff);
    CHECK(diff <= 1e-5f);
  }
  CHECK(cases == 10);
}

TEST_CASE("onnx: unsupported ops, attributes and versions are refused by name", "[onnx][python]") {
  if (!havePythonOnnx()) {
    WARN("skipped: needs " << python() << " with onnx and numpy");
    SUCCEED();
    return;
  }
  const fs::path& dir = madeModels();
  auto refusal = [&](const std::string& name) {
    auto r = onnxio::importOnnx((dir / (name + ".onnx")).string());
    REQUIRE_FALSE(r);
    CHECK(r.status().code() == StatusCode::kUnsupported);
    std::printf("onnx refuses %-12s %s\n", name.c_str(), r.status().message().c_str());
    return r.status().message();
  };
  std::string m = refusal("padded_conv");
  CHECK_THAT(m, Catch::Contains("node 'conv3' (Conv): pads [0,0,1,1] are not supported") &&
                    Catch::Contains("pads every side"));
  CHECK_THAT(refusal("avgpool_pads"), Catch::Contains("node 'avg' (AveragePool): pads [1,1,1,1] are not supported"));
  CHECK_THAT(refusal("avgpool_stride"),
             Catch::Contains("node 'avg' (AveragePool): strides [1] are not supported: Starling pools with stride = "
                             "window (2)"));
  CHECK_THAT(refusal("clip_min"), Catch::Contains("node 'clip' (Clip): its max is missing or infinite"));
  CHECK_THAT(refusal("lstm"), Catch::Contains("node 'lstm0' (LSTM): is not supported"));
  CHECK_THAT(refusal("batchnorm"),
             Catch::Contains("node 'bn1' (BatchNormalization): training_mode 1 is not supported"));
  CHECK_THAT(refusal("ir9"), Catch::Contains("IR version 9 is newer than Starling reads (IR 8, opset 17)"));
  CHECK_THAT(refusal("opset18"), Catch::Contains("opset 18 is newer than Starling reads (IR 8, opset 17)"));
}

namespace {
const char* kRoundTripSpecs[] = {
    "linear:7-3",
    "mlp:20-16-8-5",
    "mlp:tanh:10-6-1/mse",
    "mlp:sigmoid:12-5-1/logistic",
    "mlp:9-4-1/huber:0.5",
    "cnn:2x14x14-c4k3-p2-c6k3-p2-f16-3",
    "cnn:1x8x8-c3k3-p2-1/logistic",
    "cnn:3x12x12-c4k3s2z1l-b-r-a2-c5k2-g-4",
    "cnn:2x16-c4k5z2l-lr0.1-p2-c3k3l-clip0_6-3",
    "cnn:1x6x6-c2k3l-be0.001-t-1/logistic",
    "cnn:2x20-c3k3s2-a3-clipn1_1.5-sg-f6-b-5",
    "cnn:2x9x9-c3k3z1-b-f4-b-3",
    // Sequences and embedding bags (the python3-onnx evaluation of these is in onnx_seq_test.cpp).
    "gru:5x3-4-2",
    "gru:6x2-5-7-1/mse",
    "gru:lbr0:5x3-4-2",
    "embedbag:30-4-3",
    "embedbag:mean:tanh:30-4-6-1/logistic",
};
}

TEST_CASE("onnx: export -> import gives the same spec, parameters and outputs", "[onnx]") {
  TempDir dir;
  float worst = 0;
  for (const char* spec : kRoundTripSpecs) {
    INFO(spec);
    auto m = model::Model::fromSpec(spec);
    REQUIRE(m);
    m->initialize(42);
    for (float& b : m->params())  // non-zero biases too
      if (b == 0.0f) b = 0.125f;
    const fs::path file = dir.path / "model.onnx";
    REQUIRE(onnxio::exportOnnx(*m, file.string()));
    auto back = onnxio::importOnnx(file.string());
    REQUIRE(back);
    CHECK(back->spec == m->spec());
    REQUIRE(back->params.size() == m->numParams());
    CHECK(std::memcmp(back->params.data(), m->params().data(), m->numParams() * sizeof(float)) == 0);
    auto again = model::Model::fromSpec(back->spec);
    REQUIRE(again);
    REQUIRE(again->setParams(back->params));
    const int batch = 8;
    const std::vector<float> x = randomInputs(batch * m->inputDim(), 3);
    const std::vector<float> before(m->forward(x.data(), batch).begin(), m->forward(x.data(), batch).end());
    const float diff = maxAbsDiff(again->forward(x.data(), batch), before);
    worst = std::max(worst, diff);
    CHECK(diff == 0.0f);

    // The exported file as python3-onnx sees it: checker, and its own evaluation.
    const bool sequence = std::string_view(spec).starts_with("gru:") || std::string_view(spec).starts_with("embedbag:");
    if (havePythonOnnx() && !sequence) {
      writeFloats(dir.path / "x.bin", x);
      writeFloats(dir.path / "got.bin", before);
      const std::string cmd = python() + " " + helperScript() + " eval " + file.string() + " " +
                              (dir.path / "x.bin").string() + " " + std::to_string(batch) + " " +
                              (dir.path / "got.bin").string();
      CHECK(std::system(cmd.c_str()) == 0);
    }
  }
  std::printf("onnx_roundtrip_max_abs %g\n", static_cast<double>(worst));
  if (!havePythonOnnx()) WARN("python3-onnx checks of the exported files skipped: needs " << python() << " with onnx");
}

TEST_CASE("onnx: a task's head and data complete the imported spec", "[onnx]") {
  auto m = model::Model::fromSpec("mlp:6-4-3");
  REQUIRE(m);
  m->initialize(1);
  auto bytes = onnxio::exportOnnxBytes(*m);
  REQUIRE(bytes);
  auto imp = onnxio::importOnnxBytes(*bytes, "mlp.onnx");
  REQUIRE(imp);
  CHECK(imp->head == onnxio::OutputHead::kSoftmax);
  CHECK(imp->body == "mlp:6-4-3");
  auto spec = onnxio::resolveImported(*imp, data::TaskKind::kClassification, 0, 0, 0);
  REQUIRE(spec);
  CHECK(*spec == "mlp:6-4-3");
  auto wrongData = onnxio::resolveImported(*imp, data::TaskKind::kClassification, 7, 3, 0);
  REQUIRE_FALSE(wrongData);
  CHECK_THAT(wrongData.status().message(), Catch::Contains("takes 6 inputs but the data has 7"));
  auto wrongTask = onnxio::resolveImported(*imp, data::TaskKind::kRegression, 0, 0, 0);
  REQUIRE_FALSE(wrongTask);
  CHECK_THAT(wrongTask.status().message(), Catch::Contains("softmax"));

  // A regression model recorded as Huber: the task's delta decides.
  auto r = model::Model::fromSpec("linear:5-1/huber:2");
  REQUIRE(r);
  auto rb = onnxio::exportOnnxBytes(*r);
  REQUIRE(rb);
  auto ri = onnxio::importOnnxBytes(*rb, "linear.onnx");
  REQUIRE(ri);
  CHECK(ri->spec == "linear:5-1/huber:2");
  CHECK(*onnxio::resolveImported(*ri, data::TaskKind::kRegression, 0, 0, 0) == "linear:5-1/mse");
  CHECK(*onnxio::resolveImported(*ri, data::TaskKind::kRegression, 0, 0, 1.5f) == "linear:5-1/huber:1.5");
}

TEST_CASE("onnx: newer IR and opset versions are refused before anything else", "[onnx]") {
  auto m = model::Model::fromSpec("linear:4-2");
  REQUIRE(m);
  auto bytes = onnxio::exportOnnxBytes(*m);
  REQUIRE(bytes);
  onnx::ModelProto proto;
  REQUIRE(proto.ParseFromString(*bytes));
  CHECK(proto.ir_version() == 8);
  CHECK(proto.opset_import(0).version() == 17);

  onnx::ModelProto ir9 = proto;
  ir9.set_ir_version(9);
  auto r = onnxio::importOnnxBytes(ir9.SerializeAsString(), "ir9.onnx");
  REQUIRE_FALSE(r);
  CHECK(r.status().code() == StatusCode::kUnsupported);
  CHECK_THAT(r.status().message(), Catch::Contains("IR version 9 is newer than Starling reads (IR 8, opset 17)"));

  onnx::ModelProto opset19 = proto;
  opset19.mutable_opset_import(0)->set_version(19);
  r = onnxio::importOnnxBytes(opset19.SerializeAsString(), "opset19.onnx");
  REQUIRE_FALSE(r);
  CHECK_THAT(r.status().message(), Catch::Contains("opset 19 is newer than Starling reads"));

  r = onnxio::importOnnxBytes("not a model", "junk.onnx");
  REQUIRE_FALSE(r);
  CHECK(r.status().code() == StatusCode::kMalformed);

  auto missing = onnxio::importOnnx("/nonexistent/model.onnx");
  REQUIRE_FALSE(missing);
  CHECK(missing.status().code() == StatusCode::kNotFound);
}

TEST_CASE("onnx: an asymmetrically padded convolution and a branching graph are refused naming the node", "[onnx]") {
  auto m = model::Model::fromSpec("cnn:1x6x6-c2k3-3");
  REQUIRE(m);
  auto bytes = onnxio::exportOnnxBytes(*m);
  REQUIRE(bytes);
  onnx::ModelProto proto;
  REQUIRE(proto.ParseFromString(*bytes));
  onnx::ModelProto padded = proto;
  for (auto& node : *padded.mutable_graph()->mutable_node())
    if (node.op_type() == "Conv")
      for (auto& a : *node.mutable_attribute())
        if (a.name() == "pads")
          for (int i = 0; i < a.ints_size(); ++i)
            a.set_ints(i, i < 2 ? 0 : 1);  // asymmetric: only the ends
  auto r = onnxio::importOnnxBytes(padded.SerializeAsString(), "padded.onnx");
  REQUIRE_FALSE(r);
  CHECK_THAT(r.status().message(),
             Catch::Contains("node 'conv0' (Conv): pads [0,0,1,1] are not supported: Starling's convolution pads "
                             "every side of every axis equally"));

  // A residual connection: the second dense layer's output added to its input.
  auto d = model::Model::fromSpec("mlp:4-4-4-2");
  REQUIRE(d);
  auto db = onnxio::exportOnnxBytes(*d);
  REQUIRE(db);
  onnx::ModelProto branch;
  REQUIRE(branch.ParseFromString(*db));
  auto* nodes = branch.mutable_graph()->mutable_node();
  // dense0, relu0, dense1, relu1, dense2, probabilities: add relu0's output to relu1's.
  onnx::NodeProto add;
  add.set_op_type("Add");
  add.set_name("residual");
  add.add_input(nodes->Get(3).output(0));
  add.add_input(nodes->Get(1).output(0));
  add.add_output("sum");
  nodes->Mutable(4)->set_input(0, "sum");
  *nodes->Add() = add;
  for (int i = nodes->size() - 1; i > 4; --i)
    nodes->SwapElements(i, i - 1);
  r = onnxio::importOnnxBytes(branch.SerializeAsString(), "residual.onnx");
  REQUIRE_FALSE(r);
  CHECK_THAT(r.status().message(), Catch::Contains("node 'residual' (Add)") && Catch::Contains("single chain"));
}
