// Sparse batches: linear, mlp and embedbag on CSR input agree with the dense passes on
// the densified rows, their gradients with central differences, and the gradient
// touches only the weights of the features present.
#include <catch2/catch.hpp>
#include <cmath>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "starling/data/dataset.hpp"
#include "starling/model/model.hpp"

using starling::data::SparseBatch;
using starling::model::Model;
using starling::model::ParamRange;

namespace {

// A random CSR batch of n rows over dim features, about k non-zeros a row, with the
// same rows densified, labels for m's head and weights.
struct Both {
  SparseBatch sparse;
  std::vector<float> dense;
  std::vector<float> y;
  std::vector<float> w;
};

Both randomBoth(const Model& m, int n, int k, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const std::size_t dim = m.inputDim();
  const bool mean = m.spec().starts_with("embedbag:mean:");
  std::uniform_int_distribution<uint32_t> feature(0, static_cast<uint32_t>(dim - 1));
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::uniform_real_distribution<float> weight(0.2f, 3.0f);
  Both b;
  b.sparse.clear();
  b.dense.assign(static_cast<std::size_t>(n) * dim, 0.0f);
  for (int r = 0; r < n; ++r) {
    std::set<uint32_t> cols;
    while (static_cast<int>(cols.size()) < k)
      cols.insert(feature(rng) % 7 == 0 ? feature(rng) % 5 : feature(rng));  // some features shared across rows
    for (uint32_t c : cols) {
      // A mean bag divides by the sum of the values: keep them positive (counts).
      const float v = mean ? std::abs(g(rng)) + 0.1f : g(rng);
      b.sparse.indices.push_back(c);
      b.sparse.values.push_back(v);
      b.dense[static_cast<std::size_t>(r) * dim + c] = v;
    }
    b.sparse.offsets.push_back(b.sparse.indices.size());
    switch (m.task()) {
      case starling::data::TaskKind::kClassification:
        b.y.push_back(static_cast<float>(rng() % static_cast<uint64_t>(m.numClasses())));
        break;
      case starling::data::TaskKind::kBinary:
        b.y.push_back(static_cast<float>(rng() % 2));
        break;
      case starling::data::TaskKind::kRegression:
        b.y.push_back(g(rng));
        break;
    }
    b.w.push_back(weight(rng));
  }
  return b;
}

}  // namespace

TEST_CASE("sparse passes equal the dense passes on the densified rows", "[model][sparse]") {
  const std::string spec =
      GENERATE(std::string("linear:300-1/logistic"), std::string("linear:300-4"), std::string("mlp:tanh:300-8-3"),
               std::string("embedbag:300-8-1/mse"), std::string("embedbag:300-6-5-3"),
               std::string("embedbag:sigmoid:300-4-2-1/huber:0.5"), std::string("embedbag:mean:300-6-5-3"),
               std::string("embedbag:mean:tanh:300-4-1/logistic"));
  CAPTURE(spec);
  auto made = Model::fromSpec(spec);
  REQUIRE(made.isOk());
  Model m = std::move(made).value();
  m.initialize(11);
  // Larger weights than the initialization, so the outputs are not all near zero.
  for (float& p : m.params())
    p *= 3.0f;
  REQUIRE(m.acceptsSparse());
  const int n = 9;
  Both b = randomBoth(m, n, 6, 5);

  std::vector<float> denseGrad(m.numParams());
  Model dense = m;
  const float denseLoss = dense.forwardBackward(b.dense.data(), b.y.data(), b.w.data(), n, denseGrad);
  std::vector<float> denseOut(dense.probabilities().begin(), dense.probabilities().end());

  SECTION("loss, outputs and gradient, grad overwritten whole") {
    std::vector<float> grad(m.numParams(), 123.0f);
    const float loss = m.forwardBackwardSparse(b.sparse, b.y.data(), b.w.data(), grad);
    CHECK(loss == Approx(denseLoss).epsilon(1e-5));
    REQUIRE(m.probabilities().size() == denseOut.size());
    for (std::size_t i = 0; i < denseOut.size(); ++i)
      CHECK(m.probabilities()[i] == Approx(denseOut[i]).epsilon(1e-5).margin(1e-6));
    for (std::size_t i = 0; i < grad.size(); ++i) {
      INFO("parameter " << i);
      CHECK(grad[i] == Approx(denseGrad[i]).epsilon(1e-4).margin(1e-6));
    }
    std::span<const float> fwd = m.forwardSparse(b.sparse);
    for (std::size_t i = 0; i < denseOut.size(); ++i)
      CHECK(fwd[i] == Approx(denseOut[i]).epsilon(1e-5).margin(1e-6));
  }
  SECTION("with touched ranges: only those are written, and they hold the whole gradient") {
    std::vector<float> grad(m.numParams(), 0.0f);
    std::vector<ParamRange> touched;
    m.forwardBackwardSparse(b.sparse, b.y.data(), b.w.data(), grad, &touched);
    std::vector<char> in(m.numParams(), 0);
    for (const ParamRange& r : touched)
      for (std::size_t k = r.offset; k < r.offset + r.count; ++k) {
        CHECK(in[k] == 0);  // ranges do not overlap
        in[k] = 1;
      }
    std::size_t listed = 0;
    for (std::size_t i = 0; i < grad.size(); ++i) {
      listed += in[i];
      if (!in[i]) {
        CHECK(grad[i] == 0.0f);
        CHECK(denseGrad[i] == 0.0f);  // a weight of a feature absent from the batch
      } else {
        CHECK(grad[i] == Approx(denseGrad[i]).epsilon(1e-4).margin(1e-6));
      }
    }
    // The features present: at most n * 6 distinct ones, out of 300.
    const std::size_t firstOut = static_cast<std::size_t>(m.layout().tensors()[1].size);
    const std::size_t tail = m.numParams() - m.layout().tensors()[1].offset;
    CHECK(listed <= static_cast<std::size_t>(n) * 6 * firstOut + tail);
    CHECK(listed < m.numParams() / 2);
    // Stale values outside the ranges are left alone.
    std::vector<float> stale(m.numParams(), 7.0f);
    m.forwardBackwardSparse(b.sparse, b.y.data(), b.w.data(), stale, &touched);
    for (std::size_t i = 0; i < stale.size(); ++i)
      if (!in[i]) CHECK(stale[i] == 7.0f);
  }
}

