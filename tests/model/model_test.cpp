// Specs, layout, initialization, the forward pass and the checksum.
#include "starling/model/model.hpp"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "starling/util/checksum.hpp"

using starling::checksum64;
using starling::StatusCode;
using starling::model::Model;

TEST_CASE("an MLP spec builds dense layers with a flat layout", "[model][spec]") {
  auto m = Model::fromSpec("mlp:784-200-200-10");
  REQUIRE(m.isOk());
  CHECK(m->spec() == "mlp:784-200-200-10");
  CHECK(m->inputDim() == 784);
  CHECK(m->numClasses() == 10);
  CHECK(m->numParams() == 784 * 200 + 200 + 200 * 200 + 200 + 200 * 10 + 10);
  const auto& t = m->layout().tensors();
  REQUIRE(t.size() == 6);
  CHECK(t[0].name == "dense0.weight");
  CHECK(t[0].shape == std::vector<int>{200, 784});
  CHECK(t[1].name == "dense0.bias");
  CHECK(t[1].offset == 784 * 200);
  CHECK(t[5].name == "dense2.bias");
  CHECK(t[5].offset + t[5].size == m->numParams());
  REQUIRE(m->layout().find("dense1.weight") != nullptr);
  CHECK(m->layout().find("dense1.weight")->shape == std::vector<int>{200, 200});
  CHECK(m->layout().find("nope") == nullptr);
}

TEST_CASE("a CNN spec builds convolutions, pools and dense layers", "[model][spec]") {
  auto m = Model::fromSpec(" cnn:1x28x28-c16k5-p2-c32k5-p2-f128-10 ");
  REQUIRE(m.isOk());
  CHECK(m->spec() == "cnn:1x28x28-c16k5-p2-c32k5-p2-f128-10");
  CHECK(m->inputDim() == 784);
  // 28 -c5-> 24 -p2-> 12 -c5-> 8 -p2-> 4: 32 * 4 * 4 = 512 inputs to f128.
  REQUIRE(m->layout().find("conv1.weight") != nullptr);
  CHECK(m->layout().find("conv1.weight")->shape == std::vector<int>{32, 16, 5, 5});
  CHECK(m->layout().find("dense0.weight")->shape == std::vector<int>{128, 512});
  CHECK(m->numParams() == 16 * 25 + 16 + 32 * 16 * 25 + 32 + 128 * 512 + 128 + 10 * 128 + 10);
}

TEST_CASE("bad specs are refused with a message naming the problem", "[model][spec]") {
  struct Case {
    const char* spec;
    const char* mentions;
  };
  const Case cases[] = {
      {"", "expected"},
      {"mlp", "expected"},
      {"rnn:10-2", "unknown kind"},
      {"mlp:784", "number of classes"},
      {"mlp:784-0-10", "'0'"},
      {"mlp:784-x-10", "'x'"},
      {"mlp:-5-10", "input"},
      {"cnn:1x2x28x28-c4k3-10", "input"},
      {"cnn:1x8x8-c2k3z3-3", "padding"},
      {"cnn:1x8x8-c2k3x-3", "c<filters>k<kernel>"},
      {"cnn:1x8x8-lr-3", "lr<slope>"},
      {"cnn:1x8x8-clip6_0-3", "clip<lo>_<hi>"},
      {"cnn:1x8x8-clip0-3", "clip<lo>_<hi>"},
      {"cnn:1x8x8-be0-3", "be<eps>"},
      {"cnn:1x8x8-f4-g-3", "after a dense"},
      {"cnn:1x8x8-f4-a2-3", "after a dense"},
      {"cnn:3x8-c2k9-3", "larger"},
      {"cnn:3x8-a9-3", "larger"},
      {"cnn:1x8x8--3", "empty layer"},
      {"cnn:1x4x4-c2k5-3", "larger"},
      {"cnn:1x8x8-c2-3", "c<filters>k<kernel>"},
      {"cnn:1x8x8-q2-3", "unknown layer"},
      {"cnn:1x8x8-f4-c2k2-3", "after a dense"},
      {"cnn:1x8x8-p9-3", "larger"},
      {"mlp:65536-65536-65536-10", "limit"},
      {"mlp:10-1", "2 classes"},
      {"cnn:1x8x8-c2k2-f4-p2", "number of classes"},
  };
  for (const Case& c : cases) {
    DYNAMIC_SECTION("spec '" << c.spec << "'") {
      auto m = Model::fromSpec(c.spec);
      REQUIRE_FALSE(m.isOk());
      CHECK(m.status().code() == StatusCode::kInvalidArgument);
      CHECK_THAT(m.status().message(), Catch::Contains(c.mentions));
    }
  }
}

