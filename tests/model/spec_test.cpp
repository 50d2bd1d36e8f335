// The spec grammar's loss heads, linear and activations, and resolveSpec().
#include <catch2/catch.hpp>
#include <string>

#include "starling/model/model.hpp"

using starling::StatusCode;
using starling::data::TaskKind;
using starling::model::LossKind;
using starling::model::Model;
using starling::model::resolveSpec;

TEST_CASE("loss suffixes, linear and activations parse to canonical specs", "[model][spec]") {
  struct Case {
    const char* spec;
    const char* canonical;
    TaskKind task;
    LossKind loss;
    int outputs;
    std::size_t params;
  };
  const Case cases[] = {
      {"mlp:784-200-200-10", "mlp:784-200-200-10", TaskKind::kClassification, LossKind::kCrossEntropy, 10,
       784 * 200 + 200 + 200 * 200 + 200 + 200 * 10 + 10},
      {"mlp:784-10/ce", "mlp:784-10", TaskKind::kClassification, LossKind::kCrossEntropy, 10, 7850},
      {"mlp:relu:784-10", "mlp:784-10", TaskKind::kClassification, LossKind::kCrossEntropy, 10, 7850},
      {"mlp:tanh:784-64-10", "mlp:tanh:784-64-10", TaskKind::kClassification, LossKind::kCrossEntropy, 10,
       784 * 64 + 64 + 64 * 10 + 10},
      {"mlp:sigmoid:8-4-1/logistic", "mlp:sigmoid:8-4-1/logistic", TaskKind::kBinary, LossKind::kLogistic, 1, 41},
      {"linear:30-1/logistic", "linear:30-1/logistic", TaskKind::kBinary, LossKind::kLogistic, 1, 31},
      {"linear:13-1/mse", "linear:13-1/mse", TaskKind::kRegression, LossKind::kSquaredError, 1, 14},
      {"linear:13-1/huber:1.0", "linear:13-1/huber:1", TaskKind::kRegression, LossKind::kHuber, 1, 14},
      {" linear:784-10 ", "linear:784-10", TaskKind::kClassification, LossKind::kCrossEntropy, 10, 7850},
      {"cnn:1x8x8-c2k3-p2-f4-1/mse", "cnn:1x8x8-c2k3-p2-f4-1/mse", TaskKind::kRegression, LossKind::kSquaredError, 1,
       2 * 9 + 2 + 2 * 3 * 3 * 4 + 4 + 4 + 1},
      {"cnn:1x28x28-c16k5-p2-c32k5-p2-f128-10", "cnn:1x28x28-c16k5-p2-c32k5-p2-f128-10", TaskKind::kClassification,
       LossKind::kCrossEntropy, 10, 16 * 25 + 16 + 32 * 16 * 25 + 32 + 32 * 4 * 4 * 128 + 128 + 128 * 10 + 10},
      // 1-D: 3 channels x 32 samples; k5 s2 z2: 16 outputs; a2: 8; 4 x 8 -> 10.
      {"cnn:3x32-c4k5s2z2-a2-10", "cnn:3x32-c4k5s2z2-a2-10", TaskKind::kClassification, LossKind::kCrossEntropy, 10,
       4 * 3 * 5 + 4 + 4 * 8 * 10 + 10},
      // Canonical: s1 and the ReLU after a linear conv fold away, numbers lose their
      // zeros, eps 1e-5 is plain b, floats in shortest fixed form.
      {"cnn:1x8x8-c02k3s1l-r-b-lr0.010-clip0_6.0-be0.00100-g-t-sg-r-3",
       "cnn:1x8x8-c2k3-b-lr0.01-clip0_6-be0.001-g-t-sg-r-3", TaskKind::kClassification, LossKind::kCrossEntropy, 3,
       2 * 9 + 2 + 4 * 2 + 4 * 2 + 2 * 3 + 3},
      {"cnn:1x8x8-c2k3l-clipn1_1-3", "cnn:1x8x8-c2k3l-clipn1_1-3", TaskKind::kClassification, LossKind::kCrossEntropy,
       3, 2 * 9 + 2 + 2 * 36 * 3 + 3},
      {"cnn:1x8x8-c2k3-be0.00001-3", "cnn:1x8x8-c2k3-b-3", TaskKind::kClassification, LossKind::kCrossEntropy, 3,
       2 * 9 + 2 + 4 * 2 + 2 * 36 * 3 + 3},
  };
  for (const Case& c : cases) {
    DYNAMIC_SECTION(c.spec) {
      auto m = Model::fromSpec(c.spec);
      REQUIRE(m.isOk());
      CHECK(m->spec() == c.canonical);
      CHECK(m->task() == c.task);
      CHECK(m->lossKind() == c.loss);
      CHECK(m->numClasses() == c.outputs);
      CHECK(m->numParams() == c.params);
      // The canonical spec is a fixed point.
      auto again = Model::fromSpec(m->spec());
      REQUIRE(again.isOk());
      CHECK(again->spec() == m->spec());
    }
  }
}

