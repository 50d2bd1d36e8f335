// The cnn layers against PyTorch (torch_reference.py): the training pass's loss and
// gradient, the running statistics batch normalization leaves behind, and the
// evaluation pass. Warns and passes when /usr/bin/python3 has no torch.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "starling/model/model.hpp"

using starling::model::Model;

namespace {

std::string env(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}

void writeRow(std::ofstream& out, const char* key, std::span<const float> v) {
  out << key;
  out.precision(9);
  for (float f : v)
    out << ' ' << f;
  out << '\n';
}

}  // namespace

TEST_CASE("cnn layers agree with PyTorch in training and evaluation", "[model][torch]") {
  const std::string python = env("STARLING_PYTHON", "/usr/bin/python3");
  const std::string script = env("STARLING_TORCH_REFERENCE", "");
  if (script.empty() || std::system((python + " -c 'import torch' >/dev/null 2>&1").c_str()) != 0) {
    WARN("no torch in " << python << " (or STARLING_TORCH_REFERENCE unset): skipped");
    return;
  }
  const char* spec = GENERATE("cnn:2x9x9-c3k3s2z1-4",            // conv 2-D, stride + padding
                              "cnn:2x16-c3k5s2z2-p2-4",          // conv 1-D, stride + padding
                              "cnn:3x20-c4k3l-b-r-a2-c2k3-g-3",  // 1-D batch norm, avg and global pools
                              "cnn:2x8x8-c4k3z1l-b-r-a2-g-3",    // 2-D batch norm, avg and global pools
                              "cnn:1x6x6-c3k3l-be0.001-lr0.2-f5-b-clipn0.5_0.5-3",  // dense batch norm
                              "cnn:2x7x7-a2-c3k2l-t-sg-3");
  INFO(spec);
  auto m = Model::fromSpec(spec);
  REQUIRE(m.isOk());
  m->initialize(5);
  // Every parameter away from its initial value: biases, gammas, betas, running
  // statistics (the variance positive).
  std::mt19937_64 rng(9);
  std::uniform_real_distribution<float> u(-0.5f, 0.5f);
  for (const auto& t : m->layout().tensors()) {
    const bool bn = t.name.substr(0, 2) == "bn";
    if (t.name.ends_with(".weight") && !bn) continue;  // conv and dense weights keep their initialization
    const bool positive = bn && (t.name.ends_with(".weight") || t.name.ends_with(".running_var"));
    for (std::size_t i = 0; i < t.size; ++i)
      m->params()[t.offset + i] = (positive ? 1.0f : 0.0f) + u(rng);
  }
  const int n = 6;
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> x(n * m->inputDim());
  for (float& v : x)
    v = g(rng);
  std::vector<float> y;
  for (int i = 0; i < n; ++i)
    y.push_back(static_cast<float>(i % m->numClasses()));
  const std::vector<float> before(m->params().begin(), m->params().end());
  std::vector<float> grad(m->numParams());
  const float loss = m->forwardBackward(x.data(), y.data(), nullptr, n, grad);
  const std::vector<float> after(m->params().begin(), m->params().end());
  const auto probs = m->forward(x.data(), n);

  const auto path = std::filesystem::temp_directory_path() / ("starling-torch-" + std::to_string(getpid()) + ".txt");
  {
    std::ofstream out(path);
    out << "spec " << spec << '\n';
    writeRow(out, "params", before);
    writeRow(out, "x", x);
    writeRow(out, "y", y);
    out.precision(9);
    out << "loss " << loss << '\n';
    writeRow(out, "grad", grad);
    writeRow(out, "after", after);
    writeRow(out, "probs", probs);
  }
  const int rc = std::system((python + " " + script + " " + path.string()).c_str());
  std::filesystem::remove(path);
  CHECK(rc == 0);
}