TEST_CASE("initialization is seeded and scaled by fan-in", "[model][init]") {
  auto a = Model::fromSpec("mlp:100-50-10");
  auto b = Model::fromSpec("mlp:100-50-10");
  REQUIRE((a.isOk() && b.isOk()));
  a->initialize(42);
  b->initialize(42);
  CHECK(checksum64(a->params()) == checksum64(b->params()));
  b->initialize(43);
  CHECK(checksum64(a->params()) != checksum64(b->params()));

  const auto* w = a->layout().find("dense0.weight");
  const auto* bias = a->layout().find("dense0.bias");
  const float bound = std::sqrt(6.0f / 100.0f);
  double sumSq = 0.0;
  for (std::size_t i = 0; i < w->size; ++i) {
    const float v = a->params()[w->offset + i];
    REQUIRE(std::abs(v) <= bound);
    sumSq += v * v;
  }
  // Uniform on [-bound, bound] has variance bound^2 / 3.
  CHECK(sumSq / w->size == Approx(bound * bound / 3).epsilon(0.05));
  for (std::size_t i = 0; i < bias->size; ++i)
    CHECK(a->params()[bias->offset + i] == 0.0f);
}

TEST_CASE("forward gives probabilities that sum to one", "[model]") {
  auto m = Model::fromSpec("cnn:1x8x8-c3k3-p2-f6-4");
  REQUIRE(m.isOk());
  m->initialize(3);
  std::vector<float> x(3 * 64);
  for (std::size_t i = 0; i < x.size(); ++i)
    x[i] = std::sin(static_cast<float>(i));
  auto p = m->forward(x.data(), 3);
  REQUIRE(p.size() == 12);
  for (int i = 0; i < 3; ++i) {
    float s = 0.0f;
    for (int c = 0; c < 4; ++c) {
      CHECK(p[i * 4 + c] > 0.0f);
      s += p[i * 4 + c];
    }
    CHECK(s == Approx(1.0f).epsilon(1e-5));
  }
  // The forward pass inside forwardBackward gives the same probabilities.
  std::vector<float> before(p.begin(), p.end());
  std::vector<float> grad(m->numParams());
  const float y[3] = {0, 1, 2};
  m->forwardBackward(x.data(), y, nullptr, 3, grad);
  auto q = m->probabilities();
  for (std::size_t i = 0; i < before.size(); ++i)
    CHECK(q[i] == Approx(before[i]));
}

TEST_CASE("a copied model is independent of the original", "[model]") {
  auto m = Model::fromSpec("mlp:4-3-2");
  REQUIRE(m.isOk());
  m->initialize(1);
  Model copy = *m;
  copy.params()[0] += 1.0f;
  CHECK(copy.params()[0] != m->params()[0]);
  CHECK(copy.params().data() != m->params().data());
  CHECK(m->setParams(copy.params()).isOk());
  CHECK(checksum64(m->params()) == checksum64(copy.params()));
  std::vector<float> wrong(3);
  CHECK(m->setParams(wrong).code() == StatusCode::kInvalidArgument);
}

TEST_CASE("the model checksum sees every bit of every parameter", "[model][checksum]") {
  std::vector<float> a(1000, 0.5f);
  const uint64_t h = checksum64(a);
  for (std::size_t i : {std::size_t(0), std::size_t(517), std::size_t(999)}) {
    auto b = a;
    uint32_t bits;
    std::memcpy(&bits, &b[i], 4);
    bits ^= 1u;  // the lowest mantissa bit
    std::memcpy(&b[i], &bits, 4);
    CHECK(checksum64(b) != h);
  }
  const float x[2] = {1.0f, 2.0f};
  const float y[2] = {2.0f, 1.0f};
  CHECK(checksum64(x) != checksum64(y));
  CHECK(checksum64(std::span<const float>(a.data(), 999)) != h);
}
