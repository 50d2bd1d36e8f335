// ONNX import and export of sequences and embedding bags: PyTorch's own exports of a
// GRU model and of Embedding + mean/sum models (onnx_seq_models.py, torch.onnx.export)
// import to gru: and embedbag: specs whose forward pass matches torch; unsupported GRU
// attributes are refused naming the node; exported gru and embedbag graphs evaluate in
// numpy to what Starling computes. Skipped with a warning without torch and onnx.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "starling/data/sparse_batch.hpp"
#include "starling/onnx/onnx.hpp"

#include "import_cases.hpp"

namespace fs = std::filesystem;
using namespace starling;

namespace {

std::string seqPython() {
  const char* p = std::getenv("STARLING_PYTHON");
  return p && *p ? p : "/usr/bin/python3";
}
std::string seqScript() {
  const char* p = std::getenv("STARLING_ONNX_SEQ_HELPER");
  return p ? p : "";
}
bool haveTorchOnnx() {
  static const bool have = !seqScript().empty() &&
                           std::system((seqPython() + " -c 'import torch, onnx, numpy' >/dev/null 2>&1").c_str()) == 0;
  return have;
}

template <class T>
void store(const fs::path& p, const std::vector<T>& v) {
  std::ofstream out(p, std::ios::binary);
  out.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(T)));
}

float largestDifference(std::span<const float> a, std::span<const float> b) {
  REQUIRE(a.size() == b.size());
  float m = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

const fs::path& seqModels() {
  static const fs::path dir = fs::temp_directory_path() / ("starling-onnx-seq-" + std::to_string(::getpid()));
  static const bool made = [] {
    fs::create_directories(dir);
    std::atexit([] { fs::remove_all(dir); });
    return std::system((seqPython() + " " + seqScript() + " make " + dir.string()).c_str()) == 0;
  }();
  REQUIRE(made);
  return dir;
}

}  // namespace

TEST_CASE("onnx: PyTorch's GRU and embedding-bag exports import to the same function", "[onnx][seq][python]") {
  if (!haveTorchOnnx()) {
    WARN("skipped: needs " << seqPython() << " with torch, onnx and numpy");
    return;
  }
  const fs::path& dir = seqModels();
  int cases = 0;
  for (const onnxtest::ImportCase& c : onnxtest::importCases(dir / "seq_manifest.txt")) {
    ++cases;
    INFO(c.name);
    onnxtest::Imported r = onnxtest::importCase(dir, c);
    std::printf("onnx import %-16s %-28s max |starling - reference| = %.3g\n", c.name.c_str(), c.spec.c_str(), r.diff);
    CHECK(r.diff <= 1e-5f);
    model::Model& m = r.model;
    if (m.acceptsSparse()) {
      // The bag of token ids as sparse id:count features, as LIBSVM data gives it.
      data::SparseBatch sparse;
      sparse.clear();
      for (int row = 0; row < c.batch; ++row) {
        for (std::size_t i = 0; i < m.inputDim(); ++i)
          if (const float count = r.x[row * m.inputDim() + i]; count != 0.0f) {
            sparse.indices.push_back(static_cast<uint32_t>(i));
            sparse.values.push_back(count);
          }
        sparse.offsets.push_back(sparse.indices.size());
      }
      CHECK(largestDifference(m.forwardSparse(sparse), r.ref) <= 1e-5f);
    }
  }
  CHECK(cases == 9);
}

TEST_CASE("onnx: unsupported GRU attributes and selections are refused by name", "[onnx][seq][python]") {
  if (!haveTorchOnnx()) {
    WARN("skipped: needs " << seqPython() << " with torch, onnx and numpy");
    return;
  }
  const fs::path& dir = seqModels();
  auto refusal = [&](const std::string& name) {
    auto r = onnxio::importOnnx((dir / (name + ".onnx")).string());
    REQUIRE_FALSE(r);
    CHECK(r.status().code() == StatusCode::kUnsupported);
    std::printf("onnx refuses %-18s %s\n", name.c_str(), r.status().message().c_str());
    return r.status().message();
  };
  CHECK_THAT(refusal("gru_bidirectional"),
             Catch::Contains("node 'gru0' (GRU): direction 'bidirectional' is not supported (only forward)"));
  CHECK_THAT(refusal("gru_first_step"),
             Catch::Contains("node 'first_step' (Gather)") && Catch::Contains("only the last step"));
}

TEST_CASE("onnx: exported gru and embedbag graphs compute what Starling computes", "[onnx][seq][python]") {
  if (!haveTorchOnnx()) {
    WARN("skipped: needs " << seqPython() << " with torch, onnx and numpy");
    return;
  }
  const fs::path dir = fs::temp_directory_path() / ("starling-onnx-seq-export-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  for (const char* spec : {"gru:6x3-5-4", "gru:lbr0:6x3-5-4", "gru:4x2-3-6-1/mse", "embedbag:40-5-3",
                           "embedbag:mean:sigmoid:40-4-5-1/logistic"}) {
    INFO(spec);
    auto m = model::Model::fromSpec(spec);
    REQUIRE(m);
    m->initialize(9);
    for (float& p : m->params())
      if (p == 0.0f) p = 0.25f;
    const fs::path file = dir / "model.onnx";
    REQUIRE(onnxio::exportOnnx(*m, file.string()));
    const int batch = 5;
    std::vector<float> x(batch * m->inputDim());
    uint32_t s = 17;
    auto next = [&s] { return s = s * 1664525u + 1013904223u; };
    if (m->acceptsSparse()) {
      // Seven token ids per example; Starling reads their counts.
      std::vector<int64_t> ids;
      for (int r = 0; r < batch; ++r)
        for (int t = 0; t < 7; ++t) {
          const int64_t id = (next() >> 8) % m->inputDim();
          ids.push_back(id);
          x[r * m->inputDim() + static_cast<std::size_t>(id)] += 1.0f;
        }
      store(dir / "x.bin", ids);
    } else {
      for (float& v : x)
        v = static_cast<float>(next() >> 8) / static_cast<float>(1 << 24) * 4.0f - 2.0f;
      store(dir / "x.bin", x);
    }
    const std::vector<float> got(m->forward(x.data(), batch).begin(), m->forward(x.data(), batch).end());
    store(dir / "got.bin", got);
    const std::string cmd = seqPython() + " " + seqScript() + " eval " + file.string() + " " +
                            (dir / "x.bin").string() + " " + std::to_string(batch) + " " + (dir / "got.bin").string();
    CHECK(std::system(cmd.c_str()) == 0);
  }
  fs::remove_all(dir);
}