TEST_CASE("wrong heads and forms are refused naming the token", "[model][spec]") {
  struct Case {
    const char* spec;
    const char* mentions;
  };
  const Case cases[] = {
      {"mlp:8-4-3/logistic", "'/logistic' needs one output, not 3"},
      {"linear:8-2/mse", "'/mse' needs one output, not 2"},
      {"linear:8-2/huber:1", "'/huber:1' needs one output"},
      {"linear:8-1/huber:0", "'/huber:0' needs a finite delta > 0"},
      {"linear:8-1/huber:-2", "'/huber:-2'"},
      {"linear:8-1/huber:", "'/huber:'"},
      {"linear:8-1/huber:1x", "'/huber:1x'"},
      {"linear:8-1/hinge", "unknown loss '/hinge'"},
      {"linear:8-1", "at least 2 classes"},
      {"linear:8-1/ce", "at least 2 classes"},
      {"linear:8-4-2", "'linear' is one dense layer"},
      {"linear:8", "number of classes"},
      {"mlp:gelu:8-4-2", "input 'gelu:8'"},
      {"rnn:8-2", "unknown kind 'rnn'"},
  };
  for (const Case& c : cases) {
    DYNAMIC_SECTION(c.spec) {
      auto m = Model::fromSpec(c.spec);
      REQUIRE_FALSE(m.isOk());
      CHECK(m.status().code() == StatusCode::kInvalidArgument);
      CHECK_THAT(m.status().message(), Catch::Contains(c.mentions));
    }
  }
}

TEST_CASE("initialization: He for relu, Glorot for tanh and sigmoid", "[model][spec]") {
  // The largest weight magnitude approaches the uniform bound of each scheme.
  auto maxAbs = [](const Model& m, const char* tensor) {
    const auto* t = m.layout().find(tensor);
    REQUIRE(t != nullptr);
    float a = 0.0f;
    for (std::size_t i = 0; i < t->size; ++i)
      a = std::max(a, std::abs(m.params()[t->offset + i]));
    return a;
  };
  for (const char* spec : {"mlp:400-400-10", "mlp:tanh:400-400-10", "mlp:sigmoid:400-400-10"}) {
    DYNAMIC_SECTION(spec) {
      auto m = Model::fromSpec(spec);
      REQUIRE(m.isOk());
      m->initialize(5);
      const bool relu = std::string(spec) == "mlp:400-400-10";
      const float bound = relu ? std::sqrt(6.0f / 400.0f) : std::sqrt(6.0f / 800.0f);
      const float got = maxAbs(*m, "dense0.weight");
      CHECK(got <= bound);
      CHECK(got > 0.99f * bound);
      // The last layer is Glorot everywhere.
      CHECK(maxAbs(*m, "dense1.weight") <= std::sqrt(6.0f / 410.0f));
    }
  }
}