TEST_CASE("sparse gradients agree with central differences", "[model][sparse]") {
  const std::string spec = GENERATE(
      std::string("linear:50-3"), std::string("embedbag:tanh:50-5-4-1/logistic"), std::string("embedbag:50-4-3-1/mse"),
      std::string("embedbag:mean:sigmoid:50-4-3-1/mse"), std::string("embedbag:mean:tanh:50-5-4-1/logistic"));
  CAPTURE(spec);
  auto made = Model::fromSpec(spec);
  REQUIRE(made.isOk());
  Model m = std::move(made).value();
  m.initialize(3);
  Both b = randomBoth(m, 5, 4, 8);
  std::vector<float> grad(m.numParams());
  std::vector<float> scratch(m.numParams());
  m.forwardBackwardSparse(b.sparse, b.y.data(), b.w.data(), grad);
  const float eps = 1e-3f;
  std::size_t bad = 0;
  std::size_t checked = 0;
  for (std::size_t i = 0; i < m.numParams(); ++i) {
    const float saved = m.params()[i];
    m.params()[i] = saved + eps;
    const double up = m.forwardBackwardSparse(b.sparse, b.y.data(), b.w.data(), scratch);
    m.params()[i] = saved - eps;
    const double down = m.forwardBackwardSparse(b.sparse, b.y.data(), b.w.data(), scratch);
    m.params()[i] = saved;
    const double numeric = (up - down) / (2.0 * eps);
    const double err = std::abs(numeric - grad[i]) / std::max(1e-2, std::abs(numeric) + std::abs(grad[i]));
    ++checked;
    if (err > 2e-2) {
      ++bad;
      UNSCOPED_INFO("parameter " << i << ": analytic " << grad[i] << " numeric " << numeric);
    }
  }
  CHECK(checked == m.numParams());
  CHECK(bad == 0);
}

