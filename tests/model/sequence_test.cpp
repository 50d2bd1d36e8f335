// gru specs (layout, grammar, short forms), the GRU's outputs and gradients against
// torch.nn.GRU (gru_reference.py; skipped with a warning when /usr/bin/python3 has no
// torch), and the mean embedding bag against the sum divided by the row's values.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "starling/model/model.hpp"

namespace fs = std::filesystem;
using starling::data::TaskKind;
using starling::model::Model;

namespace {

void writeFloats(const fs::path& p, const std::vector<float>& v) {
  std::ofstream out(p, std::ios::binary);
  out.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(float)));
}
std::vector<float> readFloats(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::vector<float> v(fs::file_size(p) / sizeof(float));
  in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(float)));
  return v;
}

bool haveTorch() {
  return std::system("/usr/bin/python3 -c 'import torch, numpy' >/dev/null 2>&1") == 0;
}

}  // namespace

TEST_CASE("gru specs: layout, canonical form and refusals", "[model][gru][spec]") {
  auto m = Model::fromSpec("gru:50x6-32-16-4");
  REQUIRE(m.isOk());
  CHECK(m->spec() == "gru:50x6-32-16-4");
  CHECK(m->inputDim() == 300);
  CHECK(m->numClasses() == 4);
  CHECK_FALSE(m->acceptsSparse());
  const auto& t = m->layout().tensors();
  REQUIRE(t.size() == 7);
  CHECK(t[0].name == "gru.W");
  CHECK(t[0].shape == std::vector<int>{1, 96, 6});
  CHECK(t[1].name == "gru.R");
  CHECK(t[1].shape == std::vector<int>{1, 96, 32});
  CHECK(t[2].name == "gru.B");
  CHECK(t[2].shape == std::vector<int>{1, 192});
  CHECK(t[3].name == "dense0.weight");
  CHECK(t[3].shape == std::vector<int>{16, 32});
  CHECK(Model::fromSpec("gru:10x2-4-1/mse")->spec() == "gru:10x2-4-1/mse");
  CHECK(Model::fromSpec("gru:lbr0:10x2-4-1/mse")->spec() == "gru:lbr0:10x2-4-1/mse");
  CHECK(Model::fromSpec("gru:lbr0:50x6-32-16-4")->numParams() == m->numParams());
  CHECK_FALSE(Model::fromSpec("mlp:lbr0:10-2").isOk());
  for (const char* bad :
       {"gru:20-8-2", "gru:4x3-2", "gru:4x0-8-2", "gru:4x3x2-8-2", "gru:relu:4x3-8-2", "gru:4x3-8-x-2"}) {
    INFO(bad);
    CHECK_FALSE(Model::fromSpec(bad).isOk());
  }
  // The full form resolves as is; the short form cannot know the sequence length.
  auto r = starling::model::resolveSpec("gru:10x3-8-2", TaskKind::kClassification, 30, 2);
  REQUIRE(r.isOk());
  CHECK(*r == "gru:10x3-8-2");
  CHECK_FALSE(starling::model::resolveSpec("gru:10x3-8-2", TaskKind::kClassification, 31, 2).isOk());
  r = starling::model::resolveSpec("gru:hidden:8", TaskKind::kClassification, 30, 2);
  REQUIRE_FALSE(r.isOk());
  CHECK_THAT(r.status().message(), Catch::Contains("sequence length") && Catch::Contains("gru:<steps>x<features>"));
}

