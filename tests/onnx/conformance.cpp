// The conformance driver (conformance.hpp): loads every node test of the ONNX test
// data, runs the registered ops and compares their outputs.
#include "conformance.hpp"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

namespace starling::conformance {

namespace fs = std::filesystem;

std::size_t Tensor::count() const {
  std::size_t n = 1;
  for (int64_t d : dims)
    n *= static_cast<std::size_t>(d);
  return n;
}

namespace {

template <class T>
void appendRaw(const std::string& raw, std::vector<float>& out) {
  const std::size_t n = raw.size() / sizeof(T);
  for (std::size_t i = 0; i < n; ++i) {
    T v;
    std::memcpy(&v, raw.data() + i * sizeof(T), sizeof(T));  // little-endian, as every target
    out.push_back(static_cast<float>(v));
  }
}

bool readFile(const fs::path& path, std::string& bytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream buf;
  buf << in.rdbuf();
  bytes = std::move(buf).str();
  return true;
}

}  // namespace

std::string parseTensor(const std::string& bytes, Tensor& out) {
  onnx::TensorProto t;
  if (!t.ParseFromString(bytes)) return "not a TensorProto";
  out.dims.assign(t.dims().begin(), t.dims().end());
  out.values.clear();
  const bool raw = t.has_raw_data();
  switch (t.data_type()) {
    case onnx::TensorProto::FLOAT:
      if (raw)
        appendRaw<float>(t.raw_data(), out.values);
      else
        out.values.assign(t.float_data().begin(), t.float_data().end());
      break;
    case onnx::TensorProto::DOUBLE:
      if (raw)
        appendRaw<double>(t.raw_data(), out.values);
      else
        out.values.assign(t.double_data().begin(), t.double_data().end());
      break;
    case onnx::TensorProto::INT64:
      if (raw)
        appendRaw<int64_t>(t.raw_data(), out.values);
      else
        out.values.assign(t.int64_data().begin(), t.int64_data().end());
      break;
    case onnx::TensorProto::INT32:
      if (raw)
        appendRaw<int32_t>(t.raw_data(), out.values);
      else
        out.values.assign(t.int32_data().begin(), t.int32_data().end());
      break;
    default:
      return "element type " + std::to_string(t.data_type()) + " (float, double, int32, int64 are read)";
  }
  if (out.values.size() != out.count())
    return "holds " + std::to_string(out.values.size()) + " values for " + std::to_string(out.count());
  return "";
}

const Tensor* NodeCase::input(int i) const {
  const onnx::NodeProto& n = node();
  if (i >= n.input_size() || n.input(i).empty()) return nullptr;
  auto it = values.find(n.input(i));
  return it == values.end() ? nullptr : &it->second;
}

std::map<std::string, Runner>& runners() {
  static std::map<std::string, Runner> r;
  return r;
}

const onnx::AttributeProto* attribute(const onnx::NodeProto& node, std::string_view name) {
  for (const auto& a : node.attribute())
    if (a.name() == name) return &a;
  return nullptr;
}
int64_t attrInt(const onnx::NodeProto& node, std::string_view name, int64_t fallback) {
  const auto* a = attribute(node, name);
  return a ? a->i() : fallback;
}
float attrFloat(const onnx::NodeProto& node, std::string_view name, float fallback) {
  const auto* a = attribute(node, name);
  return a ? a->f() : fallback;
}
std::vector<int64_t> attrInts(const onnx::NodeProto& node, std::string_view name) {
  const auto* a = attribute(node, name);
  if (!a) return {};
  return {a->ints().begin(), a->ints().end()};
}
std::string attrString(const onnx::NodeProto& node, std::string_view name, std::string fallback) {
  const auto* a = attribute(node, name);
  return a ? a->s() : fallback;
}
std::string unknownAttributes(const onnx::NodeProto& node, std::initializer_list<std::string_view> known) {
  for (const auto& a : node.attribute())
    if (std::find(known.begin(), known.end(), a.name()) == known.end()) return "attribute '" + a.name() + "'";
  return "";
}

std::vector<float> runLayer(const model::detail::Layer& layer, const std::vector<float>& params,
                            const std::vector<float>& x, int batch, bool training) {
  model::detail::Network net;
  net.layers = {layer};
  net.layers[0].statsOffset = 0;
  net.acts.resize(1);
  net.classes = layer.out.c;
  net.training = training;
  net.batchStats.resize(2 * static_cast<std::size_t>(layer.in.c));
  net.reserve(batch);
  model::detail::forwardLayer(layer, params.data(), x.data(), net.acts[0].data(), batch, net);
  return {net.acts[0].begin(), net.acts[0].begin() + static_cast<std::ptrdiff_t>(batch * layer.out.size())};
}

namespace {

// Loads directory dir; an empty string on success, else why not.
std::string loadCase(const fs::path& dir, NodeCase& c) {
  std::string bytes;
  if (!readFile(dir / "model.onnx", bytes) || !c.model.ParseFromString(bytes)) return "model.onnx does not parse";
  const fs::path data = dir / "test_data_set_0";
  const auto& g = c.model.graph();
  for (int i = 0; i < g.input_size(); ++i) {
    Tensor t;
    if (!readFile(data / ("input_" + std::to_string(i) + ".pb"), bytes))
      return "input_" + std::to_string(i) + " missing";
    std::string why = parseTensor(bytes, t);
    if (!why.empty()) return "input '" + g.input(i).name() + "': " + why;
    c.values[g.input(i).name()] = std::move(t);
  }
  if (!readFile(data / "output_0.pb", bytes)) return "output_0.pb missing";
  std::string why = parseTensor(bytes, c.expected);
  if (!why.empty()) return "output: " + why;
  return "";
}

struct Tally {
  int passed = 0, failed = 0, skipped = 0;
};

}  // namespace

}  // namespace starling::conformance