TEST_CASE("embedbag specs: layout, short forms and limits", "[model][sparse][spec]") {
  auto m = Model::fromSpec("embedbag:262144-16-8-2");
  REQUIRE(m.isOk());
  CHECK(m->spec() == "embedbag:262144-16-8-2");
  CHECK(m->inputDim() == 262144);
  CHECK(m->numClasses() == 2);
  CHECK(m->acceptsSparse());
  REQUIRE(m->layout().tensors().size() == 6);
  CHECK(m->layout().tensors()[0].name == "embed.weight");
  CHECK(m->layout().tensors()[0].shape == std::vector<int>{262144, 16});
  CHECK(m->layout().tensors()[1].name == "embed.bias");
  CHECK(m->numParams() == 262144u * 16 + 16 + 16 * 8 + 8 + 8 * 2 + 2);
  CHECK(Model::fromSpec("embedbag:tanh:100-4-1/logistic")->spec() == "embedbag:tanh:100-4-1/logistic");
  CHECK(Model::fromSpec("embedbag:relu:100-4-3")->spec() == "embedbag:100-4-3");
  CHECK(Model::fromSpec("linear:1048576-1/logistic").isOk());
  CHECK_FALSE(Model::fromSpec("embedbag:100-3").isOk());
  CHECK_FALSE(Model::fromSpec("embedbag:1x10x10-4-3").isOk());
  CHECK_FALSE(Model::fromSpec("embedbag:16777216-32-2").isOk());  // 2^29 parameters
  CHECK_FALSE(Model::fromSpec("cnn:1x28x28-c4k5-10")->acceptsSparse());

  using starling::data::TaskKind;
  auto r = starling::model::resolveSpec("embedbag:hidden:16", TaskKind::kBinary, 1000000, 2);
  REQUIRE(r.isOk());
  CHECK(*r == "embedbag:1000000-16-1/logistic");
  r = starling::model::resolveSpec("embedbag:tanh:hidden:8-4", TaskKind::kClassification, 500, 3);
  REQUIRE(r.isOk());
  CHECK(*r == "embedbag:tanh:500-8-4-3");
  CHECK(starling::model::resolveSpec("embedbag:hidden:8", TaskKind::kRegression, 10, 1).value() ==
        "embedbag:10-8-1/mse");
  CHECK_FALSE(starling::model::resolveSpec("embedbag:99-8-1", TaskKind::kRegression, 10, 1).isOk());
  CHECK(starling::model::resolveSpec("linear", TaskKind::kBinary, 262144, 2).value() == "linear:262144-1/logistic");
}

TEST_CASE("evaluate on a sparse data set matches the dense data set", "[model][sparse]") {
  // 40 examples over 30 features; labels by the sign of feature 0's value.
  std::mt19937_64 rng(4);
  std::vector<uint64_t> off = {0};
  std::vector<uint32_t> idx;
  std::vector<float> val;
  std::vector<int32_t> labels;
  std::vector<float> dense;
  for (int i = 0; i < 40; ++i) {
    std::vector<float> row(30, 0.0f);
    const float v0 = static_cast<float>(static_cast<int>(rng() % 7) - 3) + 0.5f;
    row[0] = v0;
    row[1 + rng() % 29] = 1.0f;
    for (uint32_t j = 0; j < 30; ++j)
      if (row[j] != 0.0f) {
        idx.push_back(j);
        val.push_back(row[j]);
      }
    off.push_back(idx.size());
    labels.push_back(v0 > 0 ? 1 : 0);
    dense.insert(dense.end(), row.begin(), row.end());
  }
  auto sparse = starling::data::Dataset::fromSparse(off, idx, val, labels, 30, 2);
  auto flat = starling::data::Dataset::fromFloats(dense, labels, 30, 2);
  REQUIRE(sparse.isOk());
  REQUIRE(flat.isOk());
  for (const char* spec : {"linear:30-1/logistic", "embedbag:30-4-1/logistic", "mlp:30-5-1/logistic"}) {
    CAPTURE(spec);
    Model m = Model::fromSpec(spec).value();
    m.initialize(2);
    m.params()[0] = 2.0f;
    auto a = m.evaluate(*sparse, 7);
    auto b = m.evaluate(*flat, 7);
    REQUIRE(a.isOk());
    REQUIRE(b.isOk());
    CHECK(a->examples == 40);
    CHECK(a->loss == Approx(b->loss).epsilon(1e-5));
    CHECK(a->accuracy == b->accuracy);
    CHECK(a->stats.positives == b->stats.positives);
  }
  // A model that does not take sparse batches reads densified rows.
  Model cnn = Model::fromSpec("cnn:1x5x6-c2k3-2/ce").value();
  cnn.initialize(1);
  auto a = cnn.evaluate(*sparse);
  auto b = cnn.evaluate(*flat);
  REQUIRE(a.isOk());
  CHECK(a->loss == Approx(b->loss).epsilon(1e-6));
}