TEST_CASE("the GRU's outputs and gradients match torch.nn.GRU", "[model][gru][torch]") {
  if (!haveTorch()) {
    WARN("skipped: /usr/bin/python3 has no torch");
    return;
  }
  struct Case {
    int t, f, h;
    std::vector<int> widths;
    bool lbr0;  // gru:lbr0: against the reference's own ONNX-equation GRU
  };
  const Case cases[] = {{5, 3, 4, {3}, false}, {7, 2, 6, {5, 4}, false}, {1, 4, 3, {2}, false},
                        {5, 3, 4, {3}, true},  {7, 2, 6, {5, 4}, true},  {1, 4, 3, {2}, true}};
  for (const Case& c : cases) {
    std::string spec = std::string(c.lbr0 ? "gru:lbr0:" : "gru:") + std::to_string(c.t) + "x" + std::to_string(c.f) +
                       "-" + std::to_string(c.h);
    for (int w : c.widths)
      spec += "-" + std::to_string(w);
    DYNAMIC_SECTION(spec) {
      auto made = Model::fromSpec(spec);
      REQUIRE(made.isOk());
      Model m = std::move(made).value();
      m.initialize(21);
      // Larger weights than the initialization, so the gates leave their linear range.
      for (float& p : m.params())
        p *= 2.0f;
      const int n = 6;
      std::mt19937_64 rng(5);
      std::normal_distribution<float> g(0.0f, 1.0f);
      std::vector<float> x(n * m.inputDim());
      for (float& v : x)
        v = g(rng);
      std::vector<float> y;
      for (int i = 0; i < n; ++i)
        y.push_back(static_cast<float>(rng() % static_cast<uint64_t>(m.numClasses())));
      std::vector<float> grad(m.numParams());
      const float loss = m.forwardBackward(x.data(), y.data(), nullptr, n, grad);
      const std::vector<float> probs(m.probabilities().begin(), m.probabilities().end());

      const fs::path dir = fs::temp_directory_path() / ("starling-gru-test-" + std::to_string(::getpid()));
      fs::create_directories(dir);
      writeFloats(dir / "params.bin", std::vector<float>(m.params().begin(), m.params().end()));
      writeFloats(dir / "x.bin", x);
      writeFloats(dir / "y.bin", y);
      std::string cmd = "/usr/bin/python3 " + std::string(STARLING_GRU_REFERENCE) + (c.lbr0 ? " lbr0 " : " ") +
                        dir.string() + " " + std::to_string(c.t) + " " + std::to_string(c.f) + " " +
                        std::to_string(c.h);
      for (int w : c.widths)
        cmd += " " + std::to_string(w);
      REQUIRE(std::system(cmd.c_str()) == 0);
      const std::vector<float> refOut = readFloats(dir / "out.bin");
      const std::vector<float> refGrad = readFloats(dir / "grad.bin");
      const float refLoss = readFloats(dir / "loss.bin").at(0);
      fs::remove_all(dir);

      CHECK(std::abs(loss - refLoss) < 1e-4);
      REQUIRE(refOut.size() == probs.size());
      float worstOut = 0.0f;
      for (std::size_t i = 0; i < probs.size(); ++i)
        worstOut = std::max(worstOut, std::abs(probs[i] - refOut[i]));
      REQUIRE(refGrad.size() == grad.size());
      float worstGrad = 0.0f;
      float largest = 0.0f;
      for (std::size_t i = 0; i < grad.size(); ++i) {
        worstGrad = std::max(worstGrad, std::abs(grad[i] - refGrad[i]));
        largest = std::max(largest, std::abs(refGrad[i]));
      }
      INFO("outputs within " << worstOut << ", gradients within " << worstGrad << " (largest " << largest << ")");
      CHECK(worstOut < 1e-4f);
      CHECK(worstGrad < 1e-4f);
      CHECK(largest > 1e-2f);  // the comparison is not of zeros
    }
  }
}

TEST_CASE("a mean embedding bag is the sum bag divided by the row's values", "[model][sparse][embedbag]") {
  auto sum = Model::fromSpec("embedbag:40-5-3");
  auto mean = Model::fromSpec("embedbag:mean:40-5-3");
  REQUIRE(sum.isOk());
  REQUIRE(mean.isOk());
  CHECK(mean->spec() == "embedbag:mean:40-5-3");
  CHECK(Model::fromSpec("embedbag:mean:relu:40-5-3")->spec() == "embedbag:mean:40-5-3");
  CHECK(Model::fromSpec("embedbag:mean:tanh:40-5-1/mse")->spec() == "embedbag:mean:tanh:40-5-1/mse");
  CHECK_FALSE(Model::fromSpec("mlp:mean:40-5-3").isOk());
  CHECK_FALSE(Model::fromSpec("embedbag:tanh:mean:40-5-3").isOk());
  auto r = starling::model::resolveSpec("embedbag:mean:hidden:8", TaskKind::kBinary, 1000, 2);
  REQUIRE(r.isOk());
  CHECK(*r == "embedbag:mean:1000-8-1/logistic");
  REQUIRE(mean->layout().size() == sum->layout().size());
  sum->initialize(4);
  REQUIRE(mean->setParams(sum->params()).isOk());

  // Token counts 2, 1, 3 on features 3, 17, 39: the mean bag of counts c equals the sum
  // bag of c / 6.
  std::vector<float> counts(40, 0.0f);
  counts[3] = 2.0f;
  counts[17] = 1.0f;
  counts[39] = 3.0f;
  std::vector<float> scaled = counts;
  for (float& v : scaled)
    v /= 6.0f;
  const std::vector<float> a(mean->forward(counts.data(), 1).begin(), mean->forward(counts.data(), 1).end());
  const std::vector<float> b(sum->forward(scaled.data(), 1).begin(), sum->forward(scaled.data(), 1).end());
  for (std::size_t i = 0; i < a.size(); ++i)
    CHECK(a[i] == Approx(b[i]).epsilon(1e-6));
  // An empty bag is the bias alone.
  std::vector<float> empty(40, 0.0f);
  const auto p = mean->forward(empty.data(), 1);
  for (float v : p)
    CHECK(std::isfinite(v));
}