TEST_CASE("ONNX node tests of the ops Starling supports agree with the expected outputs", "[onnx][conformance]") {
  using namespace starling::conformance;
  const char* env = std::getenv("STARLING_ONNX_TESTDATA");
  const fs::path root = env ? fs::path(env) : fs::path("/usr/share/libonnx-testdata/data/node");
  if (!fs::is_directory(root)) {
    WARN("no ONNX test data at " << root.string() << " (install libonnx-testdata): skipped");
    return;
  }
  std::vector<fs::path> dirs;
  for (const auto& e : fs::directory_iterator(root))
    if (e.is_directory()) dirs.push_back(e.path());
  std::sort(dirs.begin(), dirs.end());
  std::map<std::string, Tally> byOp;
  Tally total;
  for (const fs::path& dir : dirs) {
    NodeCase c;
    c.name = dir.filename().string();
    std::string bytes;
    onnx::ModelProto probe;
    if (!readFile(dir / "model.onnx", bytes) || !probe.ParseFromString(bytes)) continue;
    if (probe.graph().node_size() < 1) continue;
    const std::string op = probe.graph().node(0).op_type();
    const auto runner = runners().find(op);
    if (runner == runners().end()) continue;  // an op Starling does not have
    Tally& t = byOp[op];
    auto skip = [&](const std::string& why) {
      std::cout << "SKIP " << c.name << " (" << op << "): " << why << "\n";
      ++t.skipped;
      ++total.skipped;
    };
    if (probe.graph().node_size() != 1) {
      skip("a graph of " + std::to_string(probe.graph().node_size()) + " nodes (only single-node tests run)");
      continue;
    }
    if (std::string why = loadCase(dir, c); !why.empty()) {
      skip(why);
      continue;
    }
    Outcome o = runner->second(c);
    if (!o.ran) {
      skip(o.skipReason);
      continue;
    }
    double worst = 0.0;
    bool ok = o.result.values.size() == c.expected.values.size();
    if (ok)
      for (std::size_t i = 0; i < o.result.values.size(); ++i) {
        const double e = c.expected.values[i];
        const double d = std::abs(static_cast<double>(o.result.values[i]) - e);
        if (std::isnan(e) != std::isnan(static_cast<double>(o.result.values[i]))) ok = false;
        if (std::isnan(e)) continue;
        worst = std::max(worst, d);
        if (!(d <= kAbsTol + kRelTol * std::abs(e))) ok = false;
      }
    std::cout << (ok ? "PASS " : "FAIL ") << c.name << " (" << op << "): max |diff| " << worst;
    if (o.result.values.size() != c.expected.values.size())
      std::cout << ", " << o.result.values.size() << " values for " << c.expected.values.size();
    std::cout << "\n";
    (ok ? t.passed : t.failed)++;
    (ok ? total.passed : total.failed)++;
    INFO(c.name);
    CHECK(ok);
  }
  for (const auto& [op, t] : byOp)
    std::cout << op << ": " << t.passed << " pass, " << t.failed << " fail, " << t.skipped << " skipped\n";
  std::cout << "total: " << total.passed << " pass, " << total.failed << " fail, " << total.skipped << " skipped\n";
  CHECK(total.failed == 0);
  CHECK(total.passed > 0);
}