TEST_CASE("resolveSpec fills short forms from the data and checks full ones", "[model][spec]") {
  struct Case {
    const char* spec;
    TaskKind task;
    std::size_t in;
    int classes;
    float huber;
    const char* resolved;
  };
  const Case ok[] = {
      {"linear", TaskKind::kClassification, 784, 10, 0, "linear:784-10"},
      {"linear", TaskKind::kBinary, 30, 2, 0, "linear:30-1/logistic"},
      {"linear", TaskKind::kRegression, 13, 1, 0, "linear:13-1/mse"},
      {"linear", TaskKind::kRegression, 13, 1, 2.5f, "linear:13-1/huber:2.5"},
      {"linear/huber:0.5", TaskKind::kRegression, 13, 1, 0, "linear:13-1/huber:0.5"},
      {"linear/mse", TaskKind::kRegression, 13, 1, 2.5f, "linear:13-1/mse"},
      {"mlp:hidden:64-32", TaskKind::kClassification, 784, 10, 0, "mlp:784-64-32-10"},
      {"mlp:tanh:hidden:64", TaskKind::kBinary, 20, 2, 0, "mlp:tanh:20-64-1/logistic"},
      {"mlp:relu:hidden:8", TaskKind::kRegression, 5, 1, 0, "mlp:5-8-1/mse"},
      {"mlp:784-200-10", TaskKind::kClassification, 784, 10, 0, "mlp:784-200-10"},
      {"mlp:784-200-10/ce", TaskKind::kClassification, 784, 10, 0, "mlp:784-200-10"},
      {"mlp:20-8-1", TaskKind::kBinary, 20, 2, 0, "mlp:20-8-1/logistic"},
      {"cnn:1x28x28-c16k5-p2-f128-10", TaskKind::kClassification, 784, 10, 0, "cnn:1x28x28-c16k5-p2-f128-10"},
  };
  for (const Case& c : ok) {
    DYNAMIC_SECTION(c.spec << " -> " << c.resolved) {
      auto r = resolveSpec(c.spec, c.task, c.in, c.classes, c.huber);
      INFO((r.isOk() ? std::string() : r.status().message()));
      REQUIRE(r.isOk());
      CHECK(*r == c.resolved);
      auto m = Model::fromSpec(*r);
      REQUIRE(m.isOk());
      CHECK(m->task() == c.task);
    }
  }
  struct Bad {
    const char* spec;
    TaskKind task;
    std::size_t in;
    int classes;
    const char* mentions;
  };
  const Bad bad[] = {
      {"mlp:784-200-10", TaskKind::kClassification, 785, 10, "takes 784 inputs but the data has 785"},
      {"mlp:784-200-10", TaskKind::kClassification, 784, 12, "has 10 outputs but the classification task needs 12"},
      {"mlp:784-200-2", TaskKind::kBinary, 784, 2, "has 2 outputs but the binary task needs 1"},
      {"linear/mse", TaskKind::kBinary, 30, 2, "loss '/mse' is for regression but the task is binary"},
      {"linear/logistic", TaskKind::kClassification, 30, 3, "is for binary but the task is classification"},
      {"linear/ce", TaskKind::kRegression, 30, 1, "is for classification but the task is regression"},
      {"mlp:hidden:", TaskKind::kClassification, 30, 3, "needs layer widths"},
      {"mlp:hidden:64-x", TaskKind::kClassification, 30, 3, "'x'"},
      {"linear", TaskKind::kClassification, 30, 1, "at least 2 classes"},
      {"cnn:1x28x28-c16k5-p2-f128-10", TaskKind::kClassification, 100, 10, "takes 784 inputs"},
  };
  for (const Bad& c : bad) {
    DYNAMIC_SECTION("refused: " << c.spec) {
      auto r = resolveSpec(c.spec, c.task, c.in, c.classes);
      REQUIRE_FALSE(r.isOk());
      CHECK(r.status().code() == StatusCode::kInvalidArgument);
      CHECK_THAT(r.status().message(), Catch::Contains(c.mentions));
    }
  }
}
